// nexus-bench env: simulator throughput with rendering (steps per second on one core, per task);
// rollout throughput of RL-style tenants (a gaussian head, 8 sessions each in nexusd's
// Environment Service, actions from nexusd every step) and of nexusd's own PPO jobs, with 1, 2
// and 4 tenants, through a grouping daemon vs one that runs requests one by one, in one run.
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
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

// `tenants` threads, each a tenant with `sessions` reach sessions in nexusd's Environment Service
// and `steps` rollout steps: step the sessions (their renders land in the tenant's arena), ask
// nexusd for actions on those observations, add exploration noise. Env steps per second.
double rollout_rate(const std::string& socket, const std::string& tag, int tenants, int sessions, int steps) {
  struct Rig {
    std::unique_ptr<Client> client;
    EnvSessions envs;
    Tensor images, tokens, mask, state, one_image, one_state;
    std::vector<std::string> instructions;
    std::vector<float> actions;
  };
  std::vector<Rig> rigs(static_cast<std::size_t>(tenants));
  std::uint64_t seed = 1;
  for (int i = 0; i < tenants; ++i) {
    auto& r = rigs[static_cast<std::size_t>(i)];
    r.client = Client::attach({.socket_path = socket, .tenant = tag + std::to_string(tenants) + "-" + std::to_string(i),
                               .client_arena_bytes = 8 << 20, .timeout = std::chrono::seconds(120)});
    const auto bb = r.client->register_tenant(
        {.head = {.kind = "gaussian", .state_dim = sim::Task::kStateDim, .action_dim = 2, .chunk = 1, .hidden = 64},
         .seed = static_cast<std::uint64_t>(i)});
    r.envs = r.client->env_open("reach", sessions);
    const std::int64_t n = sessions, h = bb.image_size;
    r.images = r.client->alloc(DType::UInt8, {n, 1, h, h, 3});
    r.tokens = r.client->alloc(DType::Int32, {n, bb.max_tokens});
    r.mask = r.client->alloc(DType::UInt8, {n, bb.max_tokens});
    r.state = r.client->alloc(DType::Float32, {n, sim::Task::kStateDim});
    r.one_image = r.client->alloc(DType::UInt8, {1, 1, h, h, 3});
    r.one_state = r.client->alloc(DType::Float32, {1, sim::Task::kStateDim});
    std::vector<std::uint64_t> seeds;
    for (int k = 0; k < sessions; ++k) seeds.push_back(seed++);
    r.instructions = r.client->env_reset(r.envs.ids, seeds, r.images, r.state).instructions;
  }
  auto rollout_step = [](Rig& r, std::mt19937_64& rng) {
    const auto n = static_cast<std::int64_t>(r.envs.ids.size());
    for (std::int64_t s = 0; s < n; ++s) tokenize(r.instructions[static_cast<std::size_t>(s)], r.tokens, r.mask, s);
    const auto pred = r.client->predict({&r.images, &r.tokens, &r.mask, &r.state});
    std::normal_distribution<float> noise(0, 0.3f);
    r.actions.resize(pred.actions.size());
    for (std::size_t k = 0; k < pred.actions.size(); ++k) r.actions[k] = pred.actions[k] + noise(rng);
    const auto out = r.client->env_step(r.envs.ids, r.actions, r.images, r.state);
    const std::size_t image_bytes = r.one_image.bytes(), state_bytes = r.one_state.bytes();
    for (std::size_t s = 0; s < out.done.size(); ++s) {
      r.instructions[s] = out.instructions[s];
      if (!out.done[s]) continue;  // a finished episode restarts, into its own row
      const std::uint64_t id = r.envs.ids[s], seed = rng();
      r.instructions[s] = r.client->env_reset({&id, 1}, {&seed, 1}, r.one_image, r.one_state).instructions[0];
      std::memcpy(r.images.raw().data() + s * image_bytes, r.one_image.raw().data(), image_bytes);
      std::memcpy(r.state.raw().data() + s * state_bytes, r.one_state.raw().data(), state_bytes);
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

// `tenants` PPO jobs on reach run by nexusd itself (rollouts, updates, publishing), `iterations`
// updates each, all started together: env steps per second over all of them, updates included.
double rl_job_rate(const std::string& socket, const std::string& tag, int tenants, int sessions, int iterations) {
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < tenants; ++i) {
    clients.push_back(Client::attach({.socket_path = socket, .tenant = tag + std::to_string(tenants) + "-" + std::to_string(i),
                                      .timeout = std::chrono::seconds(120)}));
    clients.back()->register_tenant({.head = {.kind = "gaussian", .state_dim = sim::Task::kStateDim, .action_dim = 2,
                                              .chunk = 1},
                                     .seed = static_cast<std::uint64_t>(i + 1)});
  }
  const auto t0 = Clock::now();
  for (auto& c : clients) c->rl_start({.sessions = sessions, .horizon = 16, .iterations = iterations});
  std::uint64_t steps = 0;
  for (auto& c : clients) {
    RlStatus s;
    while ((s = c->rl_status()).state == "running") std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (s.state != "done") throw std::runtime_error("RL job " + s.state + ": " + s.error);
    steps += s.env_steps;
  }
  return double(steps) / seconds_since(t0);
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
  // Env steps per second for each tenant count, grouping daemon vs serial daemon, side by side.
  auto compare = [&](const std::string& key, const std::string& speedup_key, const char* what, const auto& rate) {
    std::printf("%7s %16s %16s %8s\n", "tenants", "grouped steps/s", "serial steps/s", "speedup");
    j[key] = nlohmann::json::array();
    for (int t : o.tenants) {
      std::fprintf(stderr, "[env] %s with %d tenant(s) ...\n", what, t);
      const double g = rate(grouped, (key + "-g").c_str(), t), s = rate(serial, (key + "-s").c_str(), t);
      std::printf("%7d %16.1f %16.1f %7.2fx\n", t, g, s, g / s);
      j[key].push_back({{"tenants", t}, {"grouped_steps_per_s", g}, {"serial_steps_per_s", s}, {"speedup", g / s}});
      j[speedup_key + std::to_string(t)] = g / s;
    }
  };
  std::printf("\nrollouts (%s backbone, %d reach sessions per tenant in nexusd's Environment Service, actions from\n"
              "nexusd every step)\n",
              o.backbone.c_str(), o.sessions);
  compare("rollout", "rollout_speedup_", "rollouts", [&](const test::Daemon& d, const char* tag, int t) {
    return rollout_rate(d.socket(), tag, t, o.sessions, o.steps);
  });
  std::printf("\nRL jobs in nexusd (PPO on reach, %d sessions, %d updates each; rollouts, updates and publishing)\n",
              o.sessions, o.rl_iterations);
  compare("rl_jobs", "rl_job_speedup_", "RL jobs", [&](const test::Daemon& d, const char* tag, int t) {
    return rl_job_rate(d.socket(), tag, t, o.sessions, o.rl_iterations);
  });
  engines_section(o, j);
  if (o.json) std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace nexus::bench
