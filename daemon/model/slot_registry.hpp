// The tenants' slots: register, load, save, publish, digest; which published versions are kept
// (the last K plus every pinned one: an evicted version answers UnknownVersion); and eviction
// of detached tenants' slots after an idle time, checkpointed under
// <state_dir>/evicted/<tenant> and restored when the tenant's next request needs the slot.
//
// Thread safety: slot operations on the executor thread only; pin/unpin and attached/detached
// from any thread (they take the registry's own lock).
#pragma once
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "daemon/model/model_service.hpp"
#include "daemon/model/tenant_slot.hpp"

namespace nexus::model::detail {

struct SlotEntry {
  std::unique_ptr<TenantSlot> trainer;
  std::int64_t views = 1;
  std::uint32_t uid = 0;  // the owner, whose directory its checkpoints and eviction file live in
};

class SlotRegistry {
 public:
  // Slots it makes or loads live on `device` (its replica's).
  SlotRegistry(const ModelConfig& config, const BackboneConfig& backbone, torch::Device device);

  // The tenant's slot, restored from its eviction checkpoint if it was evicted; nullptr if it
  // never registered (or the restore failed: logged, and the tenant must register again).
  SlotEntry* find(const std::string& tenant);

  // uid: the tenant's owner (its files live in a directory of that uid's, 0700; files 0600).
  Result register_tenant(const std::string& tenant, std::uint32_t uid, const op::Register& r);
  Result publish(const std::string& tenant);
  Result save(const std::string& tenant, std::uint32_t uid, const std::string& tag);
  Result load(const std::string& tenant, std::uint32_t uid, const std::string& tag);
  Result digest(const std::string& tenant);
  // Applies version retention after a slot operation that may have published (an RL job's
  // update, through Replica::Policy::with_slot): RL jobs publish every update, and versions
  // published there are kept by the same rule as publish()'s.
  void retain_versions(const std::string& tenant);

  void pin(const std::string& tenant, std::uint64_t version);  // a running evaluation: also keeps the slot resident
  void unpin(const std::string& tenant, std::uint64_t version);
  // Kept published while the tenant's name is bound, whatever versions_kept says, without
  // holding the slot resident (an RL job's starting policy). Not persisted across a restart.
  void keep(const std::string& tenant, std::uint64_t version);
  void attached(const std::string& tenant);
  void detached(const std::string& tenant);
  // The tenant's name was released (it may go to another uid): its slot and eviction record
  // are forgotten before the executor's next turn (its owner's files stay where they are).
  void released(const std::string& tenant);
  void apply_releases();  // executor thread
  // Checkpoints and frees the slots of tenants detached for longer than the idle time.
  void evict_idle(std::chrono::steady_clock::time_point now);

  std::size_t resident() const { return slots_.size(); }
  std::size_t evicted() const { return evicted_.size(); }

 private:
  // <state_dir>/tenants/<uid>/<tenant>: created private (ensure_private_dir) on first use.
  std::filesystem::path tenant_dir(std::uint32_t uid, const std::string& tenant) const;
  void retain(const std::string& tenant, TenantSlot& slot);  // after a publish

  const ModelConfig config_;
  const BackboneConfig backbone_;
  const torch::Device device_;
  std::map<std::string, SlotEntry> slots_;  // executor thread only
  std::map<std::string, std::uint32_t> evicted_;  // executor thread only: checkpointed (owner uid), not resident

  std::mutex mu_;
  std::map<std::string, std::map<std::uint64_t, int>> pins_;                // GUARDED_BY(mu_)
  std::map<std::string, std::set<std::uint64_t>> kept_;                     // GUARDED_BY(mu_)
  std::map<std::string, std::chrono::steady_clock::time_point> detached_;  // GUARDED_BY(mu_)
  std::set<std::string> released_;                                          // GUARDED_BY(mu_)
};

}  // namespace nexus::model::detail
