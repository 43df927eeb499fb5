// The rollout autoscaler's decision (daemon/env/rollout_autoscaler.hpp) on a fake clock: it keeps
// the minimum, grows while sessions run in nexusd for want of room (never past the maximum, not
// within the cooldown), drains only its own engines once idle, and does nothing when off.
#include <catch2/catch.hpp>

#include "daemon/env/rollout_autoscaler.hpp"

using nexus::env::AutoscalePolicy;
using nexus::env::AutoscaleView;
using nexus::env::decide_scale;
using namespace std::chrono_literals;

namespace {
// A shared engine with room for 8 sessions (own: started by nexusd).
AutoscaleView::Engine engine(std::uint64_t id, int sessions, AutoscaleView::Clock::time_point last_busy, bool own = true) {
  return {.id = id, .own = own, .shared = true, .draining = false, .sessions = sessions, .capacity = 8,
          .last_busy = last_busy};
}
}  // namespace

TEST_CASE("the rollout autoscaler keeps its minimum, grows for waiting sessions and drains its own idle engines",
          "[unit][rollout]") {
  const AutoscalePolicy p{.min_engines = 1, .max_engines = 3, .sessions_per_engine = 8, .idle_after = 60s, .cooldown = 5s};
  const AutoscaleView::Clock::time_point t0{};  // the fake clock's zero
  AutoscaleView v;
  v.now = t0 + 100s;
  v.last_action = t0;

  // Below the minimum: start at once, whatever the cooldown.
  v.last_action = v.now;
  auto d = decide_scale(p, v);
  CHECK(d.start == 1);
  CHECK(d.drain.empty());
  CHECK_THAT(d.reason, Catch::Contains("minimum"));
  v.starting = 1;  // started, not attached yet: counts
  CHECK(decide_scale(p, v).start == 0);

  // 20 sessions wait in nexusd: the starting engine will take 8, so 12 more need 2 engines.
  v.waiting_sessions = 20;
  CHECK(decide_scale(p, v).start == 0);  // within the cooldown
  v.now += 5s;
  d = decide_scale(p, v);
  CHECK(d.start == 2);
  CHECK_THAT(d.reason, Catch::Contains("20 session(s)") && Catch::Contains("12 more"));
  v.waiting_sessions = 8;  // the starting engine has room for all of them: nothing to start
  CHECK(decide_scale(p, v).start == 0);
  v.waiting_sessions = 20;
  v.starting = 0;
  v.engines = {engine(1, 8, v.now), engine(2, 8, v.now), engine(3, 4, v.now)};
  v.now += 10s;
  CHECK(decide_scale(p, v).start == 0);  // at the maximum
  CHECK(decide_scale(p, v).reason.empty());

  // Idle engines: drained one per decision, the longest idle first, only the autoscaler's own,
  // never below the minimum, and not while sessions still wait.
  v.waiting_sessions = 0;
  v.engines = {engine(1, 0, v.now - 90s, false), engine(2, 0, v.now - 70s), engine(3, 0, v.now - 80s), engine(4, 2, v.now)};
  d = decide_scale(p, v);
  REQUIRE(d.drain.size() == 1);
  CHECK(d.drain[0] == 3);  // engine 1 idled longer, but was started by hand
  CHECK(d.start == 0);
  v.engines[2].draining = true;
  CHECK(decide_scale(p, v).drain == std::vector<std::uint64_t>{2});
  v.engines[1].last_busy = v.now - 30s;  // busy lately
  CHECK(decide_scale(p, v).drain.empty());
  v.engines[1].last_busy = v.now - 70s;
  v.waiting_sessions = 14;  // engines 1 and 4 keep room for 14: engine 2 may still go
  CHECK(decide_scale(p, v).drain == std::vector<std::uint64_t>{2});
  v.waiting_sessions = 15;  // not without it
  CHECK(decide_scale(p, v).drain.empty());
  CHECK(decide_scale(p, v).start == 0);  // and nothing to start: the room is there
  v.waiting_sessions = 0;
  // Another user's own engines neither count nor drain, whatever their name.
  auto theirs = engine(9, 0, v.now - 500s);
  theirs.shared = false;
  v.engines = {engine(2, 0, v.now - 500s), theirs};  // the minimum (1) is engine 2 alone
  CHECK(decide_scale(p, v).drain.empty());
  v.engines = {theirs};
  CHECK(decide_scale(p, v).start == 1);  // below the minimum: theirs is not one of nexusd's
  v.waiting_sessions = 0;
  v.engines = {engine(2, 0, v.now - 500s)};  // the last one: the minimum keeps it
  CHECK(decide_scale(p, v).drain.empty());

  // Off (max 0): nothing, ever.
  CHECK(decide_scale({.min_engines = 2, .max_engines = 0}, AutoscaleView{}).start == 0);
}
