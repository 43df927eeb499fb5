// nexus-bench: benchmarks whose figures are measured side by side in one run.
//   nexus-bench ipc [--json]    shm ring round trips (spin, block) vs a Unix-socket baseline
//   nexus-bench group [--json]  shared backbone passes: grouped vs serial, daemon vs in-process
//   nexus-bench env [--json]    simulator steps/s with rendering; rollouts grouped vs serial
//   nexus-bench workload [--json] [--scale S] [--out DIR]   the reference mix shared vs isolated
//   nexus-bench fairness [--json]  weighted fair share; inference latency behind training
//   nexus-bench adapters [--json]  per-tenant LoRA: grouped pass vs a pass per tenant vs none
#include <CLI/CLI.hpp>
#include <cstdio>

#include "env.hpp"
#include "adapters.hpp"
#include "group.hpp"
#include "workload.hpp"

namespace nexus::bench {
struct IpcOptions {
  int round_trips = 100000;
  int block_round_trips = 20000;
  bool json = false;
  std::string nexusd;
};
int run_ipc(const IpcOptions& options);
}  // namespace nexus::bench

int main(int argc, char** argv) {
  CLI::App app{"nexus-bench: side-by-side measurements of Nexus"};
  app.require_subcommand(1);
  nexus::bench::IpcOptions ipc;
  ipc.nexusd = NEXUS_BENCH_NEXUSD;
  if (const char* env = std::getenv("NEXUS_NEXUSD")) ipc.nexusd = env;
  auto* ipc_cmd = app.add_subcommand("ipc", "round-trip latency: shm rings (spin, block) vs Unix socket");
  ipc_cmd->add_option("-n,--round-trips", ipc.round_trips, "timed round trips with spinning waits");
  ipc_cmd->add_option("--block-round-trips", ipc.block_round_trips, "timed round trips with blocking waits and over the Unix socket");
  ipc_cmd->add_flag("--json", ipc.json, "last line: one JSON object of figures");
  ipc_cmd->add_option("--nexusd", ipc.nexusd, "nexusd binary to start");
  nexus::bench::EnvOptions env;
  auto* env_cmd = app.add_subcommand("env", "simulator steps/s with rendering; rollouts grouped vs serial through nexusd");
  env_cmd->add_option("--tenants", env.tenants, "tenant counts")->delimiter(',');
  env_cmd->add_option("--sessions", env.sessions, "reach sessions per tenant");
  env_cmd->add_option("--steps", env.steps, "timed rollout steps per tenant");
  env_cmd->add_option("--sim-steps", env.sim_steps, "steps for the per-core simulator figures");
  env_cmd->add_option("--rl-iterations", env.rl_iterations, "updates per nexusd PPO job");
  env_cmd->add_option("--backbone", env.backbone, "tiny or small (seeded weights)");
  env_cmd->add_flag("--json", env.json, "last line: one JSON object of figures");
  env_cmd->add_option("--engine-sessions", env.engine_sessions, "rollout engines: sessions of one tenant");
  env_cmd->add_option("--engine-steps", env.engine_steps, "rollout engines: timed steps per placement");
  env_cmd->add_option("--rollout", env.rollout, "nexus-rollout to start (default: beside nexusd)");
#ifdef NEXUS_BENCH_WITH_GROUP
  nexus::bench::GroupOptions group;
  group.python = NEXUS_BENCH_PYTHON;
  group.plot_script = NEXUS_BENCH_PLOT_GROUP;
  auto* group_cmd = app.add_subcommand("group", "grouped vs serial backbone passes, through nexusd and in-process");
  group_cmd->add_option("--backbone", group.backbone, "tiny or small");
  group_cmd->add_option("--tenants", group.tenants, "tenant counts")->delimiter(',');
  group_cmd->add_option("--batch", group.batches, "local batch sizes")->delimiter(',');
  group_cmd->add_option("--device", group.device, "nexusd's device and the in-process ceiling's: cpu, cuda:N, auto (cuda:0 where one is)");
  group_cmd->add_option("--precision", group.precision, "[model] precision of both: float32, tf32, bf16")
      ->check(CLI::IsMember({"float32", "tf32", "bf16"}));
  group_cmd->add_option("--rounds", group.rounds, "timed requests per tenant per cell (0: 4 on the CPU, 64 on a GPU)")
      ->check(CLI::Range(0, 100000));
  group_cmd->add_option("--repeats", group.repeats, "measurements per cell (median and spread)")->check(CLI::Range(1, 50));
  group_cmd->add_option("--replicas", group.replicas, "also a daemon with this many replicas on the device (--devices), against one")
      ->check(CLI::Range(1, 8));
  group_cmd->add_option("--latency-requests", group.latency_requests, "batch-1 requests timed one by one (p50, p99)")
      ->check(CLI::Range(10, 100000));
  group_cmd->add_option("--utilization-seconds", group.utilization_s,
                        "on a GPU: how long the widest cells run again while NVML reads its utilization (0: not read)")
      ->check(CLI::Range(0.0, 60.0));
  group_cmd->add_option("--out", group.out, "directory for group.csv and group.png (default: a new one under /tmp)");
  group_cmd->add_option("--csv", group.csv, "CSV output (default: OUT/group.csv)");
  auto* group_png = group_cmd->add_option("--png", group.png, "plot output (default: OUT/group.png; empty or none: no plot)");
  group_cmd->add_flag("--json", group.json, "last line: one JSON object of figures");
#endif
#ifdef NEXUS_BENCH_WITH_GROUP
  nexus::bench::AdaptersOptions adapters;
  auto* adapters_cmd = app.add_subcommand("adapters", "per-tenant LoRA: one grouped pass vs a pass per tenant vs none");
  adapters_cmd->add_option("--backbone", adapters.backbone, "tiny or small (seeded weights)");
  adapters_cmd->add_option("--tenants", adapters.tenants, "tenant counts")->delimiter(',');
  adapters_cmd->add_option("--batch", adapters.batch, "samples per tenant")->check(CLI::Range(1, 64));
  adapters_cmd->add_option("--rank", adapters.rank, "each adapter's rank, on every block and projection")
      ->check(CLI::Range(1, 64));
  adapters_cmd->add_option("--rounds", adapters.rounds, "timed passes per measurement")->check(CLI::Range(1, 1000));
  adapters_cmd->add_option("--repeats", adapters.repeats, "measurements per cell (median)")->check(CLI::Range(1, 50));
  adapters_cmd->add_option("--device", adapters.device, "cpu or cuda (cuda:N)");
  adapters_cmd->add_flag("--json", adapters.json, "last line: one JSON object of figures");
  nexus::bench::WorkloadOptions workload{.nexusctl = NEXUS_BENCH_NEXUSCTL, .rl_tenant = NEXUS_BENCH_RL_TENANT,
                                         .sft_demos_tenant = NEXUS_BENCH_SFT_DEMOS_TENANT, .python = NEXUS_BENCH_PYTHON,
                                         .plot_script = NEXUS_BENCH_PLOT_TIMELINE};
  auto* workload_cmd = app.add_subcommand("workload", "the reference mix (3 RL + 1 SFT) shared vs isolated, side by side");
  workload_cmd->add_option("--scale", workload.scale, "multiplies every tenant's work (1: about 5 minutes on 2 cores)");
  workload_cmd->add_option("--out", workload.out, "directory for workload.csv, timeline.csv, timeline.png");
  workload_cmd->add_option("--scenario", workload.scenario,
                           "mix (3 RL + 1 SFT, shared vs isolated), sft-cache (two SFT tenants on one dataset, "
                           "feature cache off/on/shared/bounded), or all")
      ->check(CLI::IsMember({"mix", "sft-cache", "all"}));
  workload_cmd->add_flag("--profile", workload.profile,
                        "mix: where each executor lane's time went (backbone, copy, heads, optimizer, other, wait)");
  workload_cmd->add_option("--inference-lanes", workload.inference_lanes,
                           "mix: executor lanes serving inference, on every daemon of the run (default: nexusd's)")
      ->check(CLI::Range(1, 8));
  workload_cmd->add_option("--training-lanes", workload.training_lanes,
                           "mix: 0 (training on the first inference lane) to 4, on every daemon of the run "
                           "(default: nexusd's)")
      ->check(CLI::Range(0, 4));
  workload_cmd->add_option("--torch-threads", workload.torch_threads,
                           "mix: LibTorch intra-op threads per pass on every daemon of the run (0: one per core; "
                           "default: nexusd's)")
      ->check(CLI::Range(0, 1024));
  workload_cmd->add_option("--cache-epochs", workload.cache_epochs, "sft-cache: epochs per tenant")
      ->check(CLI::Range(2, 100));
  workload_cmd->add_flag("--json", workload.json, "last line: one JSON object of figures");
  nexus::bench::FairnessOptions fairness{.sft_tenant = NEXUS_BENCH_SFT_TENANT};
  auto* fairness_cmd = app.add_subcommand("fairness", "weights 1:2 under contention; predict latency idle vs behind training");
  fairness_cmd->add_option("--seconds", fairness.seconds, "each measured phase");
  fairness_cmd->add_option("--shared-seconds", fairness.shared_seconds,
                           "batch 128 vs batch 4, closed loops: the shared phase (alone phases: --seconds)");
  fairness_cmd->add_option("--turn-ms", fairness.turn_ms,
                           "the small-batch scenario's [model] max_training_turn_ms (default: nexusd's)");
  fairness_cmd->add_option("--training-lanes", fairness.training_lanes,
                           "[model] training_lanes of every daemon but the steps-kept-whole one, which keeps 1 "
                           "(default: nexusd's)")
      ->check(CLI::Range(0, 4));
  fairness_cmd->add_flag("--json", fairness.json, "last line: one JSON object of figures");
#endif
  CLI11_PARSE(app, argc, argv);
  try {
  if (ipc_cmd->parsed()) return nexus::bench::run_ipc(ipc);
  env.nexusd = ipc.nexusd;
  if (env_cmd->parsed()) return nexus::bench::run_env(env);
#ifdef NEXUS_BENCH_WITH_GROUP
  group.nexusd = ipc.nexusd;
  if (group_cmd->parsed()) {
    if (group_png->count() > 0 && group.png.empty()) group.png = "none";  // --png "": no plot, as before --out
    return nexus::bench::run_group(group);
  }
  if (adapters_cmd->parsed()) return nexus::bench::run_adapters(adapters);
  workload.nexusd = fairness.nexusd = ipc.nexusd;
  if (workload_cmd->parsed()) return nexus::bench::run_workload(workload);
  if (fairness_cmd->parsed()) return nexus::bench::run_fairness(fairness);
#endif
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nexus-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
