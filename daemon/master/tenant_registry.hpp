// Tenant names and who owns them. A name is bound to the uid that first attached it, for the
// daemon's lifetime; at most one connection holds a name at a time.
//
// Thread safety: not synchronized; owned by the reactor thread.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <map>
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

  // Claims `name` for a connection of `uid`. Fails if the name is bound to another uid,
  // already attached, or malformed.
  Claim claim(const std::string& name, uid_t uid);
  void release(const std::string& name);
  std::size_t attached() const { return attached_count_; }

 private:
  struct Entry {
    uid_t owner;
    bool attached;
  };
  std::map<std::string, Entry> names_;
  std::size_t attached_count_ = 0;
  std::uint64_t next_session_ = 1;
};

// Names are 1-64 characters of [A-Za-z0-9._-], so they are safe in logs and paths.
bool valid_tenant_name(const std::string& name);

}  // namespace nexus::daemon
