// The job registry's lifecycle: start, admission, listing, cancellation, reaping. The work
// itself is in job_runs.cpp (sft, eval) and jobs_rl.cpp (rl).
#include "daemon/master/jobs.hpp"

#include "daemon/log/log_text.hpp"
#include "daemon/master/job.hpp"

namespace nexus::daemon {

JobRegistry::JobRegistry(model::ModelService& model, env::EnvService& envs, env::DatasetStore& datasets,
                         JobLimits limits, HealthManager* health)
    : model_(model),
      envs_(envs),
      datasets_(datasets),
      limits_(limits),
      health_(health),
      hang_once_(limits.inject_hang),
      reaper_([this] { reap(); }) {}

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

void JobRegistry::launch(Job& j) {
  if (j.thread.joinable()) j.superseded_threads.push_back(std::move(j.thread));
  const std::uint64_t generation = j.role ? j.role->generation() : 1;
  j.thread = std::thread([this, &j, generation] {
    const bool first = generation <= 1;
    if (!first || admit(j)) {
      try {
        j.info.kind == "sft" ? run_sft(j, generation) : run_eval(j, generation);
      } catch (const std::exception& e) {  // a job's failure is its own
        if (!superseded(j, generation)) finish(j, "failed", e.what());
      }
    }
    if (superseded(j, generation)) return;  // the loop that replaced us reports for the job
    std::lock_guard lk(mu_);
    j.exited = true;
    cv_.notify_all();
  });
}

bool JobRegistry::superseded(Job& job, std::uint64_t generation) {
  return job.role && !job.role->current(generation);
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
                                                           const wire::JobSpec& s) {
  auto job = std::make_unique<Job>();
  job->owner = owner;
  job->info.tenant = tenant;
  job->info.kind = s.kind()->str();
  job->info.state = "queued";
  if (job->info.kind == "sft") {
    job->sft = {s.dataset() ? s.dataset()->str() : "", s.steps(), s.batch(), s.chunk()};
    if (job->sft.dataset.empty() || job->sft.steps < 1 || job->sft.steps > 10'000'000 || job->sft.batch < 1 ||
        job->sft.batch > 4096 || job->sft.chunk < 1 || job->sft.chunk > 64)
      return JobRefused{wire::ErrorCode::BadMessage,
                        "sft jobs need a loaded dataset's name, steps 1..10000000, batch 1..4096, chunk 1..64"};
    job->info.total = job->sft.steps;
  } else if (job->info.kind == "eval") {
    job->eval = {s.task() ? s.task()->str() : "", s.version(), s.episodes(), s.seed()};
    if (job->eval.task.empty() || job->eval.episodes < 1 || job->eval.episodes > 256)
      return JobRefused{wire::ErrorCode::BadMessage, "eval jobs need a task and 1..256 episodes"};
    job->info.total = job->eval.episodes;
  } else {
    return JobRefused{wire::ErrorCode::BadMessage, "job kind must be sft or eval (RL jobs: RlStartRequest)"};
  }
  std::lock_guard lk(mu_);
  if (stop_) return JobRefused{wire::ErrorCode::Internal, "nexusd is stopping"};
  Job& j = *job;
  const auto id = add(std::move(job));
  if (health_)  // a silent loop is restarted: SFT continues from its last step, an evaluation starts over
    j.role = health_->add(
        "job-" + std::to_string(id), limits_.heartbeat,
        [this, &j] {
          std::lock_guard lk(mu_);
          if (!j.exited && !stop_) launch(j);
        },
        [this, &j](const std::string& why) {  // its loop keeps failing: the job fails with the reason
          {
            std::lock_guard lk(mu_);
            if (j.exited) return;
            if (j.thread.joinable()) j.superseded_threads.push_back(std::move(j.thread));
            j.exited = true;
            cv_.notify_all();
          }
          finish(j, "failed", why);
        });
  launch(j);
  log_text(LogLevel::Info, "job_queued", "job=" + std::to_string(id) + " tenant=" + tenant + " kind=" + j.info.kind);
  return id;
}

std::variant<std::pair<std::uint64_t, std::uint64_t>, JobRefused> JobRegistry::start_rl(const std::string& tenant,
                                                                                        uid_t owner,
                                                                                        const wire::RlStartRequest& r) {
  std::uint64_t id = 0;
  {
    std::lock_guard lk(mu_);
    for (const auto& [other, job] : jobs_)
      if (job->rl && job->info.tenant == tenant && !rl_finished(*job->rl))
        return JobRefused{wire::ErrorCode::JobFailed, "an RL job of this tenant is running: stop it first"};
    id = next_id_++;  // its loops' role names carry it
  }
  auto job = std::make_unique<Job>();
  job->owner = owner;
  job->info.tenant = tenant;
  job->info.kind = "rl";
  job->info.state = "running";
  job->info.total = r.iterations();
  std::uint64_t first = 0;
  try {  // opens sessions and publishes the starting version: outside the registry's lock
    job->rl = start_rl_run(tenant, r, model_, envs_, datasets_, health_, id, limits_, first);
  } catch (const std::exception& e) {
    return JobRefused{wire::ErrorCode::JobFailed, e.what()};
  }
  std::lock_guard lk(mu_);
  job->admitted = true;
  add(std::move(job), id);
  return std::pair{id, first};
}

bool JobRegistry::admit(Job& job) {
  std::unique_lock lk(mu_);
  auto running = [&](const std::string* tenant) {
    int n = 0;
    for (const auto& [id, j] : jobs_)
      if (j->admitted && !j->exited && !(j->rl && rl_finished(*j->rl)) && (!tenant || j->info.tenant == *tenant)) ++n;
    return n;
  };
  RoleIdle waiting(job.role.get());  // queued: no heartbeat expected
  cv_.wait(lk, [&] {
    return stop_ || job.cancelled ||
           (running(nullptr) < limits_.max_running && running(&job.info.tenant) < limits_.max_running_per_tenant);
  });
  if (stop_ || job.cancelled) {
    lk.unlock();
    finish(job, "cancelled", "");
    return false;
  }
  job.admitted = true;
  {
    std::lock_guard jl(job.mu);
    job.info.state = "running";
    job.started = std::chrono::steady_clock::now();
  }
  return true;
}

void JobRegistry::finish(Job& job, const std::string& state, const std::string& error) {
  {
    std::lock_guard lk(job.mu);
    job.info.state = state;
    job.info.error = error;
    job.ended = std::chrono::steady_clock::now();
  }
  log_text(state == "failed" ? LogLevel::Warn : LogLevel::Info, "job_" + state,
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
  if (!mine) return JobRefused{wire::ErrorCode::UnknownJob, "no job " + std::to_string(id) + " of yours"};
  Job& job = *it->second;
  job.cancelled = true;
  if (job.rl) {
    rl_stop(*job.rl);
  } else if (!job.admitted) {
    std::lock_guard jl(job.mu);
    if (job.info.state == "queued") job.info.state = "cancelled", job.ended = std::chrono::steady_clock::now();
  }
  cv_.notify_all();
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
  cv_.notify_all();
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
      if (job->rl && rl_finished(*job->rl) && !job->exited) {
        job->exited = true;  // the run's loops are done: its object may go (joins them, closes sessions)
        JobInfo last = info_of(*job);
        {
          std::lock_guard jl(job->mu);
          job->info = last;
          job->ended = std::chrono::steady_clock::now();
        }
        ended_runs.push_back(std::move(job->rl));
      }
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
