// The Training Queue's rules, without a model: bounded (a fast producer blocks), closing wakes
// both sides, and the staleness weights.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "daemon/rl/training_queue.hpp"
#include "processes.hpp"

using nexus::rl::StalePolicy;
using nexus::rl::Staleness;
using nexus::rl::TrainingQueue;

TEST_CASE("the training queue blocks a producer that runs ahead and hands records over in order", "[unit][rl]") {
  TrainingQueue<int> q(2);
  std::atomic<int> pushed{0};
  std::thread producer([&] {
    for (int i = 0; i < 5; ++i) {
      q.push(i);
      ++pushed;
    }
  });
  // Wait for the two pushes the bound admits (the producer may start late on a loaded machine),
  // then give it time to run past the bound if it could.
  REQUIRE(nexus::test::eventually([&] { return pushed >= 2; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(pushed == 2);  // the bound holds the producer back
  for (int i = 0; i < 5; ++i) CHECK(q.pop() == i);
  producer.join();
  CHECK(q.depth() == 0);
}

TEST_CASE("closing the training queue wakes a waiting consumer and refuses new records", "[unit][rl]") {
  TrainingQueue<int> q(1);
  std::thread consumer([&] { CHECK_FALSE(q.pop().has_value()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  q.close();
  consumer.join();
  CHECK_FALSE(q.push(1));
}

TEST_CASE("records beyond max_staleness are dropped or down-weighted, by config", "[unit][rl]") {
  const Staleness drop{2, StalePolicy::Drop}, down{2, StalePolicy::Downweight};
  CHECK(staleness_weight(drop, 0) == 1.0);
  CHECK(staleness_weight(drop, 2) == 1.0);
  CHECK(staleness_weight(drop, 3) == 0.0);
  CHECK(staleness_weight(down, 2) == 1.0);
  CHECK(staleness_weight(down, 3) == 0.5);
  CHECK(staleness_weight(down, 5) == 0.125);
}
