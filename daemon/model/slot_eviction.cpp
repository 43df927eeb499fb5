// The slot registry's evictions: an idle detached slot, or an owner's longest-detached one at its
// bound, goes to its checkpoint file ("evicted") and leaves memory; at a stop every changed slot
// is written. A slot whose file cannot be written stays resident. And releases: a released
// name's slot and eviction file go.
#include <malloc.h>

#include "daemon/log/log_text.hpp"
#include "daemon/model/slot_registry.hpp"

namespace nexus::model::detail {

using daemon::log_text;
using daemon::LogLevel;

bool SlotRegistry::write_eviction_file(const std::string& tenant, SlotEntry& e) {
  if (!e.dirty()) return true;  // the file holds it already
  try {
    const auto path = tenant_dir(e.uid, tenant) / "evicted";
    e.trainer->save(path.string(), {{"tenant", tenant}, {"uid", e.uid}, {"views", e.views}});
  } catch (const std::exception& ex) {
    log_text(LogLevel::Error, "slot_checkpoint_failed", "tenant=" + tenant + " reason=\"" + ex.what() + "\"");
    return false;
  }
  e.saved_steps = e.trainer->steps();
  e.saved_version = e.trainer->latest_version();
  return true;
}

void SlotRegistry::evict_idle(std::chrono::steady_clock::time_point now) {
  std::lock_guard map_lk(map_mu_);
  std::vector<std::string> due;
  {
    MutexLock lk(mu_);
    for (auto it = detached_.begin(); it != detached_.end();) {
      // A running evaluation keeps it; so does a turn that still runs it (a lane's lease).
      if (now - it->second < config_.idle_evict || pins_.count(it->first) || leases_.busy(it->first)) {
        ++it;
        continue;
      }
      due.push_back(it->first);
      it = detached_.erase(it);
    }
  }
  std::size_t evicted = 0;
  for (const auto& tenant : due) {
    auto it = slots_.find(tenant);
    if (it == slots_.end()) continue;
    const auto uid = it->second.uid;
    if (!write_eviction_file(tenant, it->second)) continue;  // kept resident: memory is cheaper than a lost slot
    drop(tenant);
    evicted_[tenant] = uid;
    ++evicted;
    log_text(LogLevel::Info, "slot_evicted", "tenant=" + tenant);
  }
  // glibc keeps freed memory in the arena of the thread that freed it (the soak measured 3.9x the
  // idle daemon's RSS after every slot was evicted); trimming returns what eviction freed.
  if (evicted > 0) ::malloc_trim(0);
}

bool SlotRegistry::evict_longest_detached(std::uint32_t uid, const std::string& except) {
  std::lock_guard map_lk(map_mu_);  // its caller (place) holds it already: recursive
  std::optional<std::pair<std::chrono::steady_clock::time_point, std::string>> oldest;
  {
    MutexLock lk(mu_);
    for (const auto& [t, since] : detached_) {
      auto s = slots_.find(t);
      if (t == except || s == slots_.end() || s->second.uid != uid || pins_.count(t) || leases_.busy(t)) continue;
      if (!oldest || since < oldest->first) oldest = {since, t};
    }
  }
  if (!oldest) return false;
  const auto& t = oldest->second;
  auto s = slots_.find(t);
  if (!write_eviction_file(t, s->second)) return false;
  drop(t);
  evicted_[t] = uid;
  {
    MutexLock lk(mu_);
    detached_.erase(t);
  }
  log_text(LogLevel::Info, "slot_evicted", "tenant=" + t + " reason=\"its owner's slot bound\"");
  return true;
}

std::size_t SlotRegistry::checkpoint_all() {
  std::lock_guard map_lk(map_mu_);
  std::size_t written = 0;
  for (auto& [tenant, e] : slots_) {
    if (!e.dirty()) continue;
    if (write_eviction_file(tenant, e)) {
      ++written;
      log_text(LogLevel::Info, "slot_checkpointed", "tenant=" + tenant + " step=" + std::to_string(e.trainer->steps()));
    }
  }
  return written;
}

void SlotRegistry::apply_releases(const SlotLease& own) {
  std::lock_guard map_lk(map_mu_);
  std::set<std::string> names;
  {
    MutexLock lk(mu_);
    names.swap(released_);
    for (auto it = names.begin(); it != names.end();)
      if (!own.holds(*it) && leases_.busy(*it)) {  // another lane's turn runs it: later
        released_.insert(*it);
        it = names.erase(it);
      } else {
        ++it;
      }
  }
  for (const auto& t : names) {
    drop(t);
    evicted_.erase(t);
    // Its eviction file, under whichever uid held it (a restart forgets which): the name's next
    // owner starts with no slot, and its last owner too if it claims the name again.
    std::error_code ec;
    for (const auto& owner : std::filesystem::directory_iterator(std::filesystem::path(config_.state_dir) / "tenants", ec)) {
      const auto uid = owner.path().filename().string();
      if (uid.empty() || uid.size() > 10 || uid.find_first_not_of("0123456789") != std::string::npos) continue;
      remove_eviction_file(static_cast<std::uint32_t>(std::stoull(uid)), t);
    }
  }
  if (!names.empty()) ::malloc_trim(0);  // as after eviction: give the freed heads back to the system
}

}  // namespace nexus::model::detail
