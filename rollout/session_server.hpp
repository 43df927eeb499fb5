// The external-environment protocol (3, nexus.fbs ExtMessage) served with the built-in MuJoCo
// tasks (sim/): what a simulator process does on one connection. nexus-rollout (a rollout
// engine) and examples/external_env (an external environment) both serve through it.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "schema/ext_frame.hpp"
#include "sim/task.hpp"

namespace nexus::rollout {

// Fault switches for tests, shared by a process's connections: after this many steps in all,
// hang (never answer again), answer with bytes that are no ExtMessage, send one reply twice,
// or leave the last named session out of replies; and the protocol version to claim. -1: off.
struct ServeFaults {
  std::atomic<long> hang_after{-1}, garbage_after{-1}, extra_after{-1}, short_after{-1};
  std::atomic<long> slow_ms_per_session{0};  // a slow simulator: each step takes this long per session
  std::atomic<long> steps{0};  // steps served in all
  std::uint32_t protocol = schema::kExtProtocol;
};

// One connection's sessions. Not thread-safe: one thread answers a connection.
class SessionServer {
 public:
  explicit SessionServer(ServeFaults& faults) : faults_(faults) {}

  // Answers one request on `fd`: ExtOpen first, then ExtReset and ExtStep. False: close the
  // connection (the open failed, the peer is out of protocol, or it is gone).
  bool answer(int fd, const wire::ExtMessage& request);
  bool opened() const { return !tasks_.empty(); }

 private:
  bool open(int fd, const wire::ExtMessage& request);
  std::vector<std::unique_ptr<sim::Task>> tasks_;
  ServeFaults& faults_;
};

}  // namespace nexus::rollout
