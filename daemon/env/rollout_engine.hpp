// One attached rollout engine, as the registry's two halves share it (engine_registry.cpp:
// placement and sessions; engine_admission.cpp: the registry's thread). Internal to env/.
#pragma once
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <set>

#include "daemon/env/engine_registry.hpp"
#include "daemon/log/log_text.hpp"
#include "schema/control_frame.hpp"

namespace nexus::env {

struct EngineRegistry::Engine {
  std::uint64_t id = 0;
  std::string name;
  uid_t uid = 0;
  bool shared = false;
  int capacity = 0;
  std::vector<std::string> tasks;
  int pidfd = -1;                    // to kill a shared engine that failed (-1: cannot)
  std::atomic<int> sessions{0};      // open on it, or being opened (reserved first)
  std::atomic<std::uint64_t> steps{0};
  std::atomic<std::int64_t> last_busy_ns{std::chrono::steady_clock::now().time_since_epoch().count()};
  std::atomic<bool> draining{false}, failed{false};
  std::chrono::steady_clock::time_point drain_started;  // GUARDED_BY(the registry's mu_)
  schema::FrameAccumulator registration;                 // the registry's thread only: frames it sends

  std::mutex mu;                     // the registration socket's sends, and what follows
  int fd = -1;                       // GUARDED_BY(mu): the registration connection (-1: closed)
  std::set<int> session_fds;         // GUARDED_BY(mu): our ends of its sessions' sockets
  std::string failure;               // GUARDED_BY(mu)

  bool serves(const std::string& task) const { return std::find(tasks.begin(), tasks.end(), task) != tasks.end(); }
  std::string label() const { return "rollout engine " + name + " (" + std::to_string(id) + ")"; }

  // Cuts every session loose at once: their sockets are shut down, so an exchange blocked on a
  // hung engine returns now instead of at its deadline. `kill`: the engine is alive but wrong
  // (hung, or out of protocol); one of nexusd's own user is killed, and its unit restarts it.
  void fail(const std::string& why, bool kill) {
    std::lock_guard lk(mu);
    if (failed.exchange(true)) return;
    failure = why;
    for (int s : session_fds) ::shutdown(s, SHUT_RDWR);
    if (fd >= 0) ::shutdown(fd, SHUT_RDWR);
    const bool killed = kill && shared && pidfd >= 0 && ::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0) == 0;
    daemon::log_text(daemon::LogLevel::Warn, "rollout_engine_failed",
                     "engine=" + name + " id=" + std::to_string(id) + " sessions=" + std::to_string(sessions.load()) +
                         " killed=" + (killed ? "true" : "false") + " reason=\"" + why + "\"");
  }
};

}  // namespace nexus::env
