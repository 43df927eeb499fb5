// A job's record inside the JobRegistry (job_registry.hpp): what it runs, its state, its thread.
#pragma once
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/jobs/job_registry.hpp"

namespace nexus::daemon {

struct JobRegistry::Job {
  mutable std::mutex mu;
  JobInfo info;  // GUARDED_BY(mu)
  uid_t owner = 0;
  SftJobSpec sft;
  EvalJobSpec eval;
  std::atomic<bool> cancelled{false};
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point ended{};  // GUARDED_BY(mu): set when it finished
  // GUARDED_BY(JobRegistry::mu_):
  bool admitted = false;  // holds a running place (until exited)
  bool exited = false;    // ended: its places are freed; its thread (or RL run) may be joined
  std::thread thread;                           // sft, eval: the current loop
  std::vector<std::thread> superseded_threads;  // loops a restart replaced (they leave when they wake)
  std::shared_ptr<Role> role;                   // its heartbeat (Health Manager)
  std::unique_ptr<RlRun, RlRunDeleter> rl;      // rl

  bool terminal() const {
    std::lock_guard lk(mu);
    return job_state_ended(info.state);
  }
};

// RL runs (rl_runs.cpp): started with the tenant's policy port; progress as a JobInfo.
// Its loops are roles "job-<id>-rollout" and "job-<id>-update" of `health` (optional). A
// demo_dataset is sampled from `datasets` (this tenant's) for the behaviour-cloning term.
// An adapter tenant's job takes what its records may hold from `observations` for `owner`
// (ObservationQuotaExceeded when over the user's bound) and gives it back when the run goes.
std::unique_ptr<RlRun, RlRunDeleter> start_rl_run(const std::string& tenant, uid_t owner, const RlJobSpec& r,
                                                  model::ModelService& model, env::EnvService& envs,
                                                  env::DatasetStore& datasets, HealthManager* health, std::uint64_t id,
                                                  const JobLimits& limits, ObservationLedger& observations,
                                                  std::uint64_t& first_version);  // throws std::runtime_error
void rl_progress(const RlRun& run, JobInfo& info);  // fills state, counts, losses
void rl_stop(RlRun& run);
bool rl_finished(const RlRun& run);

}  // namespace nexus::daemon
