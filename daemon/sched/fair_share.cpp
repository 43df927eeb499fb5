#include "daemon/sched/fair_share.hpp"

#include <algorithm>
#include <limits>

namespace nexus::sched {
namespace {

TenantShare share_of(const std::map<std::uint64_t, TenantShare>& shares, std::uint64_t tenant) {
  auto it = shares.find(tenant);
  return it == shares.end() ? TenantShare{} : it->second;
}

}  // namespace

bool may_start_beside(std::uint64_t tenant, const std::set<std::uint64_t>& running,
                      const std::map<std::uint64_t, TenantShare>& shares, double window_s) {
  const auto c = share_of(shares, tenant);
  for (auto id : running) {
    const auto r = share_of(shares, id);
    if (c.priority < r.priority || (c.priority == r.priority && c.virtual_s > r.virtual_s + window_s)) return false;
  }
  return true;
}

namespace {

// 1. The leader: highest priority, then least virtual time, then the oldest request. The index
// is the leader's first pending request.
std::size_t leader_of(std::span<const TrainingRequest> pending, const std::map<std::uint64_t, TenantShare>& shares) {
  std::size_t lead = 0;
  for (std::size_t i = 1; i < pending.size(); ++i) {
    const auto a = share_of(shares, pending[i].tenant), b = share_of(shares, pending[lead].tenant);
    if (a.priority > b.priority || (a.priority == b.priority && a.virtual_s < b.virtual_s)) lead = i;
  }
  // Earlier indices with the same tenant would have compared equal and been found first.
  for (std::size_t i = 0; i < lead; ++i)
    if (pending[i].tenant == pending[lead].tenant) return i;
  return lead;
}

}  // namespace

std::chrono::microseconds wait_for_expected(std::span<const TrainingRequest> pending,
                                            const std::map<std::uint64_t, TenantShare>& shares,
                                            const std::map<std::uint64_t, Clock::time_point>& expected,
                                            Clock::time_point now, double window_s) {
  if (pending.empty()) return std::chrono::microseconds(0);
  const auto leader = share_of(shares, pending[leader_of(pending, shares)].tenant);
  auto wait = std::chrono::microseconds(0);
  for (const auto& [tenant, until] : expected) {
    const auto other = share_of(shares, tenant);
    if (until <= now || other.priority < leader.priority ||
        (other.priority == leader.priority && other.virtual_s + window_s >= leader.virtual_s))
      continue;
    // Rounded up: a lane woken a microsecond early would find the same wait and spin.
    wait = std::max(wait, std::chrono::ceil<std::chrono::microseconds>(until - now));
  }
  return wait;
}

Decision pick_training(std::span<const TrainingRequest> pending, const std::map<std::uint64_t, TenantShare>& shares,
                       const std::set<std::uint64_t>& active, Clock::time_point now, const TrainingPolicy& policy) {
  const std::size_t lead = leader_of(pending, shares);  // 1.
  const TrainingRequest& first = pending[lead];
  Decision d;
  // 1b. A closed-loop tenant (one step at a time) is not pending between its reply and its next
  // request. If one that is active and behind the leader by more than the window is away just
  // now, wait up to T for it: serving whoever happens to be queued would split turns evenly.
  const auto leader_share = share_of(shares, first.tenant);
  const auto waited_first = std::chrono::duration_cast<std::chrono::microseconds>(now - first.arrival);
  if (waited_first < policy.batch.max_wait)
    for (auto t : active) {
      const auto other = share_of(shares, t);
      if (other.priority >= leader_share.priority && other.virtual_s + policy.group_window_s < leader_share.virtual_s) {
        d.wait = policy.batch.max_wait - waited_first;
        return d;
      }
    }
  if (!first.batchable) {  // 2.
    d.take = {lead};
    return d;
  }
  // 3. The group: the leader's consecutive SFT requests, then others within the window.
  const auto leader = share_of(shares, first.tenant);
  auto eligible = [&](std::uint64_t tenant) {
    const auto share = share_of(shares, tenant);
    return tenant == first.tenant ||
           (share.priority == leader.priority && share.virtual_s <= leader.virtual_s + policy.group_window_s);
  };
  std::set<std::uint64_t> blocked, members, could_join;
  for (auto t : active)
    if (eligible(t)) could_join.insert(t);
  std::uint64_t samples = 0;
  bool overflow = false;
  for (std::size_t i = 0; i < pending.size(); ++i) {
    const TrainingRequest& r = pending[i];
    if (!eligible(r.tenant) || blocked.count(r.tenant)) continue;
    if (!r.batchable || r.key != first.key) {
      blocked.insert(r.tenant);  // its later requests must not overtake this one
      if (!members.count(r.tenant)) could_join.erase(r.tenant);  // nor can it join: do not wait for it
      continue;
    }
    could_join.insert(r.tenant);
    if (!d.take.empty() && samples + r.samples > policy.batch.max_samples) {
      blocked.insert(r.tenant);
      overflow = true;  // no room for it: waiting cannot fill the group better
      continue;
    }
    d.take.push_back(i);
    members.insert(r.tenant);
    samples += r.samples;
  }
  // 4. Go, or wait for more to join.
  const auto waited = std::chrono::duration_cast<std::chrono::microseconds>(now - first.arrival);
  const bool full = overflow || samples >= policy.batch.max_samples;
  bool everyone_in = true;
  for (auto t : could_join) everyone_in = everyone_in && members.count(t);
  if (!full && !everyone_in && waited < policy.batch.max_wait) {
    d.take.clear();
    d.wait = policy.batch.max_wait - waited;
    return d;
  }
  // 4b. Riders: a split step's next micro-batch, in the room the group left once it goes (so it
  // neither takes a member's place nor makes the group go early), after the members in `take`
  // (the turn's first work names who it served in the accounting). A tenant whose micro-batch
  // does not fit blocks its later ones: its requests never overtake each other (it may have two
  // steps split at once).
  std::set<std::uint64_t> skipped;
  for (std::size_t i = 0; i < pending.size(); ++i) {
    const TrainingRequest& r = pending[i];
    if (!r.continuation || eligible(r.tenant) || skipped.count(r.tenant)) continue;
    if (share_of(shares, r.tenant).priority != leader.priority || r.key != first.key || !r.batchable ||
        samples + r.samples > policy.batch.max_samples) {
      skipped.insert(r.tenant);
      continue;
    }
    d.take.push_back(i);
    samples += r.samples;
  }
  return d;
}

TenantShare& FairShare::share(std::uint64_t tenant) {
  auto [it, fresh] = shares_.try_emplace(tenant);
  if (fresh) {
    auto c = configured_.find(tenant);
    if (c != configured_.end()) it->second.weight = c->second.first, it->second.priority = c->second.second;
  }
  return it->second;
}

void FairShare::configure(std::uint64_t tenant, double weight, int priority) {
  configured_[tenant] = {weight > 0 ? weight : 1.0, priority};
  auto& s = share(tenant);
  s.weight = configured_[tenant].first;
  s.priority = priority;
}

void FairShare::backlogged(std::uint64_t tenant, const std::set<std::uint64_t>& others) {
  auto& s = share(tenant);
  double least = std::numeric_limits<double>::infinity();
  for (auto o : others)
    if (o != tenant) least = std::min(least, share(o).virtual_s);
  if (least != std::numeric_limits<double>::infinity()) s.virtual_s = std::max(s.virtual_s, least);
}

void FairShare::charge(std::uint64_t tenant, double seconds) {
  auto& s = share(tenant);
  s.virtual_s += seconds / s.weight;
}

void FairShare::forget(std::uint64_t tenant) { shares_.erase(tenant); }

double FairShare::weight(std::uint64_t tenant) const {
  if (auto it = shares_.find(tenant); it != shares_.end()) return it->second.weight;
  auto c = configured_.find(tenant);
  return c == configured_.end() ? 1.0 : c->second.first;
}

}  // namespace nexus::sched
