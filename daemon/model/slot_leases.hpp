// Which tenants' slots a turn is using, when a replica's lanes run turns side by side (issue 34;
// docs/design/service.md, "Lanes"). A turn leases the slots of every tenant it touches for its
// whole length: an inference pass must not read a head while a training turn's optimizer writes
// it, and a slot operation must not replace a slot another lane is running. Eviction and release
// never free a leased slot (SlotRegistry asks `busy`).
//
// A lease is taken all at once (every name free, or wait), so two lanes never hold part of each
// other's sets and no lock order is needed; waiters are served first come, first served, so a
// lane that keeps leasing one tenant's slot turn after turn cannot starve the other lane's wider
// lease.
//
// Thread safety: every member may be called from any thread.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "daemon/sync/mutex.hpp"

namespace nexus::model::detail {

class SlotLeases;

// Held for a turn; its destructor frees the names.
class SlotLease {
 public:
  SlotLease() = default;
  SlotLease(SlotLease&& o) noexcept : leases_(o.leases_), names_(std::move(o.names_)) { o.leases_ = nullptr; }
  SlotLease& operator=(SlotLease&&) = delete;
  SlotLease(const SlotLease&) = delete;
  ~SlotLease();
  bool holds(const std::string& tenant) const { return names_.count(tenant) > 0; }

 private:
  friend class SlotLeases;
  SlotLease(SlotLeases* leases, std::set<std::string> names) : leases_(leases), names_(std::move(names)) {}
  SlotLeases* leases_ = nullptr;
  std::set<std::string> names_;
};

class SlotLeases {
 public:
  // Waits until none of `tenants` is leased and no earlier waiter wants one of them, then
  // leases them all.
  SlotLease lease(const std::vector<std::string>& tenants);
  // Leased by some turn now (a slot that must stay where it is).
  bool busy(const std::string& tenant) const;
  // Turns waiting for their lease now.
  std::size_t waiting() const;

 private:
  friend class SlotLease;
  void release(const std::set<std::string>& names);
  // None of `names` leased, and no waiter ahead of `ticket` wants one of them.
  bool free_for(std::uint64_t ticket, const std::set<std::string>& names) const NEXUS_REQUIRES(mu_);
  struct Waiter {
    std::uint64_t ticket;
    const std::set<std::string>* names;
  };
  mutable Mutex mu_;
  std::condition_variable cv_;  // waits on mu_.native()
  std::multiset<std::string> leased_ NEXUS_GUARDED_BY(mu_);  // a set in practice: a name is leased once
  std::vector<Waiter> waiting_ NEXUS_GUARDED_BY(mu_);         // in ticket order
  std::uint64_t next_ticket_ NEXUS_GUARDED_BY(mu_) = 0;
};

}  // namespace nexus::model::detail
