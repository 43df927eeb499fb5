// nexus-bench workload: the reference mix (3 RL tenants and 1 SFT tenant) run shared on one
// daemon and then isolated (each tenant alone on a fresh daemon, one after another), in one
// invocation; aggregate device time as the reference design counts it, per-service utilization,
// per-tenant results, a CSV and a PNG timeline of busy intervals per service by tenant, and the
// CPU time of the daemon and its tenants in each run: the share of the cores the isolated runs
// left idle is the most any schedule could save on this machine (`reduction_ceiling`).
//
// nexus-bench fairness: weights 1:2 under contention (compute-seconds ratio), and the predict
// latency of an inference-only tenant idle vs. while three tenants saturate training, beside
// the longest single training turn (the bound: idle p99 + longest turn).
#pragma once
#include <string>

namespace nexus::bench {

struct WorkloadOptions {
  double scale = 1.0;       // multiplies every tenant's work (1: about 5 minutes on 2 cores)
  std::string out;          // directory for workload.csv, timeline.csv, timeline.png (default: a temp dir)
  bool json = false;
  std::string nexusd, nexusctl, rl_tenant, sft_demos_tenant, python, plot_script;
};
int run_workload(const WorkloadOptions& options);

struct FairnessOptions {
  double seconds = 15;      // each measured phase
  double shared_seconds = 40;  // the small-batch scenario's shared phase (its alone phases: `seconds`)
  double turn_ms = -1;         // its [model] max_training_turn_ms (< 0: the daemon's default)
  bool json = false;
  std::string nexusd, sft_tenant;
};
int run_fairness(const FairnessOptions& options);

}  // namespace nexus::bench
