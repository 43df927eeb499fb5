// Jobs: a tenant's intent turned into work the daemon drives, readable and cancellable at any
// time (nexusctl jobs / cancel; JobStatusRequest):
//   sft   N steps on a dataset the tenant loaded: batches sampled by the daemon, each an SFT
//         step on the Training Queue like the tenant's own.
//   eval  M episodes of a published version (pinned while it runs; the latest by default, never
//         the live head) in the Environment Service, actions from the Inference Queue.
//   rl    PPO/GRPO (daemon/rl): rollouts and updates on the tenant's slot.
// States: queued (waiting for a place: at most max_running_per_tenant of a tenant's jobs and
// max_running in all run at once), running, finished, failed (with its reason), cancelled.
// A tenant's jobs are cancelled when it detaches. Tenant-driven requests go on beside them.
//
// Bounds: a tenant may have max_per_tenant jobs queued or running, and the daemon max_jobs;
// a start beyond either is refused with LimitExceeded. A queued job is a record in a FIFO and
// holds no thread: threads are made for running jobs only (max_running at most, plus loops a
// restart superseded, which leave when they wake), so a flood of starts cannot exhaust threads.
// A thread that cannot be made fails that job alone. Admission is O(queued) per event.
//
// Thread safety: every member may be called from any thread and never blocks on a job; jobs
// run on their own threads, which the registry joins (a reaper; and the destructor).
#pragma once
#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/env/dataset_store.hpp"
#include "daemon/env/env_service.hpp"
#include "daemon/health/health_manager.hpp"
#include "daemon/jobs/job_specs.hpp"
#include "daemon/jobs/observation_ledger.hpp"
#include "daemon/metrics/service_status.hpp"
#include "daemon/model/model_service.hpp"

namespace nexus::daemon {

class RlRun;  // rl_runs.cpp (LibTorch): an RL job in progress
struct RlRunDeleter {
  void operator()(RlRun* run) const;
};

class JobRegistry {
 public:
  JobRegistry(model::ModelService& model, env::EnvService& envs, env::DatasetStore& datasets, JobLimits limits,
              HealthManager* health = nullptr);
  ~JobRegistry();  // cancels and joins every job
  JobRegistry(const JobRegistry&) = delete;
  JobRegistry& operator=(const JobRegistry&) = delete;

  // A job id, or why it cannot start (bad spec, one RL job per tenant at a time, a bound).
  std::variant<std::uint64_t, JobRefused> start(const std::string& tenant, uid_t owner, const JobRequest& spec);
  // RL jobs keep their own request (RlStartRequest): the job id and the starting version.
  std::variant<std::pair<std::uint64_t, std::uint64_t>, JobRefused> start_rl(const std::string& tenant, uid_t owner,
                                                                            const RlJobSpec& r);

  std::vector<JobInfo> list(const std::optional<std::string>& tenant = std::nullopt) const;
  std::optional<JobInfo> find(std::uint64_t id) const;
  std::optional<JobInfo> latest_rl(const std::string& tenant) const;
  // Cancels a job if `tenant` owns it (or, tenant empty, `requester` is root or its owner).
  std::variant<JobInfo, JobRefused> cancel(std::uint64_t id, const std::string& tenant, uid_t requester);
  // Bytes of observations each user's RL jobs keep now (users keeping none are absent).
  std::map<uid_t, std::uint64_t> observations_held() const { return observations_.held(); }
  void tenant_attached(const std::string& tenant);
  void tenant_detached(const std::string& tenant);

 private:
  struct Job;
  std::optional<JobRefused> over_bounds(const std::string& tenant) const;  // holds mu_
  std::uint64_t add(std::unique_ptr<Job> job, std::uint64_t id = 0);  // holds mu_; id 0: the next
  void admit_waiting();                          // holds mu_: starts queued jobs that fit, in order
  void start_running(Job& job);                  // holds mu_: admitted (its place taken); its role and first thread
  bool launch(Job& job);                         // holds mu_: (re)starts its thread; false if none can start
  void ended(Job& job);                          // holds mu_: exited, its places freed
  // holds mu_: a run whose loops are done ends its job and moves to `out`, to be freed (joined,
  // its records and sessions released) outside the lock.
  void take_finished_run(Job& job, std::vector<std::unique_ptr<RlRun, RlRunDeleter>>& out);
  void run_sft(Job& job, std::uint64_t generation);  // the job's thread; returns when superseded
  void run_eval(Job& job, std::uint64_t generation);
  bool superseded(Job& job, std::uint64_t generation);  // a restart handed the loop on
  void finish(Job& job, JobState state, const std::string& error);  // state: one of the ends
  static JobInfo info_of(const Job& job);        // holds job's lock
  void reap();                                   // the reaper thread

  model::ModelService& model_;
  env::EnvService& envs_;
  env::DatasetStore& datasets_;
  const JobLimits limits_;
  HealthManager* const health_;
  ObservationLedger observations_;  // before jobs_: the runs give back to it as they go

  mutable std::mutex mu_;
  std::condition_variable cv_;                        // the reaper
  std::map<std::uint64_t, std::unique_ptr<Job>> jobs_;  // GUARDED_BY(mu_)
  std::deque<Job*> waiting_;                          // GUARDED_BY(mu_): queued sft/eval jobs, in order
  std::size_t active_ = 0;                            // GUARDED_BY(mu_): jobs queued or running
  std::map<std::string, int> active_of_;              // GUARDED_BY(mu_): ... per tenant
  int running_ = 0;                                   // GUARDED_BY(mu_): sft/eval jobs admitted, not exited
  std::map<std::string, int> running_of_;             // GUARDED_BY(mu_): ... per tenant
  std::uint64_t next_id_ = 1;                         // GUARDED_BY(mu_)
  bool stop_ = false;                                 // GUARDED_BY(mu_)
  // Tenants that left: a job whose start was under way when its tenant left is cancelled as it
  // is added (its requester is gone; nobody would ever stop it).
  std::set<std::string> gone_;                        // GUARDED_BY(mu_)
  std::thread reaper_;
};

}  // namespace nexus::daemon
