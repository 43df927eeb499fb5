// nexusctl: the administrator's view of nexusd.
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "dataset_command.hpp"
#include "nexus/status.hpp"
#include "schema/protocol.hpp"

namespace {

int status_command(const std::string& socket, bool json) {
  const nexus::DaemonStatus s = nexus::query_status(socket);
  if (json) {
    nlohmann::json j;
    j["daemon_version"] = s.daemon_version;
    j["protocol_version"] = s.protocol_version;
    j["pid"] = s.pid;
    j["uptime_s"] = s.uptime_s;
    j["message_bytes_copied"] = s.message_bytes_copied;
    j["tensor_bytes_copied"] = s.tensor_bytes_copied;
    j["backbone"] = s.backbone;
    j["model_groups"] = s.model_groups;
    j["model_requests"] = s.model_requests;
    j["model_samples"] = s.model_samples;
    j["tenants"] = nlohmann::json::array();
    for (const auto& t : s.tenants)
      j["tenants"].push_back({{"name", t.name}, {"uid", t.uid}, {"pid", t.pid},
                              {"session_id", t.session_id}, {"segment_bytes", t.segment_bytes},
                              {"requests", t.requests}, {"errors", t.errors},
                              {"attached_s", t.attached_s}});
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::printf("nexusd %s (protocol %u), pid %d, up %.1f s\n", s.daemon_version.c_str(),
              s.protocol_version, s.pid, s.uptime_s);
  if (!s.backbone.empty())
    std::printf("backbone %s: %llu group passes served %llu requests (%.2f per pass), %llu samples\n",
                s.backbone.c_str(), static_cast<unsigned long long>(s.model_groups),
                static_cast<unsigned long long>(s.model_requests),
                s.model_groups ? double(s.model_requests) / double(s.model_groups) : 0.0,
                static_cast<unsigned long long>(s.model_samples));
  std::printf("%zu tenant(s) attached\n", s.tenants.size());
  if (!s.tenants.empty()) {
    std::printf("  %-24s %7s %8s %8s %12s %10s %7s %9s\n", "TENANT", "UID", "PID", "SESSION",
                "SEGMENT", "REQUESTS", "ERRORS", "ATTACHED");
    for (const auto& t : s.tenants)
      std::printf("  %-24s %7u %8d %8llu %9.1f MiB %10llu %7llu %8.1fs\n", t.name.c_str(), t.uid,
                  t.pid, static_cast<unsigned long long>(t.session_id), t.segment_bytes / 1048576.0,
                  static_cast<unsigned long long>(t.requests),
                  static_cast<unsigned long long>(t.errors), t.attached_s);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"nexusctl: inspect and steer nexusd"};
  std::string socket = nexus::schema::kDefaultSocketPath;
  app.add_option("-s,--socket", socket, "nexusd control socket");
  bool json = false;
  auto* status = app.add_subcommand("status", "daemon version, uptime, attached tenants");
  status->add_flag("--json", json, "one JSON object on stdout");
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
  info->add_flag("--json", json, "one JSON object on stdout");
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  try {
    if (status->parsed()) return status_command(socket, json);
    if (record->parsed()) return nexus::ctl::record_dataset(rec);
    if (info->parsed()) return nexus::ctl::dataset_info(info_path, json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nexusctl: %s\n", e.what());
    return 1;
  }
  return 0;
}
