// Slot leases (daemon/model/slot_leases.hpp): what a lane's turn holds while lanes run side by
// side. A lease is all of its names or none, a leased name is busy until the lease ends, and
// waiters go first come, first served: a later, narrower lease does not overtake an earlier
// wider one that wants one of its names.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <thread>

#include "daemon/model/slot_leases.hpp"

using nexus::model::detail::SlotLease;
using nexus::model::detail::SlotLeases;
using namespace std::chrono_literals;

namespace {
// Polls until `done` or 10 s.
template <typename F>
bool soon(F done) {
  for (int i = 0; i < 2000 && !done(); ++i) std::this_thread::sleep_for(5ms);
  return done();
}
}  // namespace

TEST_CASE("a slot lease is all of its names or none, and waiters are served first come first served",
          "[model][lanes]") {
  SlotLeases leases;
  std::atomic<bool> wide_got{false}, narrow_got{false}, narrow_before_wide{false};
  std::thread wide, narrow;
  {
    const auto held = leases.lease({"alice"});
    CHECK(leases.busy("alice"));
    CHECK_FALSE(leases.busy("bob"));
    // A turn of alice and bob waits for alice, holding neither meanwhile.
    wide = std::thread([&] {
      const auto l = leases.lease({"alice", "bob"});
      wide_got = true;
      std::this_thread::sleep_for(50ms);
    });
    REQUIRE(soon([&] { return leases.waiting() == 1; }));
    CHECK_FALSE(wide_got);
    CHECK_FALSE(leases.busy("bob"));
    // bob alone is free, but an earlier waiter wants it: this one waits behind it.
    narrow = std::thread([&] {
      const auto l = leases.lease({"bob"});
      narrow_before_wide = !wide_got;
      narrow_got = true;
    });
    REQUIRE(soon([&] { return leases.waiting() == 2; }));
    CHECK_FALSE(narrow_got);
    // Another tenant's turn is not held up by any of this.
    const auto carol = leases.lease({"carol"});
    CHECK(leases.busy("carol"));
  }  // alice's turn ends
  CHECK(soon([&] { return wide_got.load(); }));
  CHECK(soon([&] { return narrow_got.load(); }));
  wide.join();
  narrow.join();
  CHECK_FALSE(narrow_before_wide);
  for (const char* name : {"alice", "bob", "carol"}) CHECK_FALSE(leases.busy(name));
  // A name twice in one turn (a tenant's two requests grouped) is one lease of it.
  {
    const auto twice = leases.lease({"dave", "dave"});
    CHECK(leases.busy("dave"));
  }
  CHECK_FALSE(leases.busy("dave"));
}
