// nexusd: owns the accelerators, keeps the backbone resident, serves tenants over shared memory.
#include <atomic>
#include <csignal>
#include <cstdio>
#include <exception>
#include <memory>

#include <CLI/CLI.hpp>

#include "daemon/config/config.hpp"
#include "daemon/ipc/listener.hpp"
#include "daemon/ipc/reactor.hpp"
#include "daemon/log/log.hpp"
#ifdef NEXUS_WITH_MODEL
#include "daemon/model/model_service.hpp"
#endif
#include "schema/protocol.hpp"

namespace {
std::atomic<nexus::daemon::Reactor*> g_reactor{nullptr};  // for the signal handler
}  // namespace

int main(int argc, char** argv) {
  using nexus::daemon::DaemonConfig;
  CLI::App app{"nexusd: the Nexus multi-tenant VLA post-training daemon"};
  std::string config_path, socket_path, log_level;
  long spin_us = -1;
  std::uint32_t max_tenants = 0;
  std::uint64_t max_segment_mib = 0;
  bool version = false;
  std::string backbone, weights, state_dir;
  std::uint32_t batch_samples = 0;
  long batch_wait_us = -1;
  bool deterministic = false;
  std::vector<std::string> external_envs;
  app.add_option("-c,--config", config_path, "TOML config file (see systemd/nexusd.toml)");
  app.add_option("-s,--socket", socket_path, "control socket path (default /run/nexus/nexusd.sock)");
  app.add_option("--spin-us", spin_us, "busy-poll the rings this long after the last request");
  app.add_option("--max-tenants", max_tenants, "tenants attached at once");
  app.add_option("--max-segment-mib", max_segment_mib, "per-tenant segment cap in MiB");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
  app.add_option("--backbone", backbone, "resident backbone: tiny, small, torchscript (a user module), or none");
  app.add_option("--weights", weights, "tiny/small: weights (.safetensors; default: seeded init); torchscript: the .pt file");
  app.add_option("--state-dir", state_dir, "where checkpoints are kept (default /var/lib/nexus)");
  app.add_option("--batch-samples", batch_samples, "B: a group flushes at this many samples");
  app.add_option("--batch-wait-us", batch_wait_us, "T: or when its oldest request waited this long");
  app.add_flag("--deterministic", deterministic,
               "bitwise per-sample results whatever the group: one backbone pass per request");
  app.add_option("--external-env", external_envs,
                 "NAME=SOCKET: an external environment's simulator process; tenants open \"NAME:task\"");
  app.add_flag("--version", version, "print the version and exit");
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
  if (spin_us >= 0) config.spin = std::chrono::microseconds(spin_us);
  if (max_tenants > 0) config.max_tenants = max_tenants;
  if (max_segment_mib > 0) config.max_segment_bytes = max_segment_mib << 20;
  if (!log_level.empty()) config.log_level = log_level;
  if (!backbone.empty()) config.backbone = backbone;
  if (!weights.empty()) config.weights = weights;
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
  nexus::daemon::init_logging(config.log_level);

  std::signal(SIGPIPE, SIG_IGN);

  nexus::daemon::Listener listener;
  try {
    listener = nexus::daemon::open_listener(config);
    NEXUS_LOG(info, "listening", "socket={} systemd={}",
              listener.from_systemd ? "(passed by systemd)" : listener.path, listener.from_systemd);
    // The reactor outlives nothing that posts to it: the model service is declared after it, so
    // its executor thread is joined first.
    std::unique_ptr<nexus::daemon::Reactor> reactor;
    std::unique_ptr<nexus::daemon::ModelPort> model;
#ifdef NEXUS_WITH_MODEL
    if (config.backbone != "none") {
      nexus::daemon::ModelConfig mc;
      mc.backbone = config.backbone;
      mc.weights = config.weights;
      mc.batch = {config.batch_samples, config.batch_wait};
      mc.state_dir = config.state_dir;
      mc.deterministic = config.deterministic;
      mc.external_envs = config.external_envs;
      model = std::make_unique<nexus::daemon::ModelService>(mc, [&reactor](std::uint64_t session, std::vector<std::uint8_t> reply) {
        reactor->post_completion(session, std::move(reply));
      });
    }
#else
    if (config.backbone != "none")
      NEXUS_LOG(warn, "no_model", "reason=\"built without NEXUS_WITH_MODEL: serving the transport only\"");
#endif
    reactor = std::make_unique<nexus::daemon::Reactor>(config, listener.fd, model.get());
    // SIGTERM/SIGINT stop the reactor through a handler, not a blocked mask and a signalfd:
    // libraries (OpenBLAS, OpenMP) start threads before main, and the kernel may hand a
    // process signal to any thread that has not blocked it.
    g_reactor = reactor.get();
    struct sigaction sa {};
    sa.sa_handler = [](int) { g_reactor.load()->request_stop(); };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, nullptr);
    sigaction(SIGINT, &sa, nullptr);
    reactor->run();
    std::signal(SIGTERM, SIG_DFL);
    std::signal(SIGINT, SIG_DFL);
    model.reset();  // joins the executor before the reactor goes
  } catch (const std::exception& e) {
    NEXUS_LOG(critical, "fatal", "error=\"{}\"", e.what());
    nexus::daemon::close_listener(listener);
    return 1;
  }
  nexus::daemon::close_listener(listener);
  return 0;
}
