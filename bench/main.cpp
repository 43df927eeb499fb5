// nexus-bench: benchmarks whose figures are measured side by side in one run.
//   nexus-bench ipc [--json]    shm ring round trips (spin, block) vs a Unix-socket baseline
//   nexus-bench group [--json]  shared backbone passes: grouped vs serial, daemon vs in-process
//   nexus-bench env [--json]    simulator steps/s with rendering; rollouts grouped vs serial
#include <CLI/CLI.hpp>

#include "env.hpp"
#include "group.hpp"

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
#ifdef NEXUS_BENCH_WITH_GROUP
  nexus::bench::GroupOptions group;
  group.python = NEXUS_BENCH_PYTHON;
  group.plot_script = NEXUS_BENCH_PLOT_GROUP;
  auto* group_cmd = app.add_subcommand("group", "grouped vs serial backbone passes, through nexusd and in-process");
  group_cmd->add_option("--backbone", group.backbone, "tiny or small");
  group_cmd->add_option("--tenants", group.tenants, "tenant counts")->delimiter(',');
  group_cmd->add_option("--batch", group.batches, "local batch sizes")->delimiter(',');
  group_cmd->add_option("--rounds", group.rounds, "timed requests per tenant per cell");
  group_cmd->add_option("--csv", group.csv, "CSV output");
  group_cmd->add_option("--png", group.png, "plot output (empty: none)");
  group_cmd->add_flag("--json", group.json, "last line: one JSON object of figures");
#endif
  CLI11_PARSE(app, argc, argv);
  if (ipc_cmd->parsed()) return nexus::bench::run_ipc(ipc);
  env.nexusd = ipc.nexusd;
  if (env_cmd->parsed()) return nexus::bench::run_env(env);
#ifdef NEXUS_BENCH_WITH_GROUP
  group.nexusd = ipc.nexusd;
  if (group_cmd->parsed()) return nexus::bench::run_group(group);
#endif
  return 0;
}
