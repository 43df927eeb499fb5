// nexus-bench workload: the reference mix (3 RL tenants and 1 SFT tenant) run shared on one
// daemon and then isolated (each tenant alone on a fresh daemon, one after another), in one
// invocation; aggregate device time as the reference design counts it, per-service utilization,
// per-tenant results, a CSV and a PNG timeline of busy intervals per service by tenant, and the
// CPU time of the daemon and its tenants in each run: the share of the cores the isolated runs
// left idle is the most any schedule could save on this machine (`reduction_ceiling`). Then a
// second scenario: two SFT tenants on one dataset for several epochs with the frozen-feature
// cache off, on, shared and bounded (`sft_cache` in the JSON).
//
// nexus-bench fairness: weights 1:2 under contention (compute-seconds ratio), and the predict
// latency of an inference-only tenant idle vs. while three tenants saturate training, beside
// the longest single training turn (the bound: idle p99 + longest turn).
#pragma once
#include <string>

#include <nlohmann/json.hpp>

namespace nexus::bench {

struct WorkloadOptions {
  double scale = 1.0;       // multiplies every tenant's work (1: about 5 minutes on 2 cores)
  std::string scenario = "all";  // mix (3 RL + 1 SFT), sft-cache (two SFT tenants, feature cache off/on), all
  int cache_epochs = 4;          // sft-cache: epochs per tenant
  bool profile = false;          // mix: each executor lane's time split (backbone, copy, heads, optimizer, wait)
  // mix: nexusd's [model] inference_lanes and training_lanes, shared and isolated alike (< 0: its defaults)
  int inference_lanes = -1, training_lanes = -1;
  int torch_threads = -1;        // mix: nexusd's [model] torch_threads (< 0: its default)
  std::string out;          // directory for workload.csv, timeline.csv, timeline.png (default: a temp dir)
  bool json = false;
  std::string nexusd, nexusctl, rl_tenant, sft_demos_tenant, python, plot_script;
};
int run_workload(const WorkloadOptions& options);
// The sft-cache scenario (sft_cache_bench.cpp): prints its table, returns its figures.
nlohmann::json run_sft_cache(const WorkloadOptions& options, const std::string& dir);

struct FairnessOptions {
  double seconds = 15;      // each measured phase
  double shared_seconds = 40;  // the small-batch scenario's shared phase (its alone phases: `seconds`)
  double turn_ms = -1;         // its [model] max_training_turn_ms (< 0: the daemon's default)
  int training_lanes = -1;     // [model] training_lanes (< 0: the daemon's default; whole steps: 1)
  bool json = false;
  std::string nexusd, sft_tenant;
};
int run_fairness(const FairnessOptions& options);

}  // namespace nexus::bench
