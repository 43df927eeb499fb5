// The job registry's lifecycle: start, listing, cancellation, reaping. Admission and bounds are
// in job_admission.cpp; the work itself in job_runs.cpp (sft, eval) and rl_runs.cpp (rl).
#include "daemon/jobs/job_registry.hpp"

#include "daemon/jobs/job.hpp"
#include "daemon/log/log_text.hpp"

namespace nexus::daemon {

JobRegistry::JobRegistry(model::ModelService& model, env::EnvService& envs, env::DatasetStore& datasets,
                         JobLimits limits, HealthManager* health)
    : model_(model), envs_(envs), datasets_(datasets), limits_(limits), health_(health),
      observations_(limits.observation_bytes_per_uid), reaper_([this] { reap(); }) {}

JobRegistry::~JobRegistry() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    for (auto& [id, job] : jobs_) {
      job->cancelled = true;
      if (job->rl) rl_stop(*job->rl);
    }
  }
  cv_.notify_all();
  reaper_.join();
  for (auto& [id, job] : jobs_) {
    if (job->role) health_->remove(job->role);
    if (job->thread.joinable()) job->thread.join();
    for (auto& t : job->superseded_threads) t.join();
    job->rl.reset();  // joins its loops, closes its sessions
  }
}

JobInfo JobRegistry::info_of(const Job& job) {
  JobInfo i;
  {
    std::lock_guard lk(job.mu);
    i = job.info;
    const auto end = job.ended == std::chrono::steady_clock::time_point{} ? std::chrono::steady_clock::now() : job.ended;
    i.seconds = std::chrono::duration<double>(end - job.started).count();
  }
  if (job.rl) rl_progress(*job.rl, i);
  return i;
}

std::uint64_t JobRegistry::add(std::unique_ptr<Job> job, std::uint64_t id) {
  if (id == 0) id = next_id_++;
  job->info.id = id;
  if (gone_.count(job->info.tenant)) {  // its tenant left while the job was being set up
    job->cancelled = true;
    if (job->rl) rl_stop(*job->rl);
  }
  jobs_[id] = std::move(job);
  return id;
}

std::variant<std::uint64_t, JobRefused> JobRegistry::start(const std::string& tenant, uid_t owner,
                                                           const JobRequest& s) {
  auto job = std::make_unique<Job>();
  job->owner = owner;
  job->info.tenant = tenant;
  job->info.kind = s.kind;
  job->info.state = JobState::Queued;
  if (job->info.kind == "sft") {
    job->sft = s.sft;
    if (job->sft.dataset.empty() || job->sft.steps < 1 || job->sft.steps > 10'000'000 || job->sft.batch < 1 ||
        job->sft.batch > 4096 || job->sft.chunk < 1 || job->sft.chunk > 64)
      return JobRefused{JobRefusal::BadSpec,
                        "sft jobs need a loaded dataset's name, steps 1..10000000, batch 1..4096, chunk 1..64"};
    job->info.total = job->sft.steps;
  } else if (job->info.kind == "eval") {
    job->eval = s.eval;
    if (job->eval.task.empty() || job->eval.episodes < 1 || job->eval.episodes > 256)
      return JobRefused{JobRefusal::BadSpec, "eval jobs need a task and 1..256 episodes"};
    job->info.total = job->eval.episodes;
  } else {
    return JobRefused{JobRefusal::BadSpec, "job kind must be sft or eval (RL jobs: RlStartRequest)"};
  }
  std::lock_guard lk(mu_);
  if (stop_) return JobRefused{JobRefusal::Stopping, "nexusd is stopping"};
  if (auto refused = over_bounds(tenant)) return *refused;
  Job& j = *job;
  const auto id = add(std::move(job));
  ++active_;
  ++active_of_[tenant];
  waiting_.push_back(&j);
  log_text(LogLevel::Info, "job_queued", "job=" + std::to_string(id) + " tenant=" + tenant + " kind=" + j.info.kind);
  admit_waiting();
  return id;
}

std::variant<std::pair<std::uint64_t, std::uint64_t>, JobRefused> JobRegistry::start_rl(const std::string& tenant,
                                                                                        uid_t owner,
                                                                                        const RlJobSpec& r) {
  std::uint64_t id = 0;
  std::vector<std::unique_ptr<RlRun, RlRunDeleter>> stopped_runs;
  {
    std::lock_guard lk(mu_);
    if (stop_) return JobRefused{JobRefusal::Stopping, "nexusd is stopping"};
    // The owner's runs that are done but not reaped yet are freed first (below, outside the
    // lock), so that what they kept is back within the user's bounds when this one asks: a job
    // stopped and another started at once must not be refused for the stopped one's bytes.
    for (auto& [other, job] : jobs_)
      if (job->owner == owner) take_finished_run(*job, stopped_runs);
    for (const auto& [other, job] : jobs_)
      if (job->rl && job->info.tenant == tenant && !rl_finished(*job->rl))
        return JobRefused{JobRefusal::CannotStart, "an RL job of this tenant is running: stop it first"};
    if (auto refused = over_bounds(tenant)) return *refused;
    id = next_id_++;  // its loops' role names carry it
    ++active_, ++active_of_[tenant];  // its places, held while it is set up
    ++running_, ++running_of_[tenant];
  }
  stopped_runs.clear();  // joins their loops: a step in flight finishes first
  auto job = std::make_unique<Job>();
  job->owner = owner;
  job->info.tenant = tenant;
  job->info.kind = "rl";
  job->info.state = JobState::Running;
  job->info.total = r.iterations;
  job->admitted = true;
  std::uint64_t first = 0;
  std::string error;
  auto refusal = JobRefusal::CannotStart;
  try {  // opens sessions and publishes the starting version: outside the registry's lock
    job->rl = start_rl_run(tenant, owner, r, model_, envs_, datasets_, health_, id, limits_, observations_, first);
  } catch (const ObservationQuotaExceeded& e) {
    error = e.what();
    refusal = JobRefusal::OverQuota;
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "unknown exception";
  }
  std::lock_guard lk(mu_);
  if (!error.empty()) {
    ended(*job);  // gives its places back
    return JobRefused{refusal, error};
  }
  add(std::move(job), id);
  return std::pair{id, first};
}

void JobRegistry::finish(Job& job, JobState state, const std::string& error) {
  {
    std::lock_guard lk(job.mu);
    job.info.state = state;
    job.info.error = error;
    job.ended = std::chrono::steady_clock::now();
  }
  log_text(state == JobState::Failed ? LogLevel::Warn : LogLevel::Info, std::string("job_") + job_state_name(state),
           "job=" + std::to_string(job.info.id) + " tenant=" + job.info.tenant + " kind=" + job.info.kind +
               (error.empty() ? "" : " reason=\"" + error + "\""));
}

std::vector<JobInfo> JobRegistry::list(const std::optional<std::string>& tenant) const {
  std::lock_guard lk(mu_);
  std::vector<JobInfo> out;
  for (const auto& [id, job] : jobs_)
    if (!tenant || job->info.tenant == *tenant) out.push_back(info_of(*job));
  return out;
}

std::optional<JobInfo> JobRegistry::find(std::uint64_t id) const {
  std::lock_guard lk(mu_);
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return std::nullopt;
  return info_of(*it->second);
}

std::optional<JobInfo> JobRegistry::latest_rl(const std::string& tenant) const {
  std::lock_guard lk(mu_);
  for (auto it = jobs_.rbegin(); it != jobs_.rend(); ++it)
    if (it->second->info.kind == "rl" && it->second->info.tenant == tenant) return info_of(*it->second);
  return std::nullopt;
}

std::variant<JobInfo, JobRefused> JobRegistry::cancel(std::uint64_t id, const std::string& tenant, uid_t requester) {
  std::lock_guard lk(mu_);
  auto it = jobs_.find(id);
  // A job the requester may not touch reads like one that does not exist.
  const bool mine = it != jobs_.end() && (tenant.empty() ? (requester == 0 || requester == it->second->owner)
                                                          : it->second->info.tenant == tenant);
  if (!mine) return JobRefused{JobRefusal::UnknownJob, "no job " + std::to_string(id) + " of yours"};
  Job& job = *it->second;
  job.cancelled = true;
  if (job.rl) rl_stop(*job.rl);
  else if (!job.admitted) admit_waiting();  // takes it out of the queue, cancelled
  return info_of(job);
}

void JobRegistry::tenant_attached(const std::string& tenant) {
  std::lock_guard lk(mu_);
  gone_.erase(tenant);
}

void JobRegistry::tenant_detached(const std::string& tenant) {
  std::lock_guard lk(mu_);
  gone_.insert(tenant);
  for (auto& [id, job] : jobs_)
    if (job->info.tenant == tenant) {
      job->cancelled = true;
      if (job->rl) rl_stop(*job->rl);
    }
  admit_waiting();  // its queued jobs leave the queue, cancelled
}
void JobRegistry::take_finished_run(Job& job, std::vector<std::unique_ptr<RlRun, RlRunDeleter>>& out) {
  if (!job.rl || !rl_finished(*job.rl) || job.exited) return;
  JobInfo last = info_of(job);
  {
    std::lock_guard jl(job.mu);
    job.info = last;
    job.ended = std::chrono::steady_clock::now();
  }
  ended(job);  // the run's loops are done: its object may go (joins them, closes sessions)
  out.push_back(std::move(job.rl));
}

// Joins what has ended (threads, RL runs) and forgets the oldest finished jobs beyond the cap.
void JobRegistry::reap() {
  std::unique_lock lk(mu_);
  while (!stop_) {
    cv_.wait_for(lk, std::chrono::milliseconds(200));
    std::vector<std::unique_ptr<RlRun, RlRunDeleter>> ended_runs;
    // Removed outside the lock (a restart in progress may be waiting for it); their jobs are kept
    // until the next pass, so that no restart or give-up in flight finds its job gone.
    std::vector<std::shared_ptr<Role>> ended_roles;
    std::set<std::uint64_t> role_pending;
    std::size_t finished = 0;
    for (auto& [id, job] : jobs_) {
      if (job->thread.joinable() && job->exited) job->thread.join();
      if (job->exited && job->role) ended_roles.push_back(std::move(job->role)), role_pending.insert(id);
      take_finished_run(*job, ended_runs);
      if (job->exited) ++finished;
    }
    for (auto it = jobs_.begin(); finished > limits_.finished_kept && it != jobs_.end();)
      if (it->second->exited && !it->second->thread.joinable() && !it->second->rl &&
          it->second->superseded_threads.empty() && !role_pending.count(it->first)) {
        it = jobs_.erase(it);
        --finished;
      } else {
        ++it;
      }
    if (!ended_runs.empty()) cv_.notify_all();  // places freed
    lk.unlock();
    ended_runs.clear();  // outside the lock: joining may wait for a step in flight
    for (const auto& role : ended_roles) health_->remove(role);
    lk.lock();
  }
}

}  // namespace nexus::daemon
