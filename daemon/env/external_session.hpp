// A session served by a simulator in its own process (an external environment), over the
// protocol in nexus.fbs (ExtMessage): one Unix-socket connection per session. Everything the
// process sends is checked (sizes against the spec it declared, finite numbers); a process that
// dies, hangs past the timeout, or sends garbage fails the session with the reason.
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include "daemon/env/env_service.hpp"

namespace nexus::env {

// Connects and opens `task`; throws BadInput if the process refuses the task, std::runtime_error
// if it cannot be reached.
std::unique_ptr<EnvSession> open_external(const std::string& socket_path, const std::string& task, int image_size,
                                          int max_steps, std::chrono::milliseconds timeout);

// Sessions for "<name>:<task>" from the named external environments, built-in tasks otherwise.
SessionFactory session_factory(std::map<std::string, std::string> external, std::chrono::milliseconds timeout);

}  // namespace nexus::env
