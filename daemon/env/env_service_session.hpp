// What EnvService keeps per session (env_service.cpp opens and closes them, env_service_steps.cpp
// runs their resets and steps). Internal to the Environment Service.
#pragma once
#include <memory>
#include <mutex>
#include <string>

#include "daemon/env/env_service.hpp"

namespace nexus::env {

struct EnvService::Session {
  std::string tenant;
  std::string task;
  std::mutex mu;  // one thread at a time in the simulator
  std::unique_ptr<EnvSession> env;
  bool started = false;     // GUARDED_BY(mu): reset at least once
  std::string failure;      // GUARDED_BY(mu): non-empty once the session failed
};

}  // namespace nexus::env
