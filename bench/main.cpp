// nexus-bench: benchmarks whose figures are measured side by side in one run.
//   nexus-bench ipc [--json]    shm ring round trips (spin, block) vs a Unix-socket baseline
#include <CLI/CLI.hpp>

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
  CLI11_PARSE(app, argc, argv);
  if (ipc_cmd->parsed()) return nexus::bench::run_ipc(ipc);
  return 0;
}
