#include "daemon/model/user_quotas.hpp"

#include <system_error>

namespace nexus::model {
namespace {

std::string mib(std::uint64_t b) { return std::to_string(b >> 20) + " MiB"; }

}  // namespace

// A checkpoint is <tag>.safetensors plus its <tag>.json manifest.
std::uint64_t UserQuotas::bytes_on_disk(const std::filesystem::path& path) {
  std::uint64_t total = 0;
  for (const char* ext : {".safetensors", ".json"}) {
    std::error_code ec;
    const auto n = std::filesystem::file_size(path.string() + ext, ec);
    if (!ec) total += n;
  }
  return total;
}

UserQuotas::User& UserQuotas::user(std::uint32_t uid) {
  User& u = users_[uid];
  if (u.scanned) return u;
  u.scanned = true;
  std::error_code ec;
  const auto root = state_dir_ / "tenants" / std::to_string(uid);
  for (const auto& tenant : std::filesystem::directory_iterator(root, ec)) {
    std::error_code inner;
    for (const auto& f : std::filesystem::directory_iterator(tenant.path() / "checkpoints", inner))
      if (f.path().extension() == ".safetensors") {
        const auto base = f.path().parent_path() / f.path().stem();
        u.checkpoints[base.string()] = bytes_on_disk(base);
      }
  }
  return u;
}

std::optional<std::string> UserQuotas::take_slot(std::uint32_t uid) {
  std::lock_guard lk(mu_);
  User& u = user(uid);
  if (u.slots >= limits_.slots)
    return "Unix user " + std::to_string(uid) + " has " + std::to_string(u.slots) +
           " slots resident, the most one user may ([model] max_slots_per_uid); release a tenant name or wait for "
           "idle eviction of a detached one";
  ++u.slots;
  return std::nullopt;
}

void UserQuotas::give_slot(std::uint32_t uid) {
  std::lock_guard lk(mu_);
  User& u = user(uid);
  if (u.slots > 0) --u.slots;
}

std::optional<std::string> UserQuotas::check_checkpoint(std::uint32_t uid, const std::filesystem::path& path,
                                                        std::uint64_t bytes) {
  std::lock_guard lk(mu_);
  User& u = user(uid);
  auto it = u.checkpoints.find(path.string());
  const bool replacing = it != u.checkpoints.end();
  if (!replacing && u.checkpoints.size() >= limits_.checkpoints)
    return "Unix user " + std::to_string(uid) + " has " + std::to_string(u.checkpoints.size()) +
           " checkpoints, the most one user may ([model] max_checkpoints_per_uid); overwrite a tag";
  std::uint64_t held = 0;
  for (const auto& [p, b] : u.checkpoints) held += b;
  const std::uint64_t after = held - (replacing ? it->second : 0) + bytes;
  if (after > limits_.checkpoint_bytes)
    return "this checkpoint (about " + mib(bytes) + ") would take Unix user " + std::to_string(uid) + "'s checkpoints to " +
           mib(after) + ", over its " + mib(limits_.checkpoint_bytes) + " ([model] checkpoint_mib_per_uid)";
  return std::nullopt;
}

void UserQuotas::saved_checkpoint(std::uint32_t uid, const std::filesystem::path& path) {
  const auto bytes = bytes_on_disk(path);
  std::lock_guard lk(mu_);
  user(uid).checkpoints[path.string()] = bytes;
}

std::vector<UserUsage> UserQuotas::usage() const {
  std::lock_guard lk(mu_);
  std::vector<UserUsage> out;
  for (const auto& [uid, u] : users_) {
    UserUsage x;
    x.uid = uid;
    x.slots = u.slots;
    x.checkpoints = u.checkpoints.size();
    for (const auto& [p, b] : u.checkpoints) x.checkpoint_bytes += b;
    out.push_back(x);
  }
  return out;
}

}  // namespace nexus::model
