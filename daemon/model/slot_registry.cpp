#include "daemon/model/slot_registry.hpp"

#include <malloc.h>

#include "daemon/log/log_text.hpp"
#include "daemon/model/request_binding.hpp"
#include "daemon/state/private_files.hpp"
#include "schema/names.hpp"

namespace nexus::model::detail {

using daemon::log_text;
using daemon::LogLevel;

SlotRegistry::SlotRegistry(const ModelConfig& config, const BackboneConfig& backbone, torch::Device device,
                           UserQuotas& quotas, bool adapters)
    : config_(config), backbone_(backbone), device_(device), quotas_(quotas), adapters_(adapters) {}

namespace {
// Where a tenant's files are, without creating anything (tenant_dir creates).
std::filesystem::path tenant_path(const std::string& state_dir, std::uint32_t uid, const std::string& tenant) {
  if (!schema::valid_name(tenant)) throw std::invalid_argument("tenant name '" + tenant + "' is not a valid name");
  return std::filesystem::path(state_dir) / "tenants" / std::to_string(uid) / tenant;
}
}  // namespace

// Tags are checked by the decoder and tenant names by the tenant registry, both by
// schema::valid_name; checked again here, where they become a path. One directory per owner and
// tenant: a name another uid holds later (after a release) never reaches the files of the uid
// that held it before.
std::filesystem::path SlotRegistry::tenant_dir(std::uint32_t uid, const std::string& tenant) const {
  const auto dir = tenant_path(config_.state_dir, uid, tenant);
  const auto root = std::filesystem::path(config_.state_dir) / "tenants";
  daemon::ensure_private_dir(root);
  daemon::ensure_private_dir(root / std::to_string(uid));
  daemon::ensure_private_dir(dir);
  return dir;
}

// At its owner's bound, the owner's longest-detached resident slot (here) is evicted early to
// make room: a user who runs tenant after tenant is not refused for the ones that left; only
// attached tenants' slots (and pinned ones) hold the bound.
Failure SlotRegistry::missing(const std::string& refused) {
  if (!refused.empty()) return Failure{Fault::OverQuota, refused};
  return Failure{Fault::NotRegistered, "register the tenant first"};
}

std::optional<Failure> SlotRegistry::place(const std::string& tenant, SlotEntry entry) {
  auto it = slots_.find(tenant);
  if (it == slots_.end() || it->second.uid != entry.uid) {
    auto refused = quotas_.take_slot(entry.uid);
    if (refused && evict_longest_detached(entry.uid, tenant)) refused = quotas_.take_slot(entry.uid);
    if (refused) return Failure{Fault::OverQuota, *refused};
    it = slots_.find(tenant);  // the eviction may have changed the map
    if (it != slots_.end()) quotas_.give_slot(it->second.uid);
  }
  slots_[tenant] = std::move(entry);
  return std::nullopt;
}

void SlotRegistry::drop(const std::string& tenant) {
  auto it = slots_.find(tenant);
  if (it == slots_.end()) return;
  quotas_.give_slot(it->second.uid);
  slots_.erase(it);
}

SlotEntry* SlotRegistry::find(const std::string& tenant, std::string* refused) {
  std::lock_guard map_lk(map_mu_);
  auto it = slots_.find(tenant);
  if (it != slots_.end()) return &it->second;
  std::optional<std::uint32_t> uid;
  if (auto ev = evicted_.find(tenant); ev != evicted_.end()) {
    uid = ev->second;
  } else {
    MutexLock lk(mu_);
    if (auto o = owners_.find(tenant); o != owners_.end()) uid = o->second;
  }
  if (!uid) return nullptr;
  try {
    const auto path = tenant_path(config_.state_dir, *uid, tenant) / "evicted";
    if (!std::filesystem::exists(path.string() + ".safetensors")) {
      evicted_.erase(tenant);
      return nullptr;  // never registered (or released): the tenant registers
    }
    auto loaded = TenantSlot::load(path.string(), backbone_.dim, device_);
    const std::int64_t views = loaded.manifest.at("extra").value("views", 1);
    const auto steps = loaded.slot->steps();
    const auto version = loaded.slot->latest_version();
    if (auto f = place(tenant, SlotEntry{std::move(loaded.slot), views, *uid, steps, version})) {
      if (refused) *refused = f->reason;
      return nullptr;
    }
    evicted_.erase(tenant);
    log_text(LogLevel::Info, "slot_restored", "tenant=" + tenant + " step=" + std::to_string(steps));
    return &slots_.at(tenant);  // its eviction file stays: it is what the slot holds until it changes
  } catch (const std::exception& ex) {
    log_text(LogLevel::Error, "slot_restore_failed", "tenant=" + tenant + " reason=\"" + ex.what() + "\"");
    return nullptr;
  }
}

void SlotRegistry::remove_eviction_file(std::uint32_t uid, const std::string& tenant) {
  std::error_code ec;
  const auto path = tenant_path(config_.state_dir, uid, tenant) / "evicted";
  std::filesystem::remove(path.string() + ".safetensors", ec);
  std::filesystem::remove(path.string() + ".json", ec);
}

Result SlotRegistry::register_tenant(const std::string& tenant, std::uint32_t uid, const op::Register& asked) {
  std::lock_guard map_lk(map_mu_);
  if (auto f = check_registration(asked, backbone_)) return *f;
  op::Register r = asked;
  if (auto& a = r.head.adapter; a.rank > 0) {
    if (!adapters_)
      return Failure{Fault::BadRequest, "this backbone takes no adapters (a TorchScript or AOTInductor graph does not "
                                        "name its projections): register the head alone (adapter rank 0)"};
    a.layers = backbone_.layers, a.dim = backbone_.dim, a.mlp_hidden = backbone_.mlp_ratio * backbone_.dim;
  }
  std::unique_ptr<TenantSlot> slot;
  try {
    slot = std::make_unique<TenantSlot>(r.head, r.optimizer, backbone_.dim, r.seed, device_);
  } catch (const std::invalid_argument& e) {
    return Failure{Fault::BadRequest, e.what()};
  }
  if (auto f = place(tenant, SlotEntry{std::move(slot), r.views, uid})) return *f;
  evicted_.erase(tenant);  // a fresh registration replaces an evicted slot too,
  remove_eviction_file(uid, tenant);  // after a crash as well
  const auto& h = r.head;
  log_text(LogLevel::Info, "register",
           "tenant=" + tenant + " head=" + h.kind + " views=" + std::to_string(r.views) + " state_dim=" +
               std::to_string(h.state_dim) + " action_dim=" + std::to_string(h.action_dim) + " chunk=" +
               std::to_string(h.chunk) + " adapter_rank=" + std::to_string(h.adapter.rank));
  return BackboneInfo{backbone_.name, backbone_.image_size, backbone_.max_views, backbone_.max_tokens, backbone_.dim};
}

void SlotRegistry::retain(const std::string& tenant, TenantSlot& slot) {
  std::set<std::uint64_t> pinned;
  {
    MutexLock lk(mu_);
    auto it = pins_.find(tenant);
    if (it != pins_.end())
      for (const auto& [v, count] : it->second) pinned.insert(v);
    if (auto k = kept_.find(tenant); k != kept_.end()) pinned.insert(k->second.begin(), k->second.end());
  }
  // Dropped versions free megabytes at a time, often on another thread than allocated them;
  // glibc keeps such memory in its arenas, so a tenant publishing in a loop would grow the
  // daemon's RSS (14% over 1 900 publishes in a fresh root) although nothing leaks. Trimming
  // hands the freed pages back to the system.
  if (slot.retain(static_cast<std::size_t>(std::max(1, config_.versions_kept)), pinned) > 0) ::malloc_trim(0);
}

void SlotRegistry::retain_versions(const std::string& tenant) {
  std::lock_guard map_lk(map_mu_);
  auto it = slots_.find(tenant);
  if (it != slots_.end()) retain(tenant, *it->second.trainer);
}

Result SlotRegistry::publish(const std::string& tenant) {
  std::lock_guard map_lk(map_mu_);
  std::string refused;
  SlotEntry* e = find(tenant, &refused);
  if (!e) return missing(refused);
  const auto v = e->trainer->publish();
  retain(tenant, *e->trainer);
  return Published{v};
}

Result SlotRegistry::digest(const std::string& tenant) {
  std::lock_guard map_lk(map_mu_);
  std::string refused;
  SlotEntry* e = find(tenant, &refused);
  if (!e) return missing(refused);
  const auto d = e->trainer->digest();
  return SlotDigest{d.parameters, d.optimizer, static_cast<std::uint64_t>(d.step), e->trainer->latest_version()};
}

Result SlotRegistry::save(const std::string& tenant, std::uint32_t uid, const std::string& tag) {
  std::lock_guard map_lk(map_mu_);
  if (!schema::valid_name(tag)) return Failure{Fault::BadRequest, std::string("checkpoint tags are ") + schema::kNameRule};
  std::string refused;
  SlotEntry* e = find(tenant, &refused);
  if (!e) return missing(refused);
  std::filesystem::path path;
  try {
    const auto dir = tenant_dir(uid, tenant) / "checkpoints";
    daemon::ensure_private_dir(dir);
    path = dir / tag;
    if (auto why = quotas_.check_checkpoint(uid, path, e->trainer->checkpoint_bytes())) return Failure{Fault::OverQuota, *why};
    e->trainer->save(path.string(), {{"tenant", tenant}, {"uid", uid}, {"views", e->views}});
  } catch (const std::exception& ex) {
    return Failure{Fault::Internal, std::string("cannot save checkpoint: ") + ex.what()};
  }
  quotas_.saved_checkpoint(uid, path);
  log_text(LogLevel::Info, "checkpoint_saved", "tenant=" + tenant + " path=" + path.string());
  return Saved{static_cast<std::uint64_t>(e->trainer->steps())};
}

Result SlotRegistry::load(const std::string& tenant, std::uint32_t uid, const std::string& tag) {
  std::lock_guard map_lk(map_mu_);
  if (!schema::valid_name(tag)) return Failure{Fault::BadRequest, std::string("checkpoint tags are ") + schema::kNameRule};
  std::filesystem::path path;
  try {
    path = tenant_path(config_.state_dir, uid, tenant) / "checkpoints" / tag;
  } catch (const std::exception& ex) {
    return Failure{Fault::Internal, ex.what()};
  }
  // Only the owner's own directory is looked in: another uid's checkpoint is not "forbidden",
  // it does not exist for this tenant.
  if (!std::filesystem::exists(path.string() + ".safetensors"))
    return Failure{Fault::NoCheckpoint, "no checkpoint '" + tag + "' for this tenant"};
  try {
    auto loaded = TenantSlot::load(path.string(), backbone_.dim, device_);
    const std::int64_t views = loaded.manifest.at("extra").value("views", 1);
    const auto step = loaded.slot->steps();
    if (auto f = place(tenant, SlotEntry{std::move(loaded.slot), views, uid})) return *f;
    evicted_.erase(tenant);
    remove_eviction_file(uid, tenant);
    return Loaded{static_cast<std::uint64_t>(step)};
  } catch (const std::exception& ex) {
    return Failure{Fault::BadRequest, ex.what()};
  }
}

void SlotRegistry::pin(const std::string& tenant, std::uint64_t version) {
  MutexLock lk(mu_);
  ++pins_[tenant][version];
}

void SlotRegistry::unpin(const std::string& tenant, std::uint64_t version) {
  MutexLock lk(mu_);
  auto it = pins_.find(tenant);
  if (it == pins_.end()) return;
  if (--it->second[version] <= 0) it->second.erase(version);
  if (it->second.empty()) pins_.erase(it);
}

void SlotRegistry::keep(const std::string& tenant, std::uint64_t version) {
  MutexLock lk(mu_);
  kept_[tenant].insert(version);
}

void SlotRegistry::attached(const std::string& tenant, std::uint32_t uid) {
  MutexLock lk(mu_);
  detached_.erase(tenant);
  owners_[tenant] = uid;
}

void SlotRegistry::detached(const std::string& tenant) {
  MutexLock lk(mu_);
  detached_[tenant] = std::chrono::steady_clock::now();
}

void SlotRegistry::released(const std::string& tenant) {
  MutexLock lk(mu_);
  released_.insert(tenant);
  detached_.erase(tenant);
  kept_.erase(tenant);
  owners_.erase(tenant);
}

}  // namespace nexus::model::detail
