// The tenants' slots: register, load, save, publish, digest; which published versions are kept
// (the last K plus every pinned one: an evicted version answers UnknownVersion); eviction of
// detached tenants' slots after an idle time; and the checkpoint of every changed slot when
// nexusd stops. Both go to <state_dir>/tenants/<uid>/<tenant>/evicted, from where a slot comes
// back when its tenant's next request needs it: after a restart too, once the tenant attached
// again as the same Unix user (a stop loses no finished step).
//
// Bounds per Unix user (UserQuotas, shared by the replicas): resident slots, checkpoint tags and
// their bytes. QuotaExceeded (Fault::OverQuota) beyond; at the slot bound, the user's
// longest-detached slot is evicted first, so only its attached tenants' slots hold the bound.
//
// Thread safety: every member may be called from any thread (checkpoint_all once the lanes have
// stopped). The map of slots has its own lock (map_mu_), held by each member, never across a
// pass. A slot itself is its lessee's: a lane leases the slots its turn touches (lease(); with
// one lane this costs an uncontended lock), and a SlotEntry* from find() is used only under a
// lease of its tenant. Eviction and release skip a leased slot (the lease's owner may drop its
// own: apply_releases). pin/unpin and attached/detached take the registry's other lock (mu_).
#pragma once
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "daemon/model/model_service.hpp"
#include "daemon/model/slot_leases.hpp"
#include "daemon/model/tenant_slot.hpp"
#include "daemon/model/user_quotas.hpp"
#include "daemon/sync/mutex.hpp"

namespace nexus::model::detail {

struct SlotEntry {
  std::unique_ptr<TenantSlot> trainer;
  std::int64_t views = 1;
  std::uint32_t uid = 0;  // the owner, whose directory its checkpoints and eviction file live in
  // What its eviction file holds (steps, newest version); -1: nothing (a fresh registration).
  std::int64_t saved_steps = -1;
  std::uint64_t saved_version = 0;
  bool dirty() const { return trainer->steps() != saved_steps || trainer->latest_version() != saved_version; }
};

class SlotRegistry {
 public:
  // Slots it makes or loads live on `device` (its replica's). `adapters`: the backbone takes
  // tenants' adapters (an AdaptableBackbone); registrations with one are refused if not.
  SlotRegistry(const ModelConfig& config, const BackboneConfig& backbone, torch::Device device, UserQuotas& quotas,
               bool adapters = true);

  // The slots of `tenants`, for a turn (waits while another lane's turn holds one of them).
  SlotLease lease(const std::vector<std::string>& tenants) { return leases_.lease(tenants); }

  // The tenant's slot, restored from its eviction file if it is not resident (evicted idle, or
  // checkpointed at a stop) and its owner's file exists; nullptr if it has none (never registered,
  // or a restore failed: logged). `refused` (optional) says why when a bound stopped a restore.
  SlotEntry* find(const std::string& tenant, std::string* refused = nullptr);

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
  void attached(const std::string& tenant, std::uint32_t uid);
  void detached(const std::string& tenant);
  // The tenant's name was released (it may go to another uid): its slot and eviction file are
  // forgotten before the executor's next turn (its owner's checkpoints stay where they are).
  void released(const std::string& tenant);
  // Frees released names' slots: those leased by `own` (the turn about to run) or by nobody; a
  // slot another lane's turn holds is freed at a later turn (before its name's next turn: that
  // turn holds the lease).
  void apply_releases(const SlotLease& own);
  // Checkpoints and frees the slots of tenants detached for longer than the idle time.
  void evict_idle(std::chrono::steady_clock::time_point now);
  // nexusd is stopping (the executor has stopped): writes every resident slot that changed since
  // its eviction file was written; returns how many it wrote.
  std::size_t checkpoint_all();

  std::size_t resident() const {
    std::lock_guard lk(map_mu_);
    return slots_.size();
  }
  std::size_t evicted() const {
    std::lock_guard lk(map_mu_);
    return evicted_.size();
  }

 private:
  // <state_dir>/tenants/<uid>/<tenant>: created private (ensure_private_dir) on first use.
  std::filesystem::path tenant_dir(std::uint32_t uid, const std::string& tenant) const;
  void retain(const std::string& tenant, TenantSlot& slot);  // after a publish
  // Makes `entry` the tenant's resident slot, charging its owner a slot unless it replaces one.
  std::optional<Failure> place(const std::string& tenant, SlotEntry entry);
  void drop(const std::string& tenant);  // frees the resident slot (and its owner's charge)
  static Failure missing(const std::string& refused);  // why find() found none
  // Checkpoints and frees `uid`'s longest-detached resident slot (not `except`'s, not pinned);
  // false if it has none here.
  bool evict_longest_detached(std::uint32_t uid, const std::string& except);
  bool write_eviction_file(const std::string& tenant, SlotEntry& e);  // false: logged
  void remove_eviction_file(std::uint32_t uid, const std::string& tenant);

  const ModelConfig config_;
  const BackboneConfig backbone_;
  const torch::Device device_;
  UserQuotas& quotas_;
  const bool adapters_;
  SlotLeases leases_;
  // Guards slots_ and evicted_. Recursive: a restore in find() places a slot, which may evict
  // another. Taken after a lease, never waited on while a lease is being taken (no cycle).
  mutable std::recursive_mutex map_mu_;
  std::map<std::string, SlotEntry> slots_;        // GUARDED_BY(map_mu_)
  std::map<std::string, std::uint32_t> evicted_;  // GUARDED_BY(map_mu_): evicted idle (owner uid), not resident

  Mutex mu_;
  std::map<std::string, std::map<std::uint64_t, int>> pins_ NEXUS_GUARDED_BY(mu_);
  std::map<std::string, std::set<std::uint64_t>> kept_ NEXUS_GUARDED_BY(mu_);
  std::map<std::string, std::chrono::steady_clock::time_point> detached_ NEXUS_GUARDED_BY(mu_);
  std::map<std::string, std::uint32_t> owners_ NEXUS_GUARDED_BY(mu_);  // attached as, by uid
  std::set<std::string> released_ NEXUS_GUARDED_BY(mu_);
};

}  // namespace nexus::model::detail
