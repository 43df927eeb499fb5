// nexus-rollout: a rollout engine (engine.hpp). Start one per core you give to simulation, by
// hand or as the systemd template unit nexus-rollout@N.service; SIGTERM drains it (its sessions
// move to other engines or into nexusd at their next episode) and then it leaves.
#include <csignal>
#include <cstdio>
#include <string>

#include <CLI/CLI.hpp>

#include "rollout/engine.hpp"

namespace {
std::atomic<bool> g_drain{false};
}

int main(int argc, char** argv) {
  CLI::App app{"nexus-rollout: a rollout engine that steps nexusd's simulator sessions in its own process"};
  nexus::rollout::EngineOptions o;
  o.socket = "/run/nexus/rollout.sock";
  o.name = "engine-" + std::to_string(::getpid());
  long hang_after = -1, garbage_after = -1;
  long connect_s = 30, drain_s = 120;
  app.add_option("-s,--socket", o.socket, "nexusd's rollout socket")->capture_default_str();
  app.add_option("-n,--name", o.name, "this engine's name in nexusctl status (default engine-PID)");
  app.add_option("--tasks", o.tasks, "built-in tasks it runs (default: all)")->delimiter(',');
  app.add_option("-c,--capacity", o.capacity, "sessions it takes at most")->capture_default_str()->check(CLI::Range(1, 4096));
  app.add_option("--connect-timeout-s", connect_s, "wait this long for nexusd's socket")->capture_default_str();
  app.add_option("--drain-timeout-s", drain_s, "after SIGTERM, cut sessions not moved off by then")->capture_default_str();
  app.add_option("--hang-after", hang_after, "stop answering after this many steps in all (fault tests)");
  app.add_option("--garbage-after", garbage_after, "answer with garbage after this many steps (fault tests)");
  CLI11_PARSE(app, argc, argv);
  o.connect_timeout = std::chrono::seconds(connect_s);
  o.drain_timeout = std::chrono::seconds(drain_s);
  nexus::rollout::ServeFaults faults;
  faults.hang_after = hang_after;
  faults.garbage_after = garbage_after;
  std::signal(SIGPIPE, SIG_IGN);
  struct sigaction on_stop {};
  on_stop.sa_handler = [](int) { g_drain = true; };
  sigemptyset(&on_stop.sa_mask);
  sigaction(SIGTERM, &on_stop, nullptr);
  sigaction(SIGINT, &on_stop, nullptr);
  return nexus::rollout::run_engine(o, faults, g_drain);
}
