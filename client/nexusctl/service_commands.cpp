#include "service_commands.hpp"

#include <cstdio>
#include <iostream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "nexus/status.hpp"

namespace nexus::ctl {
namespace {

using nlohmann::json;

json usage_json(const TenantUsage& u) {
  return {{"name", u.name}, {"attached", u.attached}, {"weight", u.weight}, {"compute_s", u.compute_s()},
          {"train_s", u.train_s}, {"infer_s", u.infer_s}, {"samples", u.samples}, {"steps", u.steps},
          {"predictions", u.predictions}, {"env_steps", u.env_steps}, {"train_wait_p50_us", u.train_wait_p50_us},
          {"train_wait_p99_us", u.train_wait_p99_us}, {"infer_wait_p50_us", u.infer_wait_p50_us},
          {"infer_wait_p99_us", u.infer_wait_p99_us}, {"adapter", u.adapter}};
}

json job_json(const JobInfo& j) {
  return {{"id", j.id}, {"tenant", j.tenant}, {"kind", j.kind}, {"state", j.state}, {"error", j.error},
          {"done", j.done}, {"total", j.total}, {"loss", j.loss}, {"success_rate", j.success_rate},
          {"mean_return", j.mean_return}, {"version", j.version}, {"seconds", j.seconds}};
}

json services_json(const DaemonStatus& s) {
  const double wall = s.usage_wall_s > 0 ? s.usage_wall_s : 1;
  return {{"wall_s", s.usage_wall_s},
          {"training", {{"busy_s", s.training_busy_s}, {"utilization", s.training_busy_s / wall}}},
          {"inference", {{"busy_s", s.inference_busy_s}, {"utilization", s.inference_busy_s / wall}}},
          {"environment", {{"busy_s", s.environment_busy_s}, {"utilization", s.environment_busy_s / wall}}}};
}

void print_json(const json& j) { std::cout << j.dump() << "\n"; }

}  // namespace

double parse_duration(const std::string& text) {
  std::size_t used = 0;
  const double v = std::stod(text, &used);
  const std::string unit = text.substr(used);
  const double scale = unit.empty() || unit == "s" ? 1 : unit == "m" ? 60 : unit == "h" ? 3600 : unit == "d" ? 86400 : -1;
  if (scale < 0 || !(v > 0)) throw std::invalid_argument("a duration is a positive number with s, m, h or d: " + text);
  return v * scale;
}

int status_command(const std::string& socket, bool json_out) {
  const DaemonStatus s = query_status(socket);
  if (json_out) {
    json j = {{"daemon_version", s.daemon_version}, {"protocol_version", s.protocol_version}, {"pid", s.pid},
              {"uptime_s", s.uptime_s}, {"message_bytes_copied", s.message_bytes_copied},
              {"tensor_bytes_copied", s.tensor_bytes_copied}, {"backbone", s.backbone},
              {"model_groups", s.model_groups}, {"model_requests", s.model_requests}, {"model_samples", s.model_samples},
              {"inference_queued", s.inference_queued}, {"training_queued", s.training_queued},
              {"slots_resident", s.slots_resident}, {"slots_evicted", s.slots_evicted},
              {"env_sessions", s.env_sessions}, {"dataset_bytes", s.dataset_bytes}, {"rerun_groups", s.rerun_groups},
              {"split_steps", s.split_steps},
              {"longest_training_turn_s", s.longest_training_turn_s},
              {"longest_shared_training_turn_s", s.longest_shared_training_turn_s},
              {"health_restarts", s.health_restarts}, {"health", s.health},
              {"services", services_json(s)}, {"tenants", json::array()}, {"replicas", json::array()},
              {"engines", json::array()}, {"rollout_scaling", s.rollout_scaling}};
    for (const auto& e : s.engines)
      j["engines"].push_back({{"id", e.id}, {"name", e.name}, {"uid", e.uid}, {"shared", e.shared},
                              {"draining", e.draining}, {"capacity", e.capacity}, {"sessions", e.sessions},
                              {"steps", e.steps}, {"tasks", e.tasks}});
    for (const auto& r : s.replicas)
      j["replicas"].push_back({{"device", r.device}, {"tenants", r.tenants}, {"groups", r.groups}, {"samples", r.samples}});
    for (const auto& t : s.tenants)
      j["tenants"].push_back({{"name", t.name}, {"uid", t.uid}, {"pid", t.pid}, {"session_id", t.session_id},
                              {"segment_bytes", t.segment_bytes}, {"requests", t.requests}, {"errors", t.errors},
                              {"attached_s", t.attached_s}});
    print_json(j);
    return 0;
  }
  std::printf("nexusd %s (protocol %u), pid %d, up %.1f s\n", s.daemon_version.c_str(), s.protocol_version, s.pid,
              s.uptime_s);
  if (!s.backbone.empty()) {
    std::printf("backbone %s: %llu group passes served %llu requests (%.2f per pass), %llu samples\n",
                s.backbone.c_str(), static_cast<unsigned long long>(s.model_groups),
                static_cast<unsigned long long>(s.model_requests),
                s.model_groups ? double(s.model_requests) / double(s.model_groups) : 0.0,
                static_cast<unsigned long long>(s.model_samples));
    std::string devices;
    for (const auto& r : s.replicas)
      devices += (devices.empty() ? "" : ", ") + r.device + " (" + std::to_string(r.tenants) + " tenant(s), " +
                 std::to_string(r.groups) + " passes)";
    if (!devices.empty()) std::printf("devices: %s\n", devices.c_str());
    const double wall = s.usage_wall_s > 0 ? s.usage_wall_s : 1;
    std::printf("busy: training %.0f%%, inference %.0f%%, environment %.0f%%; queued: %llu inference, %llu training\n",
                100 * s.training_busy_s / wall, 100 * s.inference_busy_s / wall, 100 * s.environment_busy_s / wall,
                static_cast<unsigned long long>(s.inference_queued), static_cast<unsigned long long>(s.training_queued));
  }
  for (const auto& h : s.health) std::printf("restarted: %s\n", h.c_str());
  for (const auto& e : s.engines)
    std::printf("rollout engine %s (%llu, uid %u, %s): %d of %d sessions, %llu steps%s\n", e.name.c_str(),
                static_cast<unsigned long long>(e.id), e.uid, e.shared ? "shared" : "its user's tenants only",
                e.sessions, e.capacity, static_cast<unsigned long long>(e.steps), e.draining ? ", draining" : "");
  if (!s.rollout_scaling.empty()) std::printf("rollout scaling: %s\n", s.rollout_scaling.c_str());
  std::printf("%zu tenant(s) attached\n", s.tenants.size());
  if (!s.tenants.empty()) {
    std::printf("  %-24s %7s %8s %8s %12s %10s %7s %9s\n", "TENANT", "UID", "PID", "SESSION", "SEGMENT", "REQUESTS",
                "ERRORS", "ATTACHED");
    for (const auto& t : s.tenants)
      std::printf("  %-24s %7u %8d %8llu %9.1f MiB %10llu %7llu %8.1fs\n", t.name.c_str(), t.uid, t.pid,
                  static_cast<unsigned long long>(t.session_id), t.segment_bytes / 1048576.0,
                  static_cast<unsigned long long>(t.requests), static_cast<unsigned long long>(t.errors), t.attached_s);
  }
  return 0;
}

int tenants_command(const std::string& socket, bool json_out) {
  const DaemonStatus s = query_status(socket);
  if (json_out) {
    json j = {{"tenants", json::array()}};
    for (const auto& u : s.usage) j["tenants"].push_back(usage_json(u));
    print_json(j);
    return 0;
  }
  std::printf("%-20s %-8s %6s %10s %10s %9s %9s %19s  %s\n", "TENANT", "ATTACHED", "WEIGHT", "COMPUTE_S", "SAMPLES",
              "STEPS", "ENV_STEPS", "TRAIN WAIT p50/p99", "ADAPTER");
  for (const auto& u : s.usage)
    std::printf("%-20s %-8s %6.2f %10.2f %10llu %9llu %9llu %8.1f/%8.1fms  %s\n", u.name.c_str(),
                u.attached ? "yes" : "no", u.weight, u.compute_s(), static_cast<unsigned long long>(u.samples),
                static_cast<unsigned long long>(u.steps), static_cast<unsigned long long>(u.env_steps),
                u.train_wait_p50_us / 1000, u.train_wait_p99_us / 1000, u.adapter.empty() ? "-" : u.adapter.c_str());
  return 0;
}

namespace {

json users_json(const DaemonStatus& s) {
  json out = json::array();
  for (const auto& u : s.users)
    out.push_back({{"uid", u.uid}, {"names", u.names}, {"names_max", u.names_max}, {"slots", u.slots},
                   {"slots_max", u.slots_max}, {"checkpoints", u.checkpoints}, {"checkpoints_max", u.checkpoints_max},
                   {"checkpoint_bytes", u.checkpoint_bytes}, {"checkpoint_bytes_max", u.checkpoint_bytes_max},
                   {"rl_observation_bytes", u.rl_observation_bytes}, {"rl_observation_bytes_max", u.rl_observation_bytes_max}});
  return out;
}

void print_users(const DaemonStatus& s) {
  if (s.users.empty()) return;
  std::printf("per Unix user (used/bound):\n%8s %11s %11s %13s %21s %21s\n", "UID", "NAMES", "SLOTS", "CHECKPOINTS",
              "CHECKPOINT MiB", "RL OBSERVATIONS MiB");
  const auto mib = [](std::uint64_t b) { return static_cast<unsigned long long>((b + (1u << 20) - 1) >> 20); };
  for (const auto& u : s.users)
    std::printf("%8u %5llu/%-5llu %5llu/%-5llu %6llu/%-6llu %10llu/%-10llu %10llu/%-10llu\n", u.uid,
                static_cast<unsigned long long>(u.names), static_cast<unsigned long long>(u.names_max),
                static_cast<unsigned long long>(u.slots), static_cast<unsigned long long>(u.slots_max),
                static_cast<unsigned long long>(u.checkpoints), static_cast<unsigned long long>(u.checkpoints_max),
                static_cast<unsigned long long>(u.checkpoint_bytes >> 20),
                static_cast<unsigned long long>(u.checkpoint_bytes_max >> 20), mib(u.rl_observation_bytes),
                mib(u.rl_observation_bytes_max));
}

}  // namespace

int usage_command(const std::string& socket, const std::string& since, bool json_out) {
  const double since_s = since.empty() ? 0 : parse_duration(since);
  const DaemonStatus s = query_status(socket, std::chrono::seconds(5), since_s);
  double total = 0;
  for (const auto& u : s.usage) total += u.compute_s();
  if (json_out) {
    json j = {{"since_s", since_s}, {"wall_s", s.usage_wall_s}, {"compute_s", total}, {"services", services_json(s)},
              {"tenants", json::array()}, {"users", users_json(s)}};
    for (const auto& u : s.usage) {
      auto t = usage_json(u);
      t["share"] = total > 0 ? u.compute_s() / total : 0;
      j["tenants"].push_back(t);
    }
    print_json(j);
    return 0;
  }
  std::printf("usage over %.0f s%s: %.2f compute-seconds in all\n", s.usage_wall_s,
              since.empty() ? " (since nexusd started)" : "", total);
  std::printf("%-20s %10s %6s %10s %10s %10s %9s %9s\n", "TENANT", "COMPUTE_S", "SHARE", "TRAIN_S", "INFER_S", "SAMPLES",
              "STEPS", "ENV_STEPS");
  for (const auto& u : s.usage)
    std::printf("%-20s %10.2f %5.1f%% %10.2f %10.2f %10llu %9llu %9llu\n", u.name.c_str(), u.compute_s(),
                total > 0 ? 100 * u.compute_s() / total : 0.0, u.train_s, u.infer_s,
                static_cast<unsigned long long>(u.samples), static_cast<unsigned long long>(u.steps),
                static_cast<unsigned long long>(u.env_steps));
  const double wall = s.usage_wall_s > 0 ? s.usage_wall_s : 1;
  std::printf("services busy: training %.1f%%, inference %.1f%%, environment %.1f%%\n", 100 * s.training_busy_s / wall,
              100 * s.inference_busy_s / wall, 100 * s.environment_busy_s / wall);
  print_users(s);
  return 0;
}

int jobs_command(const std::string& socket, bool json_out) {
  const DaemonStatus s = query_status(socket);
  if (json_out) {
    json j = {{"jobs", json::array()}};
    for (const auto& job : s.jobs) j["jobs"].push_back(job_json(job));
    print_json(j);
    return 0;
  }
  std::printf("%5s %-16s %-5s %-10s %13s %9s %8s  %s\n", "ID", "TENANT", "KIND", "STATE", "PROGRESS", "LOSS", "SUCCESS",
              "ERROR");
  for (const auto& j : s.jobs)
    std::printf("%5llu %-16s %-5s %-10s %6lld/%-6lld %9.4f %7.0f%%  %s\n", static_cast<unsigned long long>(j.id),
                j.tenant.c_str(), j.kind.c_str(), j.state.c_str(), static_cast<long long>(j.done),
                static_cast<long long>(j.total), j.loss, 100 * j.success_rate, j.error.c_str());
  return 0;
}

int cancel_command(const std::string& socket, std::uint64_t job, bool json_out) {
  const auto state = cancel_job(socket, job);
  if (json_out) print_json({{"job", job}, {"state", state}});
  else std::printf("job %llu: %s\n", static_cast<unsigned long long>(job), state.c_str());
  return 0;
}

int metrics_command(const std::string& socket) {
  std::cout << query_metrics(socket);
  return 0;
}

}  // namespace nexus::ctl
