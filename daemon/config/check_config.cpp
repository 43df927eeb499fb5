#include <grp.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "daemon/config/config.hpp"

namespace nexus::daemon {

int check_config(const DaemonConfig& c, const std::string& source) {
  int problems = 0;
  auto problem = [&](const std::string& what) {
    std::printf("  PROBLEM  %s\n", what.c_str());
    ++problems;
  };
  auto note = [](const std::string& what) { std::printf("  note     %s\n", what.c_str()); };
  std::printf("nexusd configuration (%s)\n", source.empty() ? "defaults and flags" : source.c_str());
  std::printf("  socket   %s (mode %04o, group %s; or the one systemd passes)\n", c.socket_path.c_str(),
              c.socket_mode, c.socket_group.c_str());
  if (!c.socket_group.empty() && ::getgrnam(c.socket_group.c_str()) == nullptr)
    note("no group '" + c.socket_group + "': the socket keeps nexusd's group (systemd-sysusers makes it)");
  std::printf("  backbone %s, %s%s\n", c.backbone.c_str(), c.precision.c_str(),
              c.precision == "tf32" ? " (on CUDA devices; float32 on the CPU)" : "");
  if (c.precision == "bf16" && c.backbone == "aoti")
    problem("precision bf16 does not apply to an AOTInductor package (it runs at the precision it was compiled in)");
  if (c.backbone != "none") {
    const auto weights = resolve_weights(c);
    if (weights.empty()) {
      if (c.backbone == "torchscript") problem("--backbone torchscript needs weights = FILE.pt");
      else if (c.backbone == "aoti") problem("--backbone aoti needs weights = FILE.pt2");
      else note("no weights: the seeded, untrained initialisation (heads learn nothing useful on it)");
    } else if (::access(weights.c_str(), R_OK) != 0) {
      problem("weights " + weights + " cannot be read");
    } else {
      std::printf("  weights  %s\n", weights.c_str());
    }
  }
  std::printf("  state    %s (tenant bindings, checkpoints; private to nexusd's user)\n", c.state_dir.c_str());
  const auto parent = std::filesystem::path(c.state_dir).parent_path();
  if (!std::filesystem::exists(c.state_dir) && !std::filesystem::exists(parent))
    problem("neither " + c.state_dir + " nor its parent exists");
  std::printf("  bounds   %u tenants (%u per user), %u in flight each, %llu MiB request memory each,\n"
              "           %.0f GFLOP per request, %u versions kept, slots evicted after %llds detached\n",
              c.max_tenants, c.max_tenants_per_uid, c.max_in_flight,
              static_cast<unsigned long long>(c.request_bytes_per_tenant >> 20), c.max_request_gflop, c.versions_kept,
              static_cast<long long>(c.idle_evict.count()));
  if (c.deterministic)
    std::printf("  lanes    1 per replica, a turn at a time (deterministic mode keeps one)\n");
  else
    std::printf("  lanes    %u inference, %s per replica (their turns run side by side)\n", c.inference_lanes,
                c.training_lanes ? (std::to_string(c.training_lanes) + " training").c_str()
                                 : "training on the first inference lane");
  std::printf("           training turns of at most %.0f ms%s\n", c.max_training_turn_ms,
              c.max_training_turn_ms > 0 && !c.deterministic ? " (bigger steps run as micro-batches)" : " (steps never split)");
  std::printf("           per user: %u names, %u slots, %u checkpoints (%llu MiB), %llu MiB of RL observations; jobs: %u per tenant, %u in all\n",
              c.max_names_per_uid, c.max_slots_per_uid, c.max_checkpoints_per_uid,
              static_cast<unsigned long long>(c.checkpoint_bytes_per_uid >> 20),
              static_cast<unsigned long long>(c.rl_observation_bytes_per_uid >> 20), c.jobs_per_tenant, c.jobs_total);
  if (c.feature_cache_bytes == 0)
    std::printf("  cache    feature cache off ([feature_cache] mib = 0)\n");
  else
    std::printf("  cache    features of dataset samples: %llu MiB (%llu per tenant), disk tier %llu MiB, %s\n",
                static_cast<unsigned long long>(c.feature_cache_bytes >> 20),
                static_cast<unsigned long long>(c.feature_cache_bytes_per_tenant >> 20),
                static_cast<unsigned long long>(c.feature_cache_disk_bytes >> 20),
                c.feature_cache_shared ? "shared across tenants on the same content" : "per tenant");
  std::printf("  regions  %s\n", c.allow_device_regions ? "tenants may register regions of their own ([ipc] allow_device_regions)"
                                                       : "off ([ipc] allow_device_regions = false)");
  std::string devices;
  for (const auto& d : c.devices) devices += (devices.empty() ? "" : ", ") + d;
  std::printf("  devices  %s (one backbone replica each)\n",
              devices.empty() ? "every visible CUDA device, else the CPU (model.devices unset)" : devices.c_str());
  // The syntax here; whether a CUDA device is visible is the CUDA runtime's to say, at start.
  // Without the NVIDIA driver's control device no CUDA device can be.
  for (const auto& d : c.devices) {
    const bool cuda = d == "cuda" || (d.rfind("cuda:", 0) == 0 && d.size() > 5 &&
                                      d.find_first_not_of("0123456789", 5) == std::string::npos);
    if (d != "cpu" && !cuda) problem("model.devices: \"" + d + "\" is not a device (\"cpu\" or \"cuda:N\")");
    else if (cuda && ::access("/dev/nvidiactl", F_OK) != 0)
      problem("model.devices: \"" + d + "\": no NVIDIA driver on this machine (/dev/nvidiactl is missing)");
  }
  for (const auto& [name, w] : c.tenants)
    std::printf("  tenant   %s: weight %.2f, priority %d%s\n", name.c_str(), w.weight, w.priority,
                w.replica >= 0 ? (", replica " + std::to_string(w.replica)).c_str() : "");
  for (const auto& [name, path] : c.external_envs) std::printf("  env      %s -> %s\n", name.c_str(), path.c_str());
  if (!c.metrics_textfile.empty())
    std::printf("  metrics  %s every %llds\n", c.metrics_textfile.c_str(), static_cast<long long>(c.metrics_interval.count()));
  std::printf("%s\n", problems ? "configuration has problems" : "configuration OK");
  return problems ? 2 : 0;
}

}  // namespace nexus::daemon
