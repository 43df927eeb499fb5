// Sessions served by a simulator in its own process (an external environment), over the protocol
// in nexus.fbs (ExtMessage, protocol 3): one Unix-socket connection per open, serving all of its
// sessions, which the Environment Service resets and steps together (one exchange per call).
// Everything the process sends is checked (sizes against the spec it declared, finite numbers);
// a process that dies, hangs past the timeout, or sends garbage fails the connection's sessions
// with the reason; one it says broke, or a bad action, concerns that session alone.
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "daemon/env/env_service.hpp"

namespace nexus::env {

// How long nexusd waits for a simulator process ([env] external_open_timeout_ms and
// external_step_timeout_ms): to answer an open, and then each reset or step. A session whose
// process misses the deadline fails, with the other sessions of its connection (its tenant's
// other sessions and other tenants go on). A reset or step exchange names all of a call's
// sessions on that connection, and the process answers them together, so its deadline is
// `step` plus `per_session` for each session it names ([env] external_step_per_session_ms):
// an evaluation of 50 Meta-World episodes is one 50-session exchange a step (0.3-0.5 s on an
// idle core), which a fixed 10 s failed whole once the simulator was starved of CPU.
struct ExternalTimeouts {
  std::chrono::milliseconds open{10000};
  std::chrono::milliseconds step{10000};
  std::chrono::milliseconds per_session{1000};
  std::chrono::milliseconds exchange(std::size_t sessions) const {
    return step + per_session * static_cast<std::int64_t>(sessions);
  }
};

// Connects and opens `count` sessions of `task` on the one connection; throws BadInput if the
// process refuses the task, std::runtime_error if it cannot be reached or answers out of protocol.
std::vector<std::unique_ptr<EnvSession>> open_external(const std::string& socket_path, const std::string& task,
                                                       int image_size, int max_steps, int count,
                                                       const ExternalTimeouts& timeouts);

// The same on a socket already connected to a simulator (a rollout engine's socket pair); `fd`
// is the sessions' once this returns (closed with the last of them), the caller's if it throws.
// `label` names the simulator in errors.
std::vector<std::unique_ptr<EnvSession>> open_external_on(int fd, const std::string& label, const std::string& task,
                                                          int image_size, int max_steps, int count,
                                                          const ExternalTimeouts& timeouts);

// Sessions for "<name>:<task>" from the named external environments, built-in tasks otherwise:
// placed on rollout engines when `engines` is given (placed_session.hpp), in nexusd if not.
class EngineRegistry;
SessionFactory session_factory(std::map<std::string, std::string> external, ExternalTimeouts timeouts,
                               EngineRegistry* engines = nullptr);

}  // namespace nexus::env
