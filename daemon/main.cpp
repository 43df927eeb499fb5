// nexusd: owns the accelerators, keeps the backbone resident, serves tenants over shared memory.
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <exception>
#include <fstream>
#include <memory>

#include <unistd.h>

#include <CLI/CLI.hpp>

#include "daemon/config/config.hpp"
#include "daemon/env/dataset_sandbox.hpp"
#include "daemon/fault/fault_plan.hpp"
#include "daemon/ipc/listener.hpp"
#include "daemon/ipc/reactor.hpp"
#include "daemon/log/log.hpp"
#include "daemon/process_settings.hpp"
#ifdef NEXUS_WITH_MODEL
#include "daemon/master/master.hpp"
#endif
#include "schema/protocol.hpp"

namespace {
std::atomic<nexus::daemon::Reactor*> g_reactor{nullptr};  // for the signal handler
std::atomic<bool> g_stop_requested{false};                // set by the handler before it reads g_reactor

#ifdef NEXUS_WITH_MODEL
nexus::daemon::MasterConfig master_config(const nexus::daemon::DaemonConfig& c) {
  nexus::daemon::MasterConfig m;
  m.model.backbone = c.backbone;
  m.model.devices = c.devices;
  m.model.weights = nexus::daemon::resolve_weights(c);
  m.model.precision = c.precision;
  m.model.batch = {c.batch_samples, c.batch_wait};
  m.model.group_window_s = c.group_window_ms / 1000.0;
  m.model.min_training_share = c.min_training_share;
  m.model.max_training_turn_s = c.max_training_turn_ms / 1000.0;
  m.model.inference_lanes = static_cast<int>(c.inference_lanes);
  m.model.training_lanes = static_cast<int>(c.training_lanes);
  m.model.torch_threads = static_cast<int>(c.torch_threads);
  m.model.state_dir = c.state_dir;
  m.model.deterministic = c.deterministic;
  m.model.max_request_gflop = c.max_request_gflop;
  m.model.versions_kept = static_cast<int>(c.versions_kept);
  m.model.idle_evict = c.idle_evict;
  m.model.users = {c.max_slots_per_uid, c.max_checkpoints_per_uid, c.checkpoint_bytes_per_uid};
  for (const auto& [name, w] : c.tenants) m.model.tenants[name] = {w.weight, w.priority, w.replica};
  m.model.feature_cache = {c.feature_cache_bytes, c.feature_cache_bytes_per_tenant, c.feature_cache_disk_bytes, "",
                           c.feature_cache_shared};
  m.env.workers = static_cast<int>(c.env_workers);
  m.external_envs = c.external_envs;
  m.external_timeouts = {c.external_open_timeout, c.external_step_timeout, c.external_step_per_session};
  m.engines.max_engines = static_cast<int>(c.rollout_max_engines);
  m.engines.max_capacity = static_cast<int>(c.rollout_max_capacity);
  m.engines.max_private_per_uid = static_cast<int>(c.rollout_max_engines_per_uid);
  m.engines.timeouts = m.external_timeouts;
  m.rollout_socket = nexus::daemon::rollout_socket_path(c);
  m.autoscale.min_engines = static_cast<int>(c.autoscale_min);
  m.autoscale.max_engines = static_cast<int>(c.autoscale_max);
  m.autoscale.sessions_per_engine = static_cast<int>(c.autoscale_sessions_per_engine);
  m.autoscale.idle_after = std::chrono::seconds(c.autoscale_idle_s);
  m.autoscale_spawn = c.autoscale_spawn;
  if (m.autoscale_spawn.empty())
    m.autoscale_spawn = {nexus::env::beside_executable("nexus-rollout", "rollout"), "--socket", "{socket}", "--name",
                         "auto-{n}"};
  if (m.autoscale.max_engines > 0 && m.autoscale_spawn.front().empty())
    NEXUS_LOG(warn, "rollout_autoscale", "reason=\"no nexus-rollout beside nexusd and no [rollout] spawn: autoscaling off\"");
  if (m.autoscale_spawn.front().empty()) m.autoscale.max_engines = 0;
  m.datasets = {c.datasets_per_tenant, c.dataset_bytes_per_tenant, c.dataset_bytes_total,
                {c.dataset_reader.empty() ? nexus::env::reader_beside_executable() : c.dataset_reader,
                 c.dataset_parse_timeout}};
  if (m.datasets.reader.path.empty()) {  // loads fail with this path's reason; never parsed in nexusd
    m.datasets.reader.path = "/nonexistent/nexus-dataset-reader";
    NEXUS_LOG(warn, "dataset_reader_missing", "reason=\"no nexus-dataset-reader beside nexusd and no [env] dataset_reader: "
                                              "dataset loads will fail\"");
  }
  m.jobs.max_running_per_tenant = static_cast<int>(c.jobs_running_per_tenant);
  m.jobs.max_running = static_cast<int>(c.jobs_running);
  m.jobs.heartbeat = c.job_heartbeat;
  m.jobs.max_per_tenant = static_cast<int>(c.jobs_per_tenant);
  m.jobs.max_jobs = static_cast<int>(c.jobs_total);
  m.jobs.observation_bytes_per_uid = c.rl_observation_bytes_per_uid;
  m.request_bytes_per_tenant = c.request_bytes_per_tenant;
  m.record_timeline = !c.timeline_path.empty();
  return m;
}

void write_timeline(const std::string& path, const std::vector<nexus::metrics::Interval>& intervals) {
  std::ofstream out(path);
  out << "service,tenant,start_s,end_s\n";
  for (const auto& i : intervals)
    out << nexus::metrics::service_name(i.service) << ',' << i.tenant << ',' << i.start_s << ',' << i.end_s << '\n';
}
#endif
}  // namespace

int main(int argc, char** argv) {
  nexus::daemon::settle_openmp_spin(argv);
  nexus::daemon::settle_malloc();  // before any thread: each thread's arena starts with it
  using nexus::daemon::DaemonConfig;
  CLI::App app{"nexusd: the Nexus multi-tenant VLA post-training daemon"};
  std::string config_path, socket_path, log_level;
  long spin_us = -1;
  std::uint32_t max_tenants = 0;
  std::uint64_t max_segment_mib = 0;
  bool version = false, check_config = false;
  std::string backbone, weights, state_dir, precision;
  std::vector<std::string> devices;
  bool allow_regions = false;
  std::uint32_t batch_samples = 0;
  long batch_wait_us = -1;
  bool deterministic = false;
  std::vector<std::string> external_envs;
  std::string rollout_socket;
  std::string timeline;
  double max_request_gflop = 0;
  std::int64_t feature_cache_mib = -1;
  bool feature_cache_shared = false;
  std::string socket_mode, socket_group;
  std::vector<std::string> inject_faults;
  app.add_option("-c,--config", config_path, "TOML config file (see systemd/nexusd.toml)");
  app.add_option("-s,--socket", socket_path, "control socket path (default /run/nexus/nexusd.sock)");
  app.add_option("--spin-us", spin_us, "busy-poll the rings this long after the last request");
  app.add_option("--max-tenants", max_tenants, "tenants attached at once");
  app.add_option("--max-segment-mib", max_segment_mib, "per-tenant segment cap in MiB");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  app.add_option("--backbone", backbone, "resident backbone: tiny, small, torchscript or aoti (a user module: .pt or .pt2), or none");
  app.add_option("--devices", devices, "one backbone replica per device ([model] devices), e.g. --devices cpu cpu")->expected(1, 16);
  app.add_flag("--allow-device-regions", allow_regions, "tenants may register regions of their own ([ipc] allow_device_regions)");
  app.add_option("--weights", weights, "tiny/small: weights (.safetensors; default: tiny's embedded pretrained weights; 'seeded': the untrained init); torchscript: the .pt file; aoti: the .pt2 package");
  app.add_option("--precision", precision, "the backbone's arithmetic ([model] precision): float32, tf32 (CUDA), bf16")
      ->check(CLI::IsMember({"float32", "tf32", "bf16"}));
  app.add_option("--state-dir", state_dir, "where checkpoints are kept (default /var/lib/nexus)");
  app.add_option("--batch-samples", batch_samples, "B: a group flushes at this many samples");
  app.add_option("--batch-wait-us", batch_wait_us, "T: or when its oldest request waited this long");
  app.add_flag("--deterministic", deterministic,
               "bitwise per-sample results whatever the group: one backbone pass per request");
  app.add_option("--rollout-socket", rollout_socket,
                 "where rollout engines (nexus-rollout) attach (default: rollout.sock beside the socket; none: off)");
  app.add_option("--external-env", external_envs,
                 "NAME=SOCKET: an external environment's simulator process; tenants open \"NAME:task\"");
  app.add_option("--socket-mode", socket_mode, "the socket file's mode, octal (default 0660)");
  app.add_option("--socket-group", socket_group, "the socket file's group (default nexus)");
  app.add_option("--max-request-gflop", max_request_gflop, "per-request cost budget ([model] max_request_gflop)");
  app.add_option("--timeline", timeline, "at exit, write every service's busy intervals as CSV (nexus-bench workload)");
  app.add_flag("--version", version, "print the version and exit");
  app.add_option("--inject-fault", inject_faults, "tests only: a fault to inject once (daemon/fault/fault_plan.hpp)")
      ->check(CLI::IsMember(nexus::daemon::fault::Plan::names()));
  app.add_option("--feature-cache-mib", feature_cache_mib, "the frozen-feature cache's memory ([feature_cache] mib; 0: off)");
  app.add_flag("--feature-cache-shared", feature_cache_shared,
               "tenants on the same dataset content share cached features ([feature_cache] shared)");
  app.add_flag("--check-config", check_config, "check the configuration (file and flags), print what it resolves to, and exit");
  CLI11_PARSE(app, argc, argv);
  if (version) {
    std::printf("nexusd %s (protocol %u)\n", nexus::schema::kDaemonVersion,
                nexus::schema::kProtocolVersion);
    return 0;
  }

  DaemonConfig config;
  try {
    if (!config_path.empty()) config = nexus::daemon::load_config_file(config_path, config);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nexusd: %s\n", e.what());
    return 2;
  }
  if (!socket_path.empty()) config.socket_path = socket_path;
  if (!rollout_socket.empty()) config.rollout_socket = rollout_socket;
  if (spin_us >= 0) config.spin = std::chrono::microseconds(spin_us);
  if (max_tenants > 0) config.max_tenants = max_tenants;
  if (max_segment_mib > 0) config.max_segment_bytes = max_segment_mib << 20;
  if (!log_level.empty()) config.log_level = log_level;
  if (!backbone.empty()) config.backbone = backbone;
  if (!devices.empty()) config.devices = devices;
  if (allow_regions) config.allow_device_regions = true;
  if (!weights.empty()) config.weights = weights;
  if (!precision.empty()) config.precision = precision;
  if (!state_dir.empty()) config.state_dir = state_dir;
  if (batch_samples > 0) config.batch_samples = batch_samples;
  if (batch_wait_us >= 0) config.batch_wait = std::chrono::microseconds(batch_wait_us);
  if (deterministic) config.deterministic = true;
  for (const auto& e : external_envs) {
    const auto eq = e.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == e.size() || e.substr(0, eq).find(':') != std::string::npos) {
      std::fprintf(stderr, "nexusd: --external-env wants NAME=SOCKET, got '%s'\n", e.c_str());
      return 2;
    }
    config.external_envs[e.substr(0, eq)] = e.substr(eq + 1);
  }
  if (!timeline.empty()) config.timeline_path = timeline;
  if (max_request_gflop > 0) config.max_request_gflop = max_request_gflop;
  if (feature_cache_mib >= 0) config.feature_cache_bytes = static_cast<std::uint64_t>(feature_cache_mib) << 20;
  if (feature_cache_shared) config.feature_cache_shared = true;
  if (!socket_mode.empty()) {
    char* end = nullptr;
    const auto m = std::strtoul(socket_mode.c_str(), &end, 8);
    if (*end || m > 0777) {
      std::fprintf(stderr, "nexusd: --socket-mode wants an octal mode like 0660, got '%s'\n", socket_mode.c_str());
      return 2;
    }
    config.socket_mode = static_cast<std::uint32_t>(m);
  }
  if (!socket_group.empty()) config.socket_group = socket_group;
  config.inject_faults.insert(config.inject_faults.end(), inject_faults.begin(), inject_faults.end());
  if (check_config) return nexus::daemon::check_config(config, config_path);
  nexus::daemon::init_logging(config.log_level);
  if (!config.inject_faults.empty()) {  // a test's fault plan, before any thread that asks it starts
    auto plan = std::make_unique<nexus::daemon::fault::Plan>();
    std::string names;
    for (const auto& f : config.inject_faults) plan->add(f), names += (names.empty() ? "" : ",") + f;
    nexus::daemon::fault::install(std::move(plan));
    NEXUS_LOG(warn, "fault_plan", "faults=\"{}\" (tests only)", names);
  }

  std::signal(SIGPIPE, SIG_IGN);
  // SIGTERM/SIGINT stop the reactor through a handler, not a blocked mask and a signalfd:
  // libraries (OpenBLAS, OpenMP) start threads before main, and the kernel may hand a process
  // signal to any thread that has not blocked it. Installed before the socket appears: a stop
  // while the backbone loads is remembered and served as a clean exit (socket unlinked), not
  // the default action's kill. SA_RESTART: the start-up's blocking calls are not cut short.
  struct sigaction on_stop {};
  on_stop.sa_handler = [](int) {
    const int saved = errno;
    g_stop_requested = true;  // written before g_reactor is read; main does the reverse
    if (auto* reactor = g_reactor.load()) reactor->request_stop();
    errno = saved;
  };
  on_stop.sa_flags = SA_RESTART;
  sigemptyset(&on_stop.sa_mask);
  sigaction(SIGTERM, &on_stop, nullptr);
  sigaction(SIGINT, &on_stop, nullptr);

  nexus::daemon::Listener listener, rollout;
  bool rollout_given = false;  // the Master owns the rollout socket's descriptor then; here only its file goes
  const auto close_rollout = [&] {
    if (rollout_given) rollout.fd = -1;
    nexus::daemon::close_listener(rollout);
  };
  try {
    listener = nexus::daemon::open_listener(config);
    NEXUS_LOG(info, "listening", "socket={} systemd={}",
              listener.from_systemd ? "(passed by systemd)" : listener.path, listener.from_systemd);
    if (!listener.warning.empty()) NEXUS_LOG(warn, "socket_group", "reason=\"{}\"", listener.warning);
#ifdef NEXUS_WITH_MODEL  // engines step the Environment Service's sessions: none without the services
    // Where rollout engines attach. Without it nexusd still serves (the in-daemon pool runs every
    // session), so a failure here is a warning, not a stop.
    if (const auto path = nexus::daemon::rollout_socket_path(config); !path.empty() && config.backbone != "none") {
      auto at = config;
      at.socket_path = path;
      try {
        rollout = nexus::daemon::open_listener(at);
        NEXUS_LOG(info, "rollout_listening", "socket={}", path);
      } catch (const std::exception& e) {
        NEXUS_LOG(warn, "rollout_socket", "reason=\"{}: no rollout engines can attach\"", e.what());
      }
    }
#endif
    // The reactor outlives nothing that posts to it: the services are declared after it, so
    // their threads are joined first.
    std::unique_ptr<nexus::daemon::Reactor> reactor;
    // However this scope ends (a throw included), the handler stops seeing the reactor before
    // the reactor is destroyed.
    struct Unpublish {
      ~Unpublish() { g_reactor = nullptr; }
    } unpublish;
    std::unique_ptr<nexus::daemon::ServicePort> services;
#ifdef NEXUS_WITH_MODEL
    nexus::daemon::Master* master = nullptr;
    if (config.backbone != "none") {
      auto services_config = master_config(config);
      services_config.rollout_listener = rollout.fd;
      rollout_given = true;
      auto owned = std::make_unique<nexus::daemon::Master>(
          services_config, [&reactor](std::uint64_t session, std::vector<std::uint8_t> reply) {
            reactor->post_completion(session, std::move(reply));
          });
      master = owned.get();
      services = std::move(owned);
    }
#else
    if (config.backbone != "none")
      NEXUS_LOG(warn, "no_model", "reason=\"built without NEXUS_WITH_MODEL: serving the transport only\"");
#endif
    reactor = std::make_unique<nexus::daemon::Reactor>(config, listener.fd, services.get());
    // Stored before the flag is read, while the handler sets the flag before it reads this (all
    // seq_cst): a stop at any moment is seen by one side or the other, so run() returns.
    g_reactor = reactor.get();
    if (g_stop_requested) reactor->request_stop();
    reactor->run();
    g_reactor = nullptr;
    std::signal(SIGTERM, SIG_DFL);
    std::signal(SIGINT, SIG_DFL);
#ifdef NEXUS_WITH_MODEL
    if (master && !config.timeline_path.empty()) write_timeline(config.timeline_path, master->timeline());
#endif
    services.reset();  // joins the services' threads before the reactor goes
  } catch (const std::exception& e) {
    NEXUS_LOG(critical, "fatal", "error=\"{}\"", e.what());
    nexus::daemon::close_listener(listener);
    close_rollout();
    return 1;
  }
  nexus::daemon::close_listener(listener);
  close_rollout();
  return 0;
}
