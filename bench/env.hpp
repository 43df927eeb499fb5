// nexus-bench env: simulator steps per second with rendering, and rollout throughput with RL-style
// tenants grouped vs serial through nexusd.
#pragma once
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <vector>

namespace nexus::bench {

struct EnvOptions {
  std::vector<int> tenants = {1, 2, 4};
  int sessions = 8;       // simulated sessions per tenant
  int steps = 40;         // timed rollout steps per tenant (after one warm-up step)
  int sim_steps = 400;    // single-session steps for the per-core figures
  int rl_iterations = 6;  // updates per RL job in the RL-job figures
  std::string backbone = "tiny";
  bool json = false;
  std::string nexusd;
  int engine_sessions = 16;  // rollout engines: one tenant's sessions, stepped ...
  int engine_steps = 60;     // ... this many times in each placement
  std::string rollout;       // nexus-rollout (empty: beside nexusd, or the build tree's)
};

int run_env(const EnvOptions& options);
// The rollout-engine figures (engines_bench.cpp): in nexusd vs 1 vs 2 engines, into `j`.
void engines_section(const EnvOptions& options, nlohmann::json& j);

}  // namespace nexus::bench
