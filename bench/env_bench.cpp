// nexus-bench env: simulator throughput with rendering (steps per second on one core, per task),
// and rollout throughput: RL-style tenants (a gaussian head, 8 simulated sessions each, actions
// from nexusd every step) with 1, 2 and 4 tenants, through a grouping daemon vs one that runs
// requests one by one, in the same run.
#include <barrier>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "env.hpp"
#include "nexus/client.hpp"
#include "processes.hpp"
#include "sim/task.hpp"

namespace nexus::bench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// One thread, one session: steps per second with a render every step, and without.
std::pair<double, double> sim_rate(const std::string& task, int steps) {
  auto t = sim::make_task(task);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<std::uint8_t> image(static_cast<std::size_t>(t->image_size() * t->image_size() * 3));
  double rates[2];
  for (int render = 1; render >= 0; --render) {
    t->reset(7);
    const auto t0 = Clock::now();
    for (int k = 0; k < steps; ++k) {
      if (t->done()) t->reset(static_cast<std::uint64_t>(k));
      const float a[2] = {u(rng), u(rng)};
      t->step(a);
      if (render) t->render(image.data());
    }
    rates[render] = steps / seconds_since(t0);
  }
  return {rates[1], rates[0]};
}

// `tenants` threads, each a tenant with `sessions` reach sessions, `steps` rollout steps each:
// render all sessions, ask nexusd for actions, add exploration noise, step. Env steps per second.
double rollout_rate(const std::string& socket, const std::string& tag, int tenants, int sessions, int steps) {
  struct Rig {
    std::unique_ptr<Client> client;
    std::vector<std::unique_ptr<sim::Task>> envs;
    Tensor images, tokens, mask, state;
  };
  std::vector<Rig> rigs(static_cast<std::size_t>(tenants));
  for (int i = 0; i < tenants; ++i) {
    auto& r = rigs[static_cast<std::size_t>(i)];
    r.client = Client::attach({.socket_path = socket, .tenant = tag + std::to_string(tenants) + "-" + std::to_string(i),
                               .client_arena_bytes = 8 << 20, .timeout = std::chrono::seconds(120)});
    const auto bb = r.client->register_tenant(
        {.head = {.kind = "gaussian", .state_dim = sim::Task::kStateDim, .action_dim = 2, .chunk = 1, .hidden = 64},
         .seed = static_cast<std::uint64_t>(i)});
    for (int s = 0; s < sessions; ++s) {
      r.envs.push_back(sim::make_task("reach", {.image_size = bb.image_size}));
      r.envs.back()->reset(static_cast<std::uint64_t>(1000 * i + s));
    }
    r.images = r.client->alloc(DType::UInt8, {sessions, 1, bb.image_size, bb.image_size, 3});
    r.tokens = r.client->alloc(DType::Int32, {sessions, bb.max_tokens});
    r.mask = r.client->alloc(DType::UInt8, {sessions, bb.max_tokens});
    r.state = r.client->alloc(DType::Float32, {sessions, sim::Task::kStateDim});
  }
  auto rollout_step = [](Rig& r, std::mt19937_64& rng) {
    const auto n = static_cast<std::int64_t>(r.envs.size());
    const std::size_t image_bytes = r.images.bytes() / static_cast<std::size_t>(n);
    for (std::int64_t s = 0; s < n; ++s) {
      auto& env = *r.envs[static_cast<std::size_t>(s)];
      if (env.done()) env.reset(rng());
      env.render(r.images.raw().data() + s * image_bytes);
      tokenize(env.instruction(), r.tokens, r.mask, s);
      const auto p = env.proprio();
      std::copy(p.begin(), p.end(), r.state.as<float>().begin() + s * sim::Task::kStateDim);
    }
    const auto pred = r.client->predict({&r.images, &r.tokens, &r.mask, &r.state});
    std::normal_distribution<float> noise(0, 0.3f);
    for (std::int64_t s = 0; s < n; ++s) {
      const float a[2] = {pred.actions[static_cast<std::size_t>(2 * s)] + noise(rng),
                          pred.actions[static_cast<std::size_t>(2 * s + 1)] + noise(rng)};
      r.envs[static_cast<std::size_t>(s)]->step(a);
    }
  };
  for (auto& r : rigs) {  // warm-up
    std::mt19937_64 rng(3);
    rollout_step(r, rng);
  }
  std::barrier start(tenants + 1);
  std::vector<std::thread> threads;
  for (int i = 0; i < tenants; ++i)
    threads.emplace_back([&, i] {
      std::mt19937_64 rng(static_cast<std::uint64_t>(i));
      start.arrive_and_wait();
      for (int k = 0; k < steps; ++k) rollout_step(rigs[static_cast<std::size_t>(i)], rng);
    });
  start.arrive_and_wait();
  const auto t0 = Clock::now();
  for (auto& t : threads) t.join();
  return double(tenants) * sessions * steps / seconds_since(t0);
}

}  // namespace

int run_env(const EnvOptions& o) {
  nlohmann::json j;
  std::printf("%-6s %18s %18s %14s\n", "task", "steps/s rendered", "steps/s physics", "render share");
  for (const std::string task : {"reach", "push"}) {
    std::fprintf(stderr, "[env] %s: %d steps on one core ...\n", task.c_str(), o.sim_steps);
    const auto [rendered, physics] = sim_rate(task, o.sim_steps);
    const double share = 1 - rendered / physics;
    std::printf("%-6s %18.0f %18.0f %13.0f%%\n", task.c_str(), rendered, physics, 100 * share);
    j[task + "_steps_per_s_per_core"] = rendered;
    j[task + "_render_share"] = share;
  }
  test::Daemon grouped({"--backbone", o.backbone, "--log-level", "warn"}, o.nexusd);
  test::Daemon serial({"--backbone", o.backbone, "--batch-samples", "1", "--log-level", "warn"}, o.nexusd);
  std::printf("\nrollouts (%s backbone, %d reach sessions per tenant, actions from nexusd every step)\n",
              o.backbone.c_str(), o.sessions);
  std::printf("%7s %16s %16s %8s\n", "tenants", "grouped steps/s", "serial steps/s", "speedup");
  j["rollout"] = nlohmann::json::array();
  for (int t : o.tenants) {
    std::fprintf(stderr, "[env] rollouts with %d tenant(s) ...\n", t);
    const double g = rollout_rate(grouped.socket(), "g", t, o.sessions, o.steps);
    const double s = rollout_rate(serial.socket(), "s", t, o.sessions, o.steps);
    std::printf("%7d %16.1f %16.1f %7.2fx\n", t, g, s, g / s);
    j["rollout"].push_back({{"tenants", t}, {"grouped_steps_per_s", g}, {"serial_steps_per_s", s}, {"speedup", g / s}});
    j["rollout_speedup_" + std::to_string(t)] = g / s;
  }
  if (o.json) std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace nexus::bench
