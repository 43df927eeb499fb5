// The Training Queue's turn sizer (daemon/sched/turn_sizer.hpp): micro-batches sized from a
// fitted fixed + per-sample cost, not from the average that small passes inflate.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "daemon/sched/turn_sizer.hpp"

using nexus::sched::TurnSizer;

TEST_CASE("the turn sizer answers `least` until it has seen a pass", "[sched][turns]") {
  TurnSizer s;
  CHECK_FALSE(s.measured());
  CHECK(s.samples_within(0.025, 8) == 8);
  s.observe(0, 1.0);    // an empty pass says nothing
  s.observe(4, -1.0);   // nor does a clock that went backwards
  CHECK_FALSE(s.measured());
}

TEST_CASE("the turn sizer fits the fixed part out of passes of mixed sizes", "[sched][turns]") {
  TurnSizer s;
  // 5 ms fixed + 1 ms per sample: small passes (4 samples, 9 ms: 2.25 ms per sample on average)
  // mixed with micro-batches of 16.
  for (int i = 0; i < 40; ++i) {
    s.observe(4, 0.005 + 0.004);
    s.observe(16, 0.005 + 0.016);
  }
  // 25 ms budget: (25 - 5) / 1 = 20 samples; the plain average (about 1.5 ms a sample) would say 16.
  CHECK(s.samples_within(0.025, 1) == 20);
  CHECK(s.samples_within(0.003, 2) == 2);  // a budget under the fixed part: `least`
}

TEST_CASE("passes all of one size fall back to the average cost", "[sched][turns]") {
  TurnSizer s;
  for (int i = 0; i < 10; ++i) s.observe(10, 0.010);
  CHECK(s.samples_within(0.025, 1) == 25);
  // Newer passes outweigh older ones: the backbone got twice as slow.
  for (int i = 0; i < 200; ++i) s.observe(10, 0.020);
  CHECK(s.samples_within(0.025, 1) == 12);
}

TEST_CASE("a lighter tenant's turns are cut by its weight, a heavier one's stay at the budget", "[sched][turns]") {
  using nexus::sched::TurnBudget;
  using nexus::sched::weighted_turn;
  using W = std::vector<double>;
  const TurnBudget budget{0.020, 8};
  auto is = [](TurnBudget b, double seconds, std::int64_t least) {
    return b.seconds == Approx(seconds) && b.least == least;
  };
  CHECK(is(weighted_turn(budget, W{1}, W{}), 0.020, 8));         // nobody active: as configured
  CHECK(is(weighted_turn(budget, W{1}, W{1, 1}), 0.020, 8));     // equal weights: the same
  CHECK(is(weighted_turn(budget, W{2}, W{2, 1}), 0.020, 8));     // heavier: never above the budget
  CHECK(is(weighted_turn(budget, W{1}, W{1, 2}), 0.010, 4));     // weighted 1 beside 2: half, floor too
  CHECK(is(weighted_turn(budget, W{1}, W{1, 0.5}), 0.020, 8));   // the heaviest decides
  CHECK(is(weighted_turn(budget, W{1, 2}, W{1, 2}), 0.010, 4));  // grouped with the heavy one: still cut
  // A quarter of the budget, but the least micro-batch no smaller than half the configured one:
  // below that a micro-batch is mostly a pass's fixed part.
  CHECK(is(weighted_turn(budget, W{0.5, 1}, W{0.5, 1, 2}), 0.005, 4));
  CHECK(is(weighted_turn({0.020, 1}, W{1}, W{1, 64}), 0.020 / 64, 1));
  CHECK(is(weighted_turn(budget, W{0.0, -3.0, std::nan("")}, W{1}), 0.020, 8));  // not positive: 1
}
