// A built-in MuJoCo task (sim/) as an Environment Service session.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "daemon/env/env_session.hpp"

namespace nexus::env {

// Throws BadInput for an unknown task or bad options.
std::unique_ptr<EnvSession> make_builtin_session(const std::string& task, int image_size, int max_steps);
// `count` independent ones (the Environment Service's default factory).
std::vector<std::unique_ptr<EnvSession>> make_builtin_sessions(const std::string& task, int image_size, int max_steps,
                                                               int count);

}  // namespace nexus::env
