// The Health Manager's restart policy on real threads and its real clock (short periods): a role
// that fails is restarted after a back-off that doubles; one that keeps failing is given up with
// its last error and never restarted again; a silent role is taken over; a removed role's
// functions are never called again.
#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/health/health_manager.hpp"
#include "processes.hpp"

using nexus::daemon::HealthManager;
using nexus::daemon::RestartPolicy;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

using nexus::test::eventually;

TEST_CASE("a failing role is restarted with a doubling back-off, then given up with its last error", "[health]") {
  HealthManager health(RestartPolicy{.max_restarts = 3, .window = 60000ms, .backoff = 40ms, .max_backoff = 1000ms});
  std::mutex mu;
  std::vector<Clock::time_point> restarted_at;
  std::vector<std::string> gave_up;
  std::shared_ptr<nexus::daemon::Role> role;
  role = health.add(
      "flaky", 0ms,
      [&] {
        std::lock_guard lk(mu);
        restarted_at.push_back(Clock::now());
      },
      [&](const std::string& why) {
        std::lock_guard lk(mu);
        gave_up.push_back(why);
      });
  auto count = [&] {
    std::lock_guard lk(mu);
    return restarted_at.size();
  };
  // Each restarted holder fails again at once (as a deterministic bug would).
  std::vector<Clock::time_point> failed_at;
  for (std::size_t i = 0; i < 3; ++i) {
    failed_at.push_back(Clock::now());
    role->failed("boom " + std::to_string(i), role->generation());
    REQUIRE(eventually([&] { return count() == i + 1; }));
  }
  {
    std::lock_guard lk(mu);
    // 40, 80, 160 ms after each failure: no spinning (the manager wakes every 100 ms at most).
    for (std::size_t i = 0; i < 3; ++i) CHECK(restarted_at[i] - failed_at[i] >= 40ms * (1 << i));
    CHECK(gave_up.empty());
  }
  role->failed("boom 3", role->generation());
  REQUIRE(eventually([&] {
    std::lock_guard lk(mu);
    return gave_up.size() == 1;
  }));
  {
    std::lock_guard lk(mu);
    CHECK(gave_up[0] == "given up after 3 restarts; last: boom 3");
  }
  // Given up: later reports restart nothing, and the status says why.
  role->failed("boom 4", role->generation());
  std::this_thread::sleep_for(300ms);
  CHECK(count() == 3);
  const auto roles = health.roles();
  REQUIRE(roles.size() == 1);
  CHECK(roles[0].failed);
  CHECK(roles[0].restarts == 3);
  CHECK(roles[0].last_reason == "boom 3");
  CHECK(health.restarts() == 3);
  health.remove(role);
}

TEST_CASE("a silent role is taken over, and a superseded holder's report and an idle role are ignored", "[health]") {
  // A 500 ms heartbeat: the test thread's own beats below must not miss it on a loaded machine.
  HealthManager health(RestartPolicy{.max_restarts = 5, .window = 60000ms, .backoff = 10ms, .max_backoff = 100ms});
  std::atomic<int> restarts{0};
  auto role = health.add("worker", 500ms, [&] { ++restarts; });
  const auto first = role->generation();
  {
    nexus::daemon::RoleIdle waiting(role.get());  // waiting for work: not silent
    std::this_thread::sleep_for(1200ms);
  }
  CHECK(restarts == 0);
  REQUIRE(eventually([&] { return restarts == 1; }));  // now silent past 500 ms
  CHECK_FALSE(role->current(first));
  const auto roles = health.roles();
  REQUIRE(roles.size() == 1);
  CHECK(roles[0].last_reason == "missed its heartbeat (500 ms)");
  // The hung holder wakes and reports a failure of its own: the role is someone else's now.
  role->failed("late report", first);
  for (int i = 0; i < 30; ++i) role->beat(), std::this_thread::sleep_for(10ms);
  CHECK(restarts == 1);
  health.remove(role);
}

TEST_CASE("after remove() returns, a role's restart is never called, even one already due", "[health]") {
  // A 2 s back-off: remove() comes well inside it even if this thread is descheduled a while.
  HealthManager health(RestartPolicy{.max_restarts = 5, .window = 60000ms, .backoff = 2000ms, .max_backoff = 2000ms});
  std::atomic<int> restarts{0};
  auto role = health.add("leaving", 0ms, [&] { ++restarts; });
  role->failed("boom");
  std::this_thread::sleep_for(50ms);  // scheduled, backing off
  health.remove(role);
  std::this_thread::sleep_for(2500ms);  // past the back-off: the restart would have run by now
  CHECK(restarts == 0);
}
