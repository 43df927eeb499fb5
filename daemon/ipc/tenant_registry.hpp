// Tenant names and who owns them. A name is bound to the uid that first attached it until root
// or that uid releases it (nexusctl tenant release); at most one connection holds a name at a
// time. Names follow schema/names.hpp (one ordinary path component).
//
// Bounds: names per Unix user and names in all (RegistryLimits; QuotaExceeded beyond), so one
// user cannot grow the daemon's state or the bindings file without end.
//
// Persistence: with a bindings file the bindings survive restarts. Loaded at start; every change
// is handed to a BatchedWriter, which rewrites the file (atomically, 0600) on its own thread: the
// reactor never waits for a disk, and a burst of new names costs a few writes, not one each. A
// binding made just before a crash may be lost; that costs its owner the name, never its files:
// checkpoints live under a directory of the owner's uid (tenants/<uid>/<name>), which another
// uid claiming the name later never reaches.
//
// Thread safety: not synchronized; owned by the reactor thread (the writer has its own).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "daemon/state/batched_writer.hpp"
#include "daemon/sync/mutex.hpp"
#include "nexus/wire/nexus_generated.h"

namespace nexus::daemon {

struct RegistryLimits {
  std::size_t names_per_uid = 1024;  // [daemon] max_names_per_uid
  std::size_t names_total = 16384;   // [daemon] max_names
};

class TenantRegistry {
 public:
  struct Claim {
    wire::ErrorCode code = wire::ErrorCode::None;
    std::string reason;
    std::uint64_t session_id = 0;  // fresh for every successful claim
  };

  // `bindings_file` empty: bindings last as long as the daemon. Else they are loaded from it
  // (throws std::runtime_error if it exists and cannot be read: refusing to start beats
  // forgetting who owns what; a name the rule no longer admits is dropped with a warning).
  explicit TenantRegistry(std::filesystem::path bindings_file = {}, RegistryLimits limits = {});

  // Claims `name` for a connection of `uid`. Fails if the name is malformed, bound to another
  // uid, already attached, or would take its user or the daemon over a bound.
  Claim claim(const std::string& name, uid_t uid);
  void release(const std::string& name);  // the connection ended; the binding stays
  // Unbinds a name for `requester` (root or its owner) while nobody is attached as it.
  Claim unbind(const std::string& name, uid_t requester);
  std::optional<uid_t> owner(const std::string& name) const;
  std::size_t attached() const { return attached_count_; }
  std::size_t names_of(uid_t uid) const;
  const std::map<uid_t, std::size_t>& names_by_uid() const { return per_uid_; }
  const RegistryLimits& limits() const { return limits_; }
  // Waits until the bindings are on disk (tests; the daemon's exit). True if they are.
  bool flush();

 private:
  struct Entry {
    uid_t owner;
    bool attached;
  };
  void persist(const std::string& name, std::optional<uid_t> owner);  // O(log n): the writer renders
  std::string render() const;                                         // the writer's thread

  const RegistryLimits limits_;
  std::map<std::string, Entry> names_;
  // The writer's copy of the bindings: changed here (O(log n)) and rendered on its thread.
  mutable Mutex mirror_mu_;
  std::map<std::string, uid_t> mirror_ NEXUS_GUARDED_BY(mirror_mu_);
  std::map<uid_t, std::size_t> per_uid_;  // names bound to each uid
  std::size_t attached_count_ = 0;
  std::uint64_t next_session_ = 1;
  std::unique_ptr<BatchedWriter> writer_;  // null without a bindings file
};

}  // namespace nexus::daemon
