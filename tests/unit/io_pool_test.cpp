// The transport's pool for slow work (daemon/ipc/io_pool.hpp): tenants take turns, and one
// tenant never holds more than one of its threads.
#include <catch2/catch.hpp>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <vector>

#include "daemon/fault/fault_plan.hpp"
#include "daemon/ipc/io_pool.hpp"
#include "processes.hpp"

using nexus::daemon::IoPool;

TEST_CASE("the io pool serves keys in turns, in order within a key", "[iopool]") {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> order;
  bool go = false;
  IoPool pool(1);
  pool.post(9, [&] {  // holds the one thread while the others queue
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return go; });
  });
  for (int i = 0; i < 3; ++i)
    pool.post(1, [&, i] {
      std::lock_guard lk(mu);
      order.push_back(10 + i);
    });
  pool.post(2, [&] {
    std::lock_guard lk(mu);
    order.push_back(20);
  });
  {
    std::lock_guard lk(mu);
    go = true;
  }
  cv.notify_all();
  REQUIRE(nexus::test::eventually([&] {
    std::lock_guard lk(mu);
    return order.size() == 4;
  }));
  // Key 2's one task goes after key 1's first, not after all three.
  CHECK(order == std::vector<int>{10, 20, 11, 12});
}

TEST_CASE("one key holds at most one of the pool's threads: forget drops what it queued", "[iopool]") {
  std::atomic<int> running{0}, most{0}, done{0};
  std::atomic<bool> release{false};
  IoPool pool(4);
  for (int i = 0; i < 6; ++i)
    pool.post(7, [&] {
      const int now = ++running;
      int seen = most.load();
      while (now > seen && !most.compare_exchange_weak(seen, now)) {
      }
      while (!release) std::this_thread::yield();
      --running;
      ++done;
    });
  std::atomic<bool> other{false};
  pool.post(8, [&] { other = true; });
  CHECK(nexus::test::eventually([&] { return other.load(); }));  // another key is served meanwhile
  pool.forget(7);  // drops the queued ones; the one running finishes
  release = true;
  CHECK(nexus::test::eventually([&] { return running == 0 && pool.queued() == 0; }));
  CHECK(most == 1);
  CHECK(done < 6);
}

TEST_CASE("a task that throws is logged, and the pool goes on", "[iopool]") {
  std::atomic<bool> after{false};
  IoPool pool(1);
  pool.post(1, [] { throw std::runtime_error("a bug in a task"); });
  pool.post(1, [&] { after = true; });
  CHECK(nexus::test::eventually([&] { return after.load(); }));
}

TEST_CASE("a fault plan answers each planned fault as often as planned, and nothing else", "[fault]") {
  using namespace nexus::daemon::fault;
  Plan plan;
  CHECK(plan.take(Point::JobStep) == Action::None);
  plan.add(Point::JobStep, Action::Hang, 2);
  CHECK(plan.take(Point::ExecutorTurn) == Action::None);
  CHECK(plan.take(Point::JobStep) == Action::Hang);
  CHECK(plan.take(Point::JobStep) == Action::Hang);
  CHECK(plan.take(Point::JobStep) == Action::None);
  CHECK(plan.add("executor-throw"));
  CHECK_FALSE(plan.add("no-such-fault"));
  CHECK(plan.take(Point::ExecutorTurn) == Action::Throw);
  CHECK(std::find(Plan::names().begin(), Plan::names().end(), "rl-rollout-hang") != Plan::names().end());
  CHECK(at(Point::EnvWorker) == Action::None);  // no plan installed in this process: nothing
  CHECK_FALSE(armed());
}
