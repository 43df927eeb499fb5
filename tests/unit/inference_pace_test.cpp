// When each tenant's next inference request is due (daemon/sched/inference_pace.hpp), on a fake
// clock: its smoothed gap between a reply and its next request, pauses left out.
#include <catch2/catch.hpp>

#include "daemon/sched/inference_pace.hpp"

using namespace nexus::sched;
using namespace std::chrono_literals;

TEST_CASE("a tenant's next inference request is due at its last reply plus its usual gap", "[sched]") {
  const Clock::time_point t0 = Clock::time_point{} + 100s;
  InferencePace pace;
  constexpr std::uint64_t a = 1, b = 2;
  // a's first request: unanswered, it is due as it came (it is queued, or in a pass).
  pace.requested(a, t0);
  CHECK(pace.expected(t0 + 1ms, 2s).at(a) == t0);
  CHECK(pace.gap_s(a) < 0);
  // Answered, gap unknown: due at once.
  pace.answered(a, t0 + 1ms);
  CHECK(pace.expected(t0 + 1ms, 2s).at(a) == t0 + 1ms);
  // Back 4 ms after its reply (its simulators stepped): gap 4 ms, then smoothed.
  pace.requested(a, t0 + 5ms);
  CHECK(pace.gap_s(a) == Approx(0.004));
  pace.answered(a, t0 + 6ms);
  CHECK(pace.expected(t0 + 6ms, 2s).at(a) == t0 + 10ms);
  pace.requested(a, t0 + 8ms);  // a 2 ms gap moves it by 0.3 of the difference
  CHECK(pace.gap_s(a) == Approx(0.7 * 0.004 + 0.3 * 0.002));
  // A pause (its RL update) is not its pace: the gap stays.
  pace.answered(a, t0 + 9ms);
  const double before = pace.gap_s(a);
  pace.requested(a, t0 + 3s);
  CHECK(pace.gap_s(a) == Approx(before));
  // Only those that asked lately are listed; one that detached is gone.
  pace.requested(b, t0 + 3s);
  CHECK(pace.expected(t0 + 4s, 2s).size() == 2);
  CHECK(pace.expected(t0 + 6s, 2s).empty());
  pace.forget(a);
  CHECK(pace.expected(t0 + 4s, 2s).size() == 1);
  CHECK(pace.expected(t0 + 4s, 2s).count(b) == 1);
  // A reply for a tenant it never saw changes nothing.
  pace.answered(99, t0 + 4s);
  CHECK(pace.expected(t0 + 4s, 2s).size() == 1);
}
