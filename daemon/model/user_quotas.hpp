// Per Unix user bounds on what the model service keeps for its tenants, over all their tenants
// and every replica: slots resident in memory, checkpoint tags (a tenant's checkpoints by tag, in
// tenants/<uid>/<tenant>/checkpoints/) and their bytes on disk. A request beyond a bound gets
// QuotaExceeded naming it; what already exists is never touched. `nexusctl usage` shows each
// user's use against the bounds.
//
// Checkpoint use is read from the disk the first time a user is seen (so it survives restarts)
// and kept up to date by the saves that go through here. The slots a detached tenant keeps
// resident count until idle eviction checkpoints them; the daemon's own checkpoints (eviction,
// a stop) are not charged: they are bounded by the slots.
//
// Thread safety: every member may be called from any thread (the replicas' executors).
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace nexus::model {

struct UserLimits {
  std::size_t slots = 32;                        // [model] max_slots_per_uid
  std::size_t checkpoints = 256;                 // [model] max_checkpoints_per_uid
  std::uint64_t checkpoint_bytes = 4ull << 30;   // [model] checkpoint_mib_per_uid
};

struct UserUsage {
  std::uint32_t uid = 0;
  std::size_t slots = 0, checkpoints = 0;
  std::uint64_t checkpoint_bytes = 0;
};

class UserQuotas {
 public:
  UserQuotas(std::filesystem::path state_dir, UserLimits limits) : state_dir_(std::move(state_dir)), limits_(limits) {}

  // A resident slot for one of `uid`'s tenants; the reason it is refused, or nullopt (taken).
  std::optional<std::string> take_slot(std::uint32_t uid);
  void give_slot(std::uint32_t uid);

  // Before writing a checkpoint of about `bytes` at `path` (its .safetensors; the tag's files
  // already there are replaced): the reason it is refused, or nullopt.
  std::optional<std::string> check_checkpoint(std::uint32_t uid, const std::filesystem::path& path, std::uint64_t bytes);
  // After writing it: its files' bytes on disk.
  void saved_checkpoint(std::uint32_t uid, const std::filesystem::path& path);

  std::vector<UserUsage> usage() const;
  const UserLimits& limits() const { return limits_; }

 private:
  struct User {
    bool scanned = false;
    std::size_t slots = 0;
    std::map<std::string, std::uint64_t> checkpoints;  // path (without extension) -> bytes
  };
  User& user(std::uint32_t uid);  // holds mu_; scans its checkpoints the first time
  static std::uint64_t bytes_on_disk(const std::filesystem::path& path);

  const std::filesystem::path state_dir_;
  const UserLimits limits_;
  mutable std::mutex mu_;
  std::map<std::uint32_t, User> users_;  // GUARDED_BY(mu_)
};

}  // namespace nexus::model
