#include "daemon/config/config.hpp"

#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <stdexcept>
#include <toml++/toml.h>

namespace nexus::daemon {

std::string resolve_weights(const DaemonConfig& c) {
  if (c.weights == "seeded") return "";
  if (!c.weights.empty() || c.backbone != "tiny") return c.weights;
  // NEXUS_EMBEDDED_WEIGHTS_DIRS: the installed data directory, then the source tree's weights/
  // (a build run from its tree finds the committed file without being told).
  std::istringstream dirs(NEXUS_EMBEDDED_WEIGHTS_DIRS);
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const auto path = std::filesystem::path(dir) / "backbone-tiny.safetensors";
    if (std::filesystem::exists(path)) return path.string();
  }
  return "";
}

namespace {

// Typed readers that name the key on bad input: a value of the wrong type is an error, not a
// silently kept default.
class Reader {
 public:
  Reader(const std::string& path, const toml::table& t) : path_(path), t_(t) {}
  template <class T>
  bool get(const char* section, const char* key, T& out) {
    const auto node = t_[section][key];
    if (!node) return false;
    const auto v = node.template value<T>();
    if (!v) fail(section, key, "has the wrong type");
    out = *v;
    return true;
  }
  std::int64_t positive(const char* section, const char* key, std::int64_t fallback) {
    std::int64_t v = fallback;
    if (get(section, key, v) && v <= 0) fail(section, key, "must be > 0");
    return v;
  }
  std::int64_t non_negative(const char* section, const char* key, std::int64_t fallback) {
    std::int64_t v = fallback;
    if (get(section, key, v) && v < 0) fail(section, key, "must be >= 0");
    return v;
  }
  // A size in MiB, returned in bytes: at most 2^24 MiB (16 TiB), so that the shift cannot wrap
  // a huge value into a tiny bound.
  std::uint64_t mib(const char* section, const char* key, std::uint64_t fallback_bytes, bool zero_ok = false) {
    const auto fallback = static_cast<std::int64_t>(fallback_bytes >> 20);
    const std::int64_t v = zero_ok ? non_negative(section, key, fallback) : positive(section, key, fallback);
    if (v > (std::int64_t{1} << 24)) fail(section, key, "must be at most 16777216 (16 TiB)");
    return static_cast<std::uint64_t>(v) << 20;
  }
  double positive_real(const char* section, const char* key, double fallback) {
    double v = fallback;
    const auto node = t_[section][key];
    if (!node) return v;
    if (auto i = node.value<std::int64_t>(); i && node.is_integer()) v = static_cast<double>(*i);
    else if (auto d = node.value<double>()) v = *d;
    else fail(section, key, "must be a number");
    if (!(v > 0)) fail(section, key, "must be > 0");
    return v;
  }
  [[noreturn]] void fail(const std::string& section, const std::string& key, const char* why) const {
    throw std::runtime_error("config " + path_ + ": " + section + "." + key + " " + why);
  }

 private:
  const std::string& path_;
  const toml::table& t_;
};

}  // namespace

DaemonConfig load_config_file(const std::string& path, DaemonConfig c) {
  toml::table t;
  try {
    t = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw std::runtime_error("config " + path + ": " + std::string(e.description()));
  }
  Reader r(path, t);
  using std::chrono::microseconds, std::chrono::milliseconds, std::chrono::seconds;
  r.get("daemon", "socket", c.socket_path);
  if (std::string mode; r.get("daemon", "socket_mode", mode)) {
    char* end = nullptr;
    const auto m = std::strtoul(mode.c_str(), &end, 8);
    if (mode.empty() || *end || m > 0777) r.fail("daemon", "socket_mode", "must be an octal mode like \"0660\"");
    c.socket_mode = static_cast<std::uint32_t>(m);
  }
  r.get("daemon", "socket_group", c.socket_group);
  c.max_pending_per_uid = static_cast<std::uint32_t>(r.positive("daemon", "max_pending_per_uid", c.max_pending_per_uid));
  c.handshake_timeout = milliseconds(r.positive("daemon", "handshake_timeout_ms", c.handshake_timeout.count()));
  c.max_tenants = static_cast<std::uint32_t>(r.positive("daemon", "max_tenants", c.max_tenants));
  c.max_tenants_per_uid = static_cast<std::uint32_t>(r.positive("daemon", "max_tenants_per_uid", c.max_tenants_per_uid));
  c.max_names_per_uid = static_cast<std::uint32_t>(r.positive("daemon", "max_names_per_uid", c.max_names_per_uid));
  c.max_names = static_cast<std::uint32_t>(r.positive("daemon", "max_names", c.max_names));
  c.io_workers = static_cast<std::uint32_t>(r.positive("daemon", "io_workers", c.io_workers));
  c.max_segment_bytes = r.mib("daemon", "max_segment_mib", c.max_segment_bytes);
  c.max_pending_connections =
      static_cast<std::uint32_t>(r.positive("daemon", "max_pending_connections", c.max_pending_connections));
  c.max_in_flight = static_cast<std::uint32_t>(r.positive("daemon", "max_in_flight", c.max_in_flight));
  c.request_bytes_per_tenant = r.mib("daemon", "request_mib_per_tenant", c.request_bytes_per_tenant);
  c.spin = microseconds(r.non_negative("daemon", "spin_us", c.spin.count()));
  r.get("daemon", "log_level", c.log_level);
  if (const auto n = t["ipc"]["allow_device_regions"]) {
    const auto v = n.value<bool>();
    if (!v || !n.is_boolean()) r.fail("ipc", "allow_device_regions", "must be true or false");
    c.allow_device_regions = *v;
  }

  r.get("model", "backbone", c.backbone);
  if (const auto n = t["model"]["devices"]) {
    const auto* a = n.as_array();
    if (!a || a->empty()) r.fail("model", "devices", "must be a non-empty array of strings like [\"cpu\", \"cpu\"]");
    c.devices.clear();
    for (const auto& d : *a) {
      const auto v = d.value<std::string>();
      if (!v || !d.is_string()) r.fail("model", "devices", "must hold only strings");
      c.devices.push_back(*v);
    }
  }
  r.get("model", "weights", c.weights);
  if (r.get("model", "precision", c.precision) && c.precision != "float32" && c.precision != "tf32" && c.precision != "bf16")
    r.fail("model", "precision", "must be \"float32\", \"tf32\" or \"bf16\"");
  r.get("model", "state_dir", c.state_dir);
  c.batch_samples = static_cast<std::uint32_t>(r.positive("model", "batch_samples", c.batch_samples));
  c.batch_wait = microseconds(r.non_negative("model", "batch_wait_us", c.batch_wait.count()));
  if (const auto n = t["model"]["deterministic"]) {
    const auto v = n.value<bool>();
    if (!v || !n.is_boolean()) r.fail("model", "deterministic", "must be true or false");
    c.deterministic = *v;
  }
  c.group_window_ms = r.positive_real("model", "group_window_ms", c.group_window_ms);
  c.min_training_share = r.positive_real("model", "min_training_share", c.min_training_share);
  if (const auto n = t["model"]["max_training_turn_ms"]) {
    const auto v = n.value<double>();
    if (!v || !(*v >= 0) || !(n.is_integer() || n.is_floating_point()))
      r.fail("model", "max_training_turn_ms", "must be a number >= 0 (0: steps are never split)");
    c.max_training_turn_ms = *v;
  }
  c.inference_lanes = static_cast<std::uint32_t>(r.positive("model", "inference_lanes", c.inference_lanes));
  if (c.inference_lanes > 8) r.fail("model", "inference_lanes", "must be 1 to 8");
  c.training_lanes = static_cast<std::uint32_t>(r.non_negative("model", "training_lanes", c.training_lanes));
  if (c.training_lanes > 4)
    r.fail("model", "training_lanes", "must be 0 (training shares the first inference lane) to 4");
  c.torch_threads = static_cast<std::uint32_t>(r.non_negative("model", "torch_threads", c.torch_threads));
  if (c.torch_threads > 1024) r.fail("model", "torch_threads", "must be at most 1024 (0: one per core)");
  if (c.min_training_share >= 1) r.fail("model", "min_training_share", "must be below 1");
  c.max_request_gflop = r.positive_real("model", "max_request_gflop", c.max_request_gflop);
  c.versions_kept = static_cast<std::uint32_t>(r.positive("model", "versions_kept", c.versions_kept));
  c.idle_evict = seconds(r.positive("model", "idle_evict_s", c.idle_evict.count()));
  c.max_slots_per_uid = static_cast<std::uint32_t>(r.positive("model", "max_slots_per_uid", c.max_slots_per_uid));
  c.max_checkpoints_per_uid =
      static_cast<std::uint32_t>(r.positive("model", "max_checkpoints_per_uid", c.max_checkpoints_per_uid));
  c.checkpoint_bytes_per_uid = r.mib("model", "checkpoint_mib_per_uid", c.checkpoint_bytes_per_uid);
  c.feature_cache_bytes = r.mib("feature_cache", "mib", c.feature_cache_bytes, /*zero_ok=*/true);
  c.feature_cache_bytes_per_tenant = r.mib("feature_cache", "mib_per_tenant", c.feature_cache_bytes_per_tenant);
  c.feature_cache_disk_bytes = r.mib("feature_cache", "disk_mib", c.feature_cache_disk_bytes, /*zero_ok=*/true);
  if (const auto n = t["feature_cache"]["shared"]) {
    const auto v = n.value<bool>();
    if (!v || !n.is_boolean()) r.fail("feature_cache", "shared", "must be true or false");
    c.feature_cache_shared = *v;
  }
  if (const auto* tenants = t["tenants"].as_table()) {
    for (const auto& [name, value] : *tenants) {
      const auto* tt = value.as_table();
      if (!tt) r.fail("tenants", std::string(name.str()), "must be a table (weight, priority, replica)");
      TenantWeight w;
      const std::string section = "tenants." + std::string(name.str());
      if (const auto n = (*tt)["weight"]) {
        const auto d = n.value<double>();
        if (!d || !(*d > 0)) r.fail(section, "weight", "must be a number > 0");
        w.weight = *d;
      }
      if (const auto n = (*tt)["priority"]) {
        const auto i = n.value<std::int64_t>();
        if (!i || !n.is_integer()) r.fail(section, "priority", "must be an integer");
        w.priority = static_cast<int>(*i);
      }
      if (const auto n = (*tt)["replica"]) {
        const auto i = n.value<std::int64_t>();
        // With model.devices unset the count is known only at start: the model service checks then.
        if (!i || !n.is_integer() || *i < 0 ||
            (!c.devices.empty() && *i >= static_cast<std::int64_t>(c.devices.size())))
          r.fail(section, "replica", "must be an index into model.devices (0 to devices - 1)");
        w.replica = static_cast<int>(*i);
      }
      c.tenants[std::string(name.str())] = w;
    }
  }

  c.env_workers = static_cast<std::uint32_t>(r.non_negative("env", "workers", c.env_workers));
  c.external_open_timeout = milliseconds(r.positive("env", "external_open_timeout_ms", c.external_open_timeout.count()));
  c.external_step_timeout = milliseconds(r.positive("env", "external_step_timeout_ms", c.external_step_timeout.count()));
  c.external_step_per_session =
      milliseconds(r.non_negative("env", "external_step_per_session_ms", c.external_step_per_session.count()));
  c.datasets_per_tenant = static_cast<std::uint32_t>(r.positive("env", "datasets_per_tenant", c.datasets_per_tenant));
  c.dataset_bytes_per_tenant = r.mib("env", "dataset_mib_per_tenant", c.dataset_bytes_per_tenant);
  c.dataset_bytes_total = r.mib("env", "dataset_mib_total", c.dataset_bytes_total);
  r.get("env", "dataset_reader", c.dataset_reader);
  c.dataset_parse_timeout =
      milliseconds(r.positive("env", "dataset_parse_timeout_ms", c.dataset_parse_timeout.count()));
  if (const auto* ext = t["env"]["external"].as_table()) {
    for (const auto& [name, value] : *ext) {
      const auto p = value.value<std::string>();
      if (!p || p->empty() || name.str().find(':') != std::string_view::npos)
        throw std::runtime_error("config " + path + ": env.external." + std::string(name.str()) +
                                 " must be a socket path (and the name must not contain ':')");
      c.external_envs[std::string(name.str())] = *p;
    }
  }

  r.get("rollout", "socket", c.rollout_socket);
  c.rollout_max_engines = static_cast<std::uint32_t>(r.positive("rollout", "max_engines", c.rollout_max_engines));
  c.rollout_max_capacity = static_cast<std::uint32_t>(r.positive("rollout", "max_capacity", c.rollout_max_capacity));
  c.rollout_max_engines_per_uid =
      static_cast<std::uint32_t>(r.positive("rollout", "max_engines_per_uid", c.rollout_max_engines_per_uid));
  c.autoscale_min = static_cast<std::uint32_t>(r.non_negative("rollout", "autoscale_min", c.autoscale_min));
  c.autoscale_max = static_cast<std::uint32_t>(r.non_negative("rollout", "autoscale_max", c.autoscale_max));
  if (c.autoscale_max > 0 && c.autoscale_min > c.autoscale_max)
    r.fail("rollout", "autoscale_min", "must not exceed autoscale_max");
  c.autoscale_idle_s = static_cast<std::uint32_t>(r.positive("rollout", "autoscale_idle_s", c.autoscale_idle_s));
  c.autoscale_sessions_per_engine = static_cast<std::uint32_t>(
      r.positive("rollout", "autoscale_sessions_per_engine", c.autoscale_sessions_per_engine));
  if (const auto n = t["rollout"]["spawn"]) {
    const auto* a = n.as_array();
    if (!a || a->empty()) r.fail("rollout", "spawn", "must be a non-empty array of strings (a command and its arguments)");
    c.autoscale_spawn.clear();
    if (a)
      for (const auto& x : *a) {
        const auto v = x.value<std::string>();
        if (!v) r.fail("rollout", "spawn", "must hold only strings");
        else c.autoscale_spawn.push_back(*v);
      }
  }

  c.jobs_running_per_tenant = static_cast<std::uint32_t>(r.positive("jobs", "max_running_per_tenant", c.jobs_running_per_tenant));
  c.jobs_running = static_cast<std::uint32_t>(r.positive("jobs", "max_running", c.jobs_running));
  c.jobs_per_tenant = static_cast<std::uint32_t>(r.positive("jobs", "max_per_tenant", c.jobs_per_tenant));
  c.jobs_total = static_cast<std::uint32_t>(r.positive("jobs", "max_jobs", c.jobs_total));
  c.rl_observation_bytes_per_uid = r.mib("jobs", "rl_observation_mib_per_uid", c.rl_observation_bytes_per_uid);
  c.job_heartbeat = milliseconds(r.positive("jobs", "heartbeat_ms", c.job_heartbeat.count()));

  r.get("metrics", "textfile", c.metrics_textfile);
  c.metrics_interval = seconds(r.positive("metrics", "interval_s", c.metrics_interval.count()));
  return c;
}

std::string rollout_socket_path(const DaemonConfig& c) {
  if (c.rollout_socket == "none") return "";
  if (!c.rollout_socket.empty()) return c.rollout_socket;
  const auto slash = c.socket_path.rfind('/');
  return (slash == std::string::npos ? std::string(".") : c.socket_path.substr(0, slash)) + "/rollout.sock";
}

}  // namespace nexus::daemon
