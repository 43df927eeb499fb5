// The Training Queue's decision and its fair-share bookkeeping, isolated from queues, threads and
// clocks (like sched::decide for the Inference Queue).
//
// Policy, in five lines:
//   1. The leader is the tenant with pending work in the highest priority class and, within it,
//      the lowest virtual time (compute-seconds charged / weight: VTC, Sheng et al. 2024).
//      An active tenant that is further behind but has nothing pending at the moment (a
//      closed-loop program between its reply and its next step) is waited for, up to T.
//      With several training lanes, only a tenant whose turn ended less than T ago is (1c).
//   2. A leader whose oldest request is not batchable (an RL update minibatch, publish, save)
//      gets a turn alone.
//   3. Otherwise its consecutive SFT requests form a group, and other tenants' consecutive SFT
//      requests of the same key join while their virtual time is within `group_window_s` of the
//      leader's and the group holds fewer than B samples (grouping then serves them too). Once
//      the group goes (4.), the next micro-batch of a split step rides in the room left, however
//      far ahead its tenant is: it is already bounded by a turn, and one pass saves a pass's
//      fixed part (riders come after the members in `take`, which is then not ascending).
//   4. The group goes when it holds B samples, when every active tenant that could join (within
//      the window) is in it, or when the leader's oldest request has waited T; else wait.
//   5. A tenant that returns from idle is lifted to the least virtual time among the tenants with
//      work (FairShare::backlogged): it gets no credit for the time it was away.
// A tenant's requests never overtake each other.
//
// Thread safety: FairShare is not synchronised (the model service's queue lock guards it).
#pragma once
#include <cstdint>
#include <map>
#include <set>
#include <span>

#include "daemon/sched/group_batcher.hpp"

namespace nexus::sched {

struct TrainingRequest {
  std::uint64_t tenant = 0;
  std::uint64_t key = 0;        // compatibility key, as for the Inference Queue
  std::uint32_t samples = 1;
  bool batchable = true;        // an SFT step (grouped); false: a turn of its own
  Clock::time_point arrival{};
  bool continuation = false;    // the next micro-batch of a step already under way (rides: 3., 4b)
};

struct TenantShare {
  double virtual_s = 0;  // compute-seconds charged / weight
  double weight = 1;
  int priority = 0;      // higher classes go first
};

struct TrainingPolicy {
  BatchPolicy batch;
  double group_window_s = 0.02;  // virtual seconds
};

// Precondition: `pending` is non-empty and in arrival order. A tenant without a share reads as
// weight 1, priority 0, virtual time 0. `active`: the tenants worth waiting for (those training
// lately); pending tenants count as active whether listed or not.
// With several training lanes: may `tenant` start a turn beside the turns of `running` now? Not
// if it is in a lower priority class than one of them, or in the same class and ahead of one by
// more than `window_s` of virtual time (else two backlogged tenants would each hold a lane and
// weights would not count); the tenant behind need not wait for a turn it is owed.
bool may_start_beside(std::uint64_t tenant, const std::set<std::uint64_t>& running,
                      const std::map<std::uint64_t, TenantShare>& shares, double window_s);

// 1c. With several training lanes a turn does not wait for an active tenant that is away: when
// it comes, another lane serves it. But a closed loop with one step in flight is never pending
// when a lane picks, so the tenant ahead of it took every free lane and a weight bought the
// closed loop little (with a weight of 2, a batch-4 loop beside a batch-128 one got 0.56 of the
// device by alone rates, not 0.67: docs/results.md). So a tenant whose last turn ended moments
// ago (`expected`: tenant -> until when it is expected back, its turn's end + T) and that is
// behind the leader of `pending` by more than `window_s` of virtual time, or in a higher
// priority class, is waited for: how long to wait, or 0 to pick now. Bounded: T after a turn
// of the tenant waited for, and the caller counts as expected only a tenant whose turn ran T at
// least (WorkQueues::training_done says why). A higher class is waited for whatever its virtual
// time, as its work would go first if it were pending (1b, for one lane, waits for a higher
// class only when it is also behind the leader in virtual time).
std::chrono::microseconds wait_for_expected(std::span<const TrainingRequest> pending,
                                            const std::map<std::uint64_t, TenantShare>& shares,
                                            const std::map<std::uint64_t, Clock::time_point>& expected,
                                            Clock::time_point now, double window_s);

Decision pick_training(std::span<const TrainingRequest> pending, const std::map<std::uint64_t, TenantShare>& shares,
                       const std::set<std::uint64_t>& active, Clock::time_point now, const TrainingPolicy& policy);

class FairShare {
 public:
  // Weight (> 0) and priority of a tenant; unknown tenants have weight 1, priority 0.
  void configure(std::uint64_t tenant, double weight, int priority);
  // `tenant` had nothing pending and now has: lift its virtual time to the least among
  // `others` (the tenants that have work pending), so that idling banks no credit.
  void backlogged(std::uint64_t tenant, const std::set<std::uint64_t>& others);
  // `seconds` of compute done for `tenant`: its virtual time advances by seconds / weight.
  void charge(std::uint64_t tenant, double seconds);
  void forget(std::uint64_t tenant);  // a tenant that left for good (its slot freed)
  double weight(std::uint64_t tenant) const;  // configured or 1, whether or not it has a share now
  const std::map<std::uint64_t, TenantShare>& shares() const { return shares_; }

 private:
  TenantShare& share(std::uint64_t tenant);
  std::map<std::uint64_t, TenantShare> shares_;
  std::map<std::uint64_t, std::pair<double, int>> configured_;  // weight, priority
};

}  // namespace nexus::sched
