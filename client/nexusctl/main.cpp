// nexusctl: the administrator's view of nexusd (status, tenants, usage, jobs, cancel, top,
// metrics) and the demonstration-dataset tools.
#include <cstdio>

#include <CLI/CLI.hpp>

#include "dataset_command.hpp"
#include "nexus/status.hpp"
#include "schema/protocol.hpp"
#include "service_commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"nexusctl: inspect and steer nexusd"};
  std::string socket = nexus::schema::kDefaultSocketPath;
  app.add_option("-s,--socket", socket, "nexusd control socket");
  bool json = false;
  auto json_flag = [&](CLI::App* cmd) { cmd->add_flag("--json", json, "one JSON object on stdout"); };
  auto* status = app.add_subcommand("status", "daemon version, uptime, grouping, attached tenants");
  json_flag(status);
  auto* tenants = app.add_subcommand("tenants", "every tenant with usage: weight, compute-seconds, queue waits");
  json_flag(tenants);
  std::string since;
  auto* usage = app.add_subcommand("usage", "compute-seconds per tenant (what a lab would bill), service utilization");
  usage->add_option("--since", since, "over the last 90s, 15m, 2h, 7d (default: since nexusd started)");
  json_flag(usage);
  auto* jobs = app.add_subcommand("jobs", "every job: kind, state, progress, result");
  json_flag(jobs);
  std::uint64_t job = 0;
  auto* cancel = app.add_subcommand("cancel", "cancel a job (root, or the Unix user that owns it)");
  cancel->add_option("job", job, "the job's id (nexusctl jobs)")->required();
  json_flag(cancel);
  double interval = 1.0;
  int iterations = 0;
  auto* top = app.add_subcommand("top", "a live view that fits 80x24");
  top->add_option("--interval", interval, "seconds between refreshes")->check(CLI::Range(0.1, 3600.0));
  top->add_option("--iterations", iterations, "refreshes, then exit (0: until interrupted)");
  auto* metrics = app.add_subcommand("metrics", "the Prometheus text exposition of nexusd's metrics");
  auto* drain = app.add_subcommand(
      "drain", "stop nexusd cleanly (root or nexusd's user): every changed slot is checkpointed, then it exits");
  std::string scale_what;
  int scale_count = 0;
  auto* scale = app.add_subcommand("scale", "how many rollout engines nexusd runs (root or nexusd's user)");
  scale->add_option("what", scale_what, "rollout")->required()->check(CLI::IsMember({"rollout", "infer", "train"}));
  scale->add_option("count", scale_count, "engines wanted: the least busy above it drain, nexusd starts its own below it")
      ->required()
      ->check(CLI::Range(0, 4096));
  auto* tenant = app.add_subcommand("tenant", "tenant names");
  tenant->require_subcommand(1);
  std::string release_name;
  auto* release = tenant->add_subcommand("release", "unbind a name from its Unix user (root or that user)");
  release->add_option("name", release_name, "the tenant name")->required();

  auto* dataset = app.add_subcommand("dataset", "demonstration datasets (robomimic/LIBERO HDF5)");
  dataset->require_subcommand(1);
  nexus::ctl::RecordOptions rec;
  auto* record = dataset->add_subcommand("record", "record the built-in task's scripted expert");
  record->add_option("--task", rec.task, "reach or push");
  record->add_option("--episodes", rec.episodes, "demonstrations to write")->check(CLI::Range(1, 100000));
  record->add_option("--out", rec.out, "output .hdf5 file")->required();
  record->add_option("--seed", rec.seed, "episode i is reset with seed + i");
  record->add_option("--image-size", rec.image_size, "camera resolution (the backbone's: 64)")->check(CLI::Range(8, 256));
  record->add_flag("--keep-failures", rec.keep_failures, "also write episodes the expert failed");
  std::string info_path;
  auto* info = dataset->add_subcommand("info", "what a dataset holds (and whether it reads cleanly)");
  info->add_option("file", info_path, "an .hdf5 file")->required();
  std::string info_views, info_state_keys;
  nexus::datasets::ReadOptions info_options;
  info->add_option("--views", info_views, "camera keys under obs/, comma-separated (default: the layout's)");
  info->add_option("--state-keys", info_state_keys, "proprio keys under obs/, comma-separated (default: the layout's)");
  info->add_option("--image-size", info_options.image_size, "resize views to this side, as nexusd does (default: keep)")
      ->check(CLI::Range(0, 4096));
  info->add_option("--instruction", info_options.instruction, "for files whose demos name none");
  json_flag(info);
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  try {
    if (status->parsed()) return nexus::ctl::status_command(socket, json);
    if (tenants->parsed()) return nexus::ctl::tenants_command(socket, json);
    if (usage->parsed()) return nexus::ctl::usage_command(socket, since, json);
    if (jobs->parsed()) return nexus::ctl::jobs_command(socket, json);
    if (cancel->parsed()) return nexus::ctl::cancel_command(socket, job, json);
    if (top->parsed()) return nexus::ctl::top_command(socket, interval, iterations);
    if (metrics->parsed()) return nexus::ctl::metrics_command(socket);
    if (drain->parsed()) {
      const auto tenants = nexus::drain_daemon(socket);
      std::printf("nexusd is draining (%u tenants attached): it checkpoints every changed slot, then exits\n", tenants);
      return 0;
    }
    if (scale->parsed()) {
      const auto r = nexus::scale_daemon(socket, scale_what, scale_count);
      std::printf("%s: %d -> %d: %s\n", scale_what.c_str(), r.before, r.after, r.message.c_str());
      return 0;
    }
    if (release->parsed()) {
      nexus::release_tenant(socket, release_name);
      std::printf("released %s\n", release_name.c_str());
      return 0;
    }
    if (record->parsed()) return nexus::ctl::record_dataset(rec);
    if (info->parsed()) {
      info_options.views = nexus::datasets::split_keys(info_views);
      info_options.state_keys = nexus::datasets::split_keys(info_state_keys);
      return nexus::ctl::dataset_info(info_path, info_options, json);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nexusctl: %s\n", e.what());
    return 1;
  }
  return 0;
}
