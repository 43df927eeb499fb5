// The Training Queue's turn sizer (daemon/sched/turn_sizer.hpp): micro-batches sized from a
// fitted fixed + per-sample cost, not from the average that small passes inflate.
#include <catch2/catch.hpp>

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
