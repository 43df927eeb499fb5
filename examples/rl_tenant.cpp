// rl_tenant: reinforcement learning through nexusd. Registers a gaussian head, asks the daemon
// for an RL job (PPO or GRPO on a built-in task: the daemon runs the rollouts in its Environment
// Service and the updates in its model service), prints progress, and ends with one JSON line.
// Evaluate the result with eval_tenant --version <final version>.
//
// With --demos FILE (demonstrations of the task, e.g. `nexusctl dataset record --task push`) the
// head is first warm-started by --warm-start-steps SFT steps on them, and the RL job keeps them
// in its loss with --demo-weight (DAPG's behaviour-cloning term): what push needs, whose policy
// learns nothing from scratch in a few dozen updates (docs/design/env-rl.md).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "nexus/client.hpp"

namespace {

// Where the job's steps ran, as JSON members: "engine": steps ("": nexusd itself). Engine names
// are [A-Za-z0-9._-] (nexusd checks), so they need no escaping.
std::string engine_steps_json(const nexus::RlStatus& s) {
  std::string out;
  for (const auto& [engine, steps] : s.engine_steps)
    out += (out.empty() ? "\"" : ",\"") + engine + "\":" + std::to_string(steps);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"rl_tenant: PPO or GRPO on a built-in task, driven by nexusd"};
  nexus::ClientOptions opt;
  nexus::RlOptions rl;
  double lr = 1e-3;
  int report_every = 2;
  std::string demos;
  int warm_start_steps = 3000;
  int eval_untrained = 0;
  app.add_option("-s,--socket", opt.socket_path, "nexusd control socket");
  app.add_option("-t,--tenant", opt.tenant, "tenant name")->required();
  app.add_option("--algorithm", rl.algorithm, "ppo or grpo");
  app.add_option("--task", rl.task, "reach or push");
  app.add_option("--iterations", rl.iterations, "updates (each publishes a version)");
  app.add_option("--sessions", rl.sessions, "simulator sessions");
  app.add_option("--horizon", rl.horizon, "ppo: steps per rollout record");
  app.add_option("--group-size", rl.group_size, "grpo: episodes per start state");
  app.add_option("--max-staleness", rl.max_staleness, "records older than this many versions are dropped");
  app.add_flag("--synchronous", rl.synchronous, "collect, update, collect with the new version: every record on-policy");
  app.add_option("--lr", lr, "the head's learning rate");
  int adapter_rank = 0;
  app.add_option("--adapter-rank", adapter_rank,
                 "also train a low-rank adapter of this rank on every block of the backbone (0: the head alone)")
      ->check(CLI::Range(0, 64));
  app.add_option("--seed", rl.seed, "head initialisation and episode seeds");
  app.add_option("--report-every", report_every, "a progress line every N seconds (0: none)");
  auto* demos_option =
      app.add_option("--demos", demos, "demonstrations of the task (.hdf5): warm start and behaviour-cloning term");
  app.add_option("--warm-start-steps", warm_start_steps, "with --demos: SFT steps of 32 before RL")
      ->check(CLI::Range(0, 1000000))
      ->needs(demos_option);
  app.add_option("--eval-untrained", eval_untrained,
                 "with --demos: greedy success of the head before its warm start, in N episodes (an eval job)")
      ->check(CLI::Range(0, 256))
      ->needs(demos_option);
  app.add_option("--demo-weight", rl.demo_weight, "with --demos: the behaviour-cloning term's weight (0: none)")
      ->check(CLI::Range(0.0, 100.0))
      ->needs(demos_option);
  CLI11_PARSE(app, argc, argv);
  opt.timeout = std::chrono::seconds(60);  // starting a job opens its sessions: seconds on a busy box
  try {
    auto client = nexus::Client::attach(opt);
    // The head is sized from the task: one session opened and closed says its dimensions
    // (reach: 4 and 2; Meta-World: 4 and 4).
    const auto probe = client->env_open(rl.task, 1);
    client->env_close(probe.ids);
    nexus::TenantSpec spec;
    spec.head = {.kind = "gaussian", .state_dim = probe.state_dim, .action_dim = probe.action_dim, .chunk = 1};
    spec.head.adapter.rank = adapter_rank;
    spec.optimizer.lr = lr;
    spec.seed = rl.seed;
    client->register_tenant(spec);
    double warm_loss = NAN;
    std::uint64_t untrained = 0;  // --eval-untrained: the head before its warm start, published
    double untrained_success = NAN;
    if (!demos.empty()) {
      if (eval_untrained > 0) {  // evaluated now: the tenant's later versions would evict it
        untrained = client->publish();
        // The episodes eval_tenant runs by default (seed 90000 + i), so the figures compare.
        const auto id = client->job_start(
            {.kind = "eval", .task = rl.task, .version = untrained, .episodes = eval_untrained, .seed = 90000});
        nexus::JobInfo job;
        while ((job = client->job(id)).state == "queued" || job.state == "running")
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
        if (job.state != "finished") throw std::runtime_error("evaluating the untrained head: " + job.error);
        untrained_success = job.success_rate;
        if (report_every > 0)
          std::fprintf(stderr, "[%s] untrained head (v%llu): greedy success %.2f in %d episodes of %s\n",
                       opt.tenant.c_str(), static_cast<unsigned long long>(untrained), untrained_success,
                       eval_untrained, rl.task.c_str());
      }
      nexus::DatasetOptions data;
      data.seed = rl.seed;
      client->dataset_load("demos", demos, data);
      for (int step = 1; step <= warm_start_steps; ++step) {
        warm_loss = client->dataset_sft_step("demos", 32, 1).loss;
        if (report_every > 0 && (step % 500 == 0 || step == warm_start_steps))
          std::fprintf(stderr, "[%s] warm start on %s: SFT step %d/%d  loss %.4f\n", opt.tenant.c_str(), demos.c_str(),
                       step, warm_start_steps, warm_loss);
      }
      if (rl.demo_weight > 0) rl.demo_dataset = "demos";
    }
    const auto first = client->rl_start(rl);
    nexus::RlStatus s;
    for (int tick = 1;; ++tick) {
      std::this_thread::sleep_for(std::chrono::seconds(1));
      s = client->rl_status();
      if (s.state == "running" && (report_every <= 0 || tick % report_every != 0)) continue;
      std::fprintf(stderr, "[%s] %s %s it %d/%d v%llu  %.0f steps/s  success %.2f  return %.2f  loss %.4f%s\n",
                   opt.tenant.c_str(), rl.algorithm.c_str(), rl.task.c_str(), s.iterations, rl.iterations,
                   static_cast<unsigned long long>(s.version), s.env_steps / std::max(1e-9, s.seconds),
                   s.recent_success, s.recent_return, s.policy_loss,
                   rl.demo_weight > 0 ? ("  demos " + std::to_string(s.demo_loss).substr(0, 6)).c_str() : "");
      if (s.state != "running") break;
    }
    std::printf("{\"tenant\":\"%s\",\"adapter_rank\":%d,\"algorithm\":\"%s\",\"task\":\"%s\",\"state\":\"%s\",\"error\":\"%s\","
                "\"iterations\":%d,\"first_version\":%llu,\"version\":%llu,\"env_steps\":%llu,\"episodes\":%llu,"
                "\"recent_success\":%.4f,\"recent_return\":%.4f,\"records_dropped\":%llu,"
                "\"records_behind\":%llu,\"seconds\":%.1f,\"untrained_version\":%llu,\"untrained_success\":%s,"
                "\"warm_start_steps\":%d,\"warm_start_loss\":%s,\"demo_weight\":%g,\"demo_loss\":%.4f,"
                "\"interrupted_episodes\":%llu,\"split_minibatches\":%llu,\"observation_bytes\":%llu,"
                "\"engine_steps\":{%s}}\n",
                opt.tenant.c_str(), adapter_rank, rl.algorithm.c_str(), rl.task.c_str(), s.state.c_str(), s.error.c_str(),
                s.iterations, static_cast<unsigned long long>(first), static_cast<unsigned long long>(s.version),
                static_cast<unsigned long long>(s.env_steps), static_cast<unsigned long long>(s.episodes),
                s.recent_success, s.recent_return, static_cast<unsigned long long>(s.records_dropped),
                static_cast<unsigned long long>(s.records_behind), s.seconds,
                static_cast<unsigned long long>(untrained),
                std::isnan(untrained_success) ? "null" : std::to_string(untrained_success).c_str(),
                demos.empty() ? 0 : warm_start_steps,
                std::isnan(warm_loss) ? "null" : std::to_string(warm_loss).c_str(), rl.demo_weight, s.demo_loss,
                static_cast<unsigned long long>(s.interrupted_episodes),
                static_cast<unsigned long long>(s.split_minibatches), static_cast<unsigned long long>(s.observation_bytes),
                engine_steps_json(s).c_str());
    return s.state == "done" ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rl_tenant %s: %s\n", opt.tenant.c_str(), e.what());
    return 1;
  }
}
