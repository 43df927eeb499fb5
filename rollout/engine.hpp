// A rollout engine: attaches to nexusd's rollout socket, says which built-in tasks it runs and
// how many sessions it takes (EngineHello, nexus.fbs), and steps the sessions nexusd places on
// it, each on its own socket pair (protocol 3, session_server.hpp). One thread serves them all
// in turn, so an engine is one core's worth of simulation: start more engines for more.
#pragma once
#include <atomic>
#include <chrono>
#include <string>
#include <vector>

#include "rollout/session_server.hpp"

namespace nexus::rollout {

struct EngineOptions {
  std::string socket;                 // nexusd's rollout socket
  std::string name;                   // for nexusctl status and the logs
  std::vector<std::string> tasks;     // empty: every built-in task
  int capacity = 64;                  // sessions it takes at most
  std::chrono::milliseconds connect_timeout{30000};  // nexusd may still be starting
  std::chrono::milliseconds drain_timeout{120000};   // sessions not moved off by then are cut
};

// Serves until nexusd releases it after a drain (`drain` set, e.g. by SIGTERM) or goes away.
// Returns the process's exit status: 0 drained (or nexusd stopped), 1 nexusd unreachable or
// lost, 2 refused.
int run_engine(const EngineOptions& options, ServeFaults& faults, const std::atomic<bool>& drain);

}  // namespace nexus::rollout
