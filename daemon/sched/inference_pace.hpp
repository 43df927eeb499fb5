// When each tenant's next inference request is expected: who an inference group may wait for.
//
// Why: a group waits up to the batch window T for every tenant that could join it, and a tenant
// that is attached but will not ask within T only stalls the group. Counting every attached
// tenant made each RL job's act wait out T beside a tenant that only trains (an SFT job) or one
// whose simulators take longer than T between its acts; on the 2-core VM the cores idled
// meanwhile (docs/results.md, "Who an inference group waits for"). A closed loop's pace is
// regular (act, step the simulators, act), so each tenant's gap between a reply and its next
// request, smoothed, says when it will be back; a tight loop (a program predicting in a loop)
// comes back within microseconds and is still waited for, so groups still form where they pay.
//
// Thread safety: none; the replica's queue lock guards every call. Pure: the clock is passed in.
#pragma once
#include <cstdint>
#include <map>

#include "daemon/sched/group_batcher.hpp"

namespace nexus::sched {

class InferencePace {
 public:
  // `tenant` sent an inference request at `now`.
  void requested(std::uint64_t tenant, Clock::time_point now);
  // `tenant`'s inference turn ended at `now` (its reply is on the way).
  void answered(std::uint64_t tenant, Clock::time_point now);
  void forget(std::uint64_t tenant);  // detached
  // The tenants that asked within `recent`, each with when its next request is expected: its
  // last reply plus its usual gap (the reply itself while the gap is unknown), or its last
  // request while that one is unanswered (it is queued or in a pass).
  std::map<std::uint64_t, Clock::time_point> expected(Clock::time_point now, Clock::duration recent) const;
  // The smoothed gap between a reply and the tenant's next request; negative while unknown.
  double gap_s(std::uint64_t tenant) const;

 private:
  struct Pace {
    Clock::time_point last_request{}, last_reply{};
    bool answered = false;
    double gap_s = -1;
  };
  std::map<std::uint64_t, Pace> pace_;
};

}  // namespace nexus::sched
