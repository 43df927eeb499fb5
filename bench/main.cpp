// nexus-bench: benchmarks whose figures are measured side by side in one run.
//   nexus-bench ipc [--json]    shm ring round trips (spin, block) vs a Unix-socket baseline
//   nexus-bench group [--json]  shared backbone passes: grouped vs serial, daemon vs in-process
#include <CLI/CLI.hpp>

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
#ifdef NEXUS_BENCH_WITH_GROUP
  group.nexusd = ipc.nexusd;
  if (group_cmd->parsed()) return nexus::bench::run_group(group);
#endif
  return 0;
}
