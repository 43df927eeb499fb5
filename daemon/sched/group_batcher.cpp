#include "daemon/sched/group_batcher.hpp"

#include <algorithm>
#include <set>

namespace nexus::sched {

Decision decide(std::span<const PendingRequest> pending, Clock::time_point now, const BatchPolicy& policy,
                std::size_t active_tenants) {
  Decision d;
  const PendingRequest& oldest = pending.front();
  if (!oldest.batchable) {
    d.take = {0};
    return d;
  }
  std::set<std::uint64_t> blocked, members;
  std::uint64_t samples = 0;
  for (std::size_t i = 0; i < pending.size(); ++i) {
    const PendingRequest& r = pending[i];
    if (!r.batchable) {
      blocked.insert(r.tenant);
      continue;
    }
    if (blocked.count(r.tenant) || r.key != oldest.key) continue;
    if (!d.take.empty() && samples + r.samples > policy.max_samples) break;
    d.take.push_back(i);
    members.insert(r.tenant);
    samples += r.samples;
  }
  const auto waited = std::chrono::duration_cast<std::chrono::microseconds>(now - oldest.arrival);
  const bool full = samples >= policy.max_samples;
  const bool everyone_in = members.size() >= active_tenants;
  if (full || everyone_in || waited >= policy.max_wait) return d;
  d.take.clear();
  d.wait = policy.max_wait - waited;
  return d;
}

}  // namespace nexus::sched
