// nexus-bench env, rollout engines: one tenant steps its sessions of a render-bound task with
// random actions (no model in the loop), wherever nexusd places them: in nexusd's own worker
// pool, on one rollout engine (nexus-rollout, a process of its own), on two. Measured side by
// side in one run, on one nexusd; each figure opens fresh sessions, so placement follows the
// engines attached at that moment.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "env.hpp"
#include "nexus/client.hpp"
#include "nexus/status.hpp"
#include "processes.hpp"

namespace nexus::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Steps per second of `sessions` sessions of `task`, `steps` steps each (a warm-up step first);
// `placed` gets where nexusd put them.
double stepping_rate(const std::string& socket, const std::string& tenant, const std::string& task, int sessions,
                     int steps, std::vector<std::string>& placed) {
  auto c = Client::attach({.socket_path = socket, .tenant = tenant, .timeout = std::chrono::seconds(120)});
  const auto envs = c->env_open(task, sessions);
  const std::int64_t n = sessions, h = envs.image_size;
  auto images = c->alloc(DType::UInt8, {n, 1, h, h, 3});
  auto state = c->alloc(DType::Float32, {n, envs.state_dim});
  std::vector<std::uint64_t> seeds;
  for (int k = 0; k < sessions; ++k) seeds.push_back(static_cast<std::uint64_t>(k + 1));
  c->env_reset(envs.ids, seeds, images, state);
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> actions(static_cast<std::size_t>(n * envs.action_dim));
  auto step = [&] {
    for (auto& a : actions) a = u(rng);
    const auto r = c->env_step(envs.ids, actions, images, state);
    std::vector<std::uint64_t> ended, fresh;
    for (std::size_t i = 0; i < r.done.size(); ++i) {
      if (!r.errors[i].empty()) throw std::runtime_error("env step: " + r.errors[i]);
      if (r.done[i]) ended.push_back(envs.ids[i]), fresh.push_back(rng());
    }
    if (!ended.empty()) {  // restarted into scratch rows: the timed loop only needs them running
      const auto m = static_cast<std::int64_t>(ended.size());
      auto img = c->alloc(DType::UInt8, {m, 1, h, h, 3});
      auto st = c->alloc(DType::Float32, {m, envs.state_dim});
      c->env_reset(ended, fresh, img, st);
    }
    return r;
  };
  placed = step().engines;
  const auto t0 = Clock::now();
  for (int k = 0; k < steps; ++k) step();
  const double rate = double(sessions) * steps / std::chrono::duration<double>(Clock::now() - t0).count();
  c->env_close(envs.ids);
  return rate;
}

std::string rollout_binary(const EnvOptions& o) {
  if (!o.rollout.empty()) return o.rollout;
  const auto nexusd = std::filesystem::path(o.nexusd);
  for (const auto& p : {nexusd.parent_path() / "nexus-rollout", nexusd.parent_path().parent_path() / "rollout" / "nexus-rollout"})
    if (std::filesystem::exists(p)) return p.string();
  throw std::runtime_error("no nexus-rollout beside " + o.nexusd + " (give --rollout)");
}

}  // namespace

void engines_section(const EnvOptions& o, nlohmann::json& j) {
  const std::string binary = rollout_binary(o);
  test::Daemon d({"--backbone", o.backbone, "--log-level", "warn"}, o.nexusd);
  const std::string socket = d.socket().substr(0, d.socket().rfind('/')) + "/rollout.sock";
  std::printf("\nrollout engines (%d sessions of one tenant, random actions, %d steps; steps/s)\n", o.engine_sessions,
              o.engine_steps);
  std::printf("%-6s %14s %14s %14s %10s %10s\n", "task", "in nexusd", "1 engine", "2 engines", "2 vs 1", "1 vs pool");
  for (const std::string task : {"reach", "push"}) {
    std::vector<pid_t> engines;
    double rate[3];
    for (int count = 0; count <= 2; ++count) {
      if (count > 0) {
        const std::string name = "bench-" + task + "-" + std::to_string(count);
        engines.push_back(test::spawn({binary, "-s", socket, "-n", name, "-c", "256"}, {.stdout_path = "/dev/null"}));
        const bool attached = test::eventually([&] {
          for (const auto& e : query_status(d.socket()).engines)
            if (e.name == name) return true;
          return false;
        }, std::chrono::seconds(30));
        if (!attached) throw std::runtime_error("rollout engine " + name + " did not attach");
      }
      std::fprintf(stderr, "[env] %s with %d engine(s) ...\n", task.c_str(), count);
      std::vector<std::string> placed;
      rate[count] = stepping_rate(d.socket(), "eng-" + task + std::to_string(count), task, o.engine_sessions,
                                  o.engine_steps, placed);
      const auto on_engines = std::count_if(placed.begin(), placed.end(), [](const auto& e) { return !e.empty(); });
      if (on_engines != (count ? o.engine_sessions : 0))
        throw std::runtime_error("sessions were not placed as measured: " + std::to_string(on_engines) + " on engines");
    }
    for (pid_t p : engines) ::kill(p, SIGTERM);
    for (pid_t p : engines) test::wait_exit(p, std::chrono::seconds(30));
    std::printf("%-6s %14.0f %14.0f %14.0f %9.2fx %9.2fx\n", task.c_str(), rate[0], rate[1], rate[2], rate[2] / rate[1],
                rate[1] / rate[0]);
    j["engines_" + task] = {{"in_nexusd_steps_per_s", rate[0]}, {"one_engine_steps_per_s", rate[1]},
                            {"two_engines_steps_per_s", rate[2]}};
    j["engines_two_vs_one_" + task] = rate[2] / rate[1];
    j["engines_one_vs_pool_" + task] = rate[1] / rate[0];
  }
}

}  // namespace nexus::bench
