// Tenant names and who owns them. A name is bound to the uid that first attached it until root
// or that uid releases it (nexusctl tenant release); at most one connection holds a name at a
// time. With a bindings file the bindings survive restarts: loaded at start, written (atomically,
// 0600) on every change, so that after a restart nobody else can attach as a tenant first and
// reach its checkpoints.
//
// Thread safety: not synchronized; owned by the reactor thread.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "nexus/wire/nexus_generated.h"

namespace nexus::daemon {

class TenantRegistry {
 public:
  struct Claim {
    wire::ErrorCode code = wire::ErrorCode::None;
    std::string reason;
    std::uint64_t session_id = 0;  // fresh for every successful claim
  };

  // `bindings_file` empty: bindings last as long as the daemon. Else they are loaded from it
  // (throws std::runtime_error if it exists and cannot be read: refusing to start beats
  // forgetting who owns what) and written back on every change.
  explicit TenantRegistry(std::filesystem::path bindings_file = {});

  // Claims `name` for a connection of `uid`. Fails if the name is bound to another uid,
  // already attached, or malformed.
  Claim claim(const std::string& name, uid_t uid);
  void release(const std::string& name);  // the connection ended; the binding stays
  // Unbinds a name for `requester` (root or its owner) while nobody is attached as it.
  Claim unbind(const std::string& name, uid_t requester);
  std::optional<uid_t> owner(const std::string& name) const;
  std::size_t attached() const { return attached_count_; }

 private:
  struct Entry {
    uid_t owner;
    bool attached;
  };
  void save() const;
  const std::filesystem::path file_;
  std::map<std::string, Entry> names_;
  std::size_t attached_count_ = 0;
  std::uint64_t next_session_ = 1;
};

// Names are 1-64 characters of [A-Za-z0-9._-], so they are safe in logs and paths.
bool valid_tenant_name(const std::string& name);

}  // namespace nexus::daemon
