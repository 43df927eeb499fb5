// nexusd: owns the accelerators, keeps the backbone resident, serves tenants over shared memory.
#include <csignal>
#include <cstdio>
#include <exception>

#include <CLI/CLI.hpp>

#include "daemon/config/config.hpp"
#include "daemon/ipc/listener.hpp"
#include "daemon/ipc/reactor.hpp"
#include "daemon/log/log.hpp"
#include "schema/protocol.hpp"

int main(int argc, char** argv) {
  using nexus::daemon::DaemonConfig;
  CLI::App app{"nexusd: the Nexus multi-tenant VLA post-training daemon"};
  std::string config_path, socket_path, log_level;
  long spin_us = -1;
  std::uint32_t max_tenants = 0;
  std::uint64_t max_segment_mib = 0;
  bool version = false;
  app.add_option("-c,--config", config_path, "TOML config file (see systemd/nexusd.toml)");
  app.add_option("-s,--socket", socket_path, "control socket path (default /run/nexus/nexusd.sock)");
  app.add_option("--spin-us", spin_us, "busy-poll the rings this long after the last request");
  app.add_option("--max-tenants", max_tenants, "tenants attached at once");
  app.add_option("--max-segment-mib", max_segment_mib, "per-tenant segment cap in MiB");
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error");
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
  nexus::daemon::init_logging(config.log_level);

  // Signals arrive through the reactor's signalfd; block them before any thread exists.
  sigset_t mask;
  sigemptyset(&mask);
  sigaddset(&mask, SIGTERM);
  sigaddset(&mask, SIGINT);
  pthread_sigmask(SIG_BLOCK, &mask, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  nexus::daemon::Listener listener;
  try {
    listener = nexus::daemon::open_listener(config);
    NEXUS_LOG(info, "listening", "socket={} systemd={}",
              listener.from_systemd ? "(passed by systemd)" : listener.path, listener.from_systemd);
    nexus::daemon::Reactor reactor(config, listener.fd);
    reactor.run();
  } catch (const std::exception& e) {
    NEXUS_LOG(critical, "fatal", "error=\"{}\"", e.what());
    nexus::daemon::close_listener(listener);
    return 1;
  }
  nexus::daemon::close_listener(listener);
  return 0;
}
