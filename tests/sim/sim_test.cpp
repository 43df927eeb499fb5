// The built-in MuJoCo tasks: experts, seeded resets, rendering, refusals.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "sim/baselines.hpp"
#include "sim/renderer.hpp"
#include "sim/task.hpp"

using nexus::sim::make_task;
using nexus::sim::StepResult;
using nexus::sim::TaskError;

namespace {

double expert_success_rate(const std::string& task, int episodes) {
  auto t = make_task(task);
  int ok = 0;
  for (int e = 0; e < episodes; ++e) {
    t->reset(static_cast<std::uint64_t>(e));
    while (!t->done()) t->step(t->expert_action());
    ok += t->success();
  }
  return double(ok) / episodes;
}

// Where a world point (x, y) lands in the top camera's image (pixel column, row).
std::pair<int, int> pixel_of(double x, double y, int size) {
  const double half = 1.2 * std::tan(12.0 * M_PI / 180.0);  // camera height x tan(fovy / 2)
  return {static_cast<int>((x / half + 1) / 2 * size), static_cast<int>((1 - y / half) / 2 * size)};
}

}  // namespace

TEST_CASE("the scripted experts succeed on at least 95% of episodes", "[sim]") {
  const double reach = expert_success_rate("reach", 200), push = expert_success_rate("push", 200);
  INFO("reach " << reach << ", push " << push);
  CHECK(reach >= 0.95);
  CHECK(push >= 0.95);
}

TEST_CASE("reach's instruction-ignoring baselines score what ignoring the instruction can", "[sim]") {
  std::vector<std::uint64_t> seeds(200);
  for (std::size_t i = 0; i < seeds.size(); ++i) seeds[i] = 5000 + i;
  using nexus::sim::IgnoringPolicy;
  const auto nearest = nexus::sim::instruction_ignoring_reach(IgnoringPolicy::NearestBall, seeds);
  const auto sweep = nexus::sim::instruction_ignoring_reach(IgnoringPolicy::Sweep, seeds);
  INFO("nearest ball " << nearest.success << ", sweep " << sweep.success);
  // Heading for one ball without reading which is named finds the named one some of the time:
  // about a third, less since episodes start away from the named ball (sim/reach.cpp).
  CHECK(nearest.success > 0.05);
  CHECK(nearest.success < 0.5);
  // Visiting the balls in turn starts with the nearest, so it never does worse, and it reaches
  // a second ball within the 40 steps often enough to do better.
  CHECK(sweep.success > nearest.success + 0.1);
  // The same seeds, the same scores: the baselines are functions of the layouts alone.
  CHECK(nexus::sim::instruction_ignoring_reach(IgnoringPolicy::Sweep, seeds).success == sweep.success);
}

TEST_CASE("reach's mocap bodies are its three balls, and the fingertip is where proprio says", "[sim]") {
  auto t = make_task("reach");
  t->reset(3);
  const auto balls = t->mocap_xy();
  REQUIRE(balls.size() == 3);
  const auto state = t->sim_state();  // qpos (2), qvel (2), then the mocap positions
  for (std::size_t i = 0; i < 3; ++i) {
    CHECK(balls[i].first == Approx(state[4 + 2 * i]).margin(1e-6));
    CHECK(balls[i].second == Approx(state[5 + 2 * i]).margin(1e-6));
  }
  const auto p = t->proprio();  // fingertip in units of 0.25 m
  CHECK(t->fingertip().first == Approx(p[0] * 0.25).margin(1e-6));
  CHECK(t->fingertip().second == Approx(p[1] * 0.25).margin(1e-6));
}

TEST_CASE("sessions share rendering contexts: as many as render at once, the same frames", "[sim]") {
  using nexus::sim::Renderer;
  REQUIRE(Renderer::contexts_alive() == 0);
  std::vector<std::unique_ptr<nexus::sim::Task>> tasks;
  for (int i = 0; i < 16; ++i) {
    tasks.push_back(make_task("reach"));
    tasks.back()->reset(static_cast<std::uint64_t>(40 + i));
  }
  // One thread renders all 16 sessions through one context (one per session cost 78 MiB each).
  std::vector<std::vector<std::uint8_t>> alone;
  for (auto& t : tasks) alone.push_back(t->render());
  CHECK(Renderer::contexts_alive() == 1);
  // A frame does not depend on what the context drew before: the first session again, after 15 others.
  CHECK(tasks[0]->render() == alone[0]);
  // Two threads render at once: two contexts at most, and every frame as drawn alone.
  std::vector<std::vector<std::uint8_t>> together(tasks.size());
  auto half = [&](std::size_t from) {
    for (int round = 0; round < 3; ++round)
      for (std::size_t i = from; i < tasks.size(); i += 2) together[i] = tasks[i]->render();
  };
  std::thread a(half, 0), b(half, 1);
  a.join(), b.join();
  CHECK(Renderer::contexts_alive() <= 2);
  CHECK(together == alone);
  // push is another kind: its own context; the last session of a kind takes its contexts along.
  auto push = make_task("push");
  push->reset(1);
  push->render();
  CHECK(Renderer::contexts_alive() >= 2);
  tasks.clear();
  CHECK(Renderer::contexts_alive() == 1);
  push.reset();
  CHECK(Renderer::contexts_alive() == 0);
}

TEST_CASE("a reset is a function of its seed, episodes end at success or the limit", "[sim]") {
  for (const std::string name : {"reach", "push"}) {
    auto a = make_task(name), b = make_task(name);
    a->reset(42);
    b->reset(42);
    CHECK(a->render() == b->render());
    CHECK(a->sim_state() == b->sim_state());
    CHECK(a->instruction() == b->instruction());
    b->reset(43);
    CHECK(a->sim_state() != b->sim_state());
    // Standing still never succeeds: the episode ends at its limit, truncated (not terminal).
    const float still[2] = {0, 0};
    StepResult last;
    while (!a->done()) {
      last = a->step(still);
      CHECK(last.truncated == last.done);
    }
    CHECK(a->steps() == a->max_steps());
    CHECK_FALSE(a->success());
    CHECK(last.truncated);
    CHECK_THROWS_AS(a->step(still), TaskError);
    // The expert ends it by the task: terminated, not truncated.
    a->reset(42);
    while (!a->done()) last = a->step(a->expert_action());
    CHECK(last.success);
    CHECK_FALSE(last.truncated);
  }
}

TEST_CASE("reach: the instruction names a ball the camera shows in its colour", "[sim]") {
  auto t = make_task("reach");
  for (int seed = 0; seed < 20; ++seed) {
    t->reset(static_cast<std::uint64_t>(seed));
    const auto image = t->render();
    const auto state = t->sim_state();
    // The balls are the first three mocap bodies: red, green, blue; their (x, y) end the state.
    const std::size_t base = state.size() - 6;
    const char* colours[] = {"red", "green", "blue"};
    for (int k = 0; k < 3; ++k) {
      const auto [col, row] = pixel_of(state[base + 2 * k], state[base + 2 * k + 1], t->image_size());
      // Its colour around the projected centre (5x5, inside its 3.75-pixel radius; the arm may
      // lie across part of it).
      int coloured = 0;
      for (int dy = -2; dy <= 2; ++dy)
        for (int dx = -2; dx <= 2; ++dx) {
          const std::uint8_t* px = &image[(static_cast<std::size_t>(row + dy) * t->image_size() + col + dx) * 3];
          coloured += px[k] > 150 && px[(k + 1) % 3] < 100 && px[(k + 2) % 3] < 100;
        }
      INFO("seed " << seed << " " << colours[k] << " ball at pixel " << col << "," << row);
      CHECK(coloured >= 10);
    }
    CHECK(t->instruction().find("reach the ") == 0);
  }
}

TEST_CASE("bad actions and names are refused with TaskError, nothing else", "[sim]") {
  auto t = make_task("reach");
  t->reset(1);
  const float three[3] = {0, 0, 0};
  CHECK_THROWS_AS(t->step({three, 3}), TaskError);
  const float nan[2] = {NAN, 0};
  CHECK_THROWS_AS(t->step(nan), TaskError);
  const float huge[2] = {1e9f, -1e9f};  // clipped to the unit box, not refused
  CHECK_NOTHROW(t->step(huge));
  CHECK_THROWS_AS(make_task("fly"), TaskError);
  CHECK_THROWS_AS(make_task("reach", {.image_size = 4}), TaskError);
}
