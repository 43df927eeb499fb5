// A built-in MuJoCo task (sim/) as an Environment Service session.
#pragma once
#include <memory>

#include "daemon/env/env_session.hpp"

namespace nexus::env {

// Throws BadInput for an unknown task or bad options.
std::unique_ptr<EnvSession> make_builtin_session(const std::string& task, int image_size, int max_steps);

}  // namespace nexus::env
