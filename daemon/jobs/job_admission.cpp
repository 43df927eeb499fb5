// The job registry's admission: the per-tenant and global bounds, the queue of jobs waiting for
// a running place, and the start of a job's thread. Each is called under mu_; the job's thread
// and the health manager's callbacks take it themselves.
#include <system_error>

#include "daemon/jobs/job.hpp"
#include "daemon/jobs/job_registry.hpp"

namespace nexus::daemon {

std::optional<JobRefused> JobRegistry::over_bounds(const std::string& tenant) const {
  const auto mine = active_of_.count(tenant) ? active_of_.at(tenant) : 0;
  if (mine >= limits_.max_per_tenant)
    return JobRefused{JobRefusal::OverBound,
                      "this tenant has " + std::to_string(mine) +
                          " jobs queued or running, the most it may ([jobs] max_per_tenant): wait for one to end or cancel one"};
  if (static_cast<int>(active_) >= limits_.max_jobs)
    return JobRefused{JobRefusal::OverBound, "nexusd has " + std::to_string(active_) +
                                                          " jobs queued or running, its bound ([jobs] max_jobs): try later"};
  return std::nullopt;
}

// A job's places: active (queued or running) from its start, running from its admission.
void JobRegistry::ended(Job& j) {
  if (j.exited) return;
  j.exited = true;
  --active_;
  if (--active_of_[j.info.tenant] <= 0) active_of_.erase(j.info.tenant);
  if (j.admitted) {
    --running_;
    if (--running_of_[j.info.tenant] <= 0) running_of_.erase(j.info.tenant);
  }
  admit_waiting();
  cv_.notify_all();
}

// Takes what it admits or drops out of the queue first, then starts or ends them: starting one
// may end it (no thread), and ending one admits again, which must not find the queue mid-walk.
void JobRegistry::admit_waiting() {
  std::vector<Job*> cancelled, admitted;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    Job& j = **it;
    const auto& t = j.info.tenant;
    const int mine = running_of_.count(t) ? running_of_.at(t) : 0;
    if (j.cancelled || stop_) {
      cancelled.push_back(&j);
      it = waiting_.erase(it);
    } else if (running_ < limits_.max_running && mine < limits_.max_running_per_tenant) {
      j.admitted = true;  // its running place, taken now: the walk counts it
      ++running_;
      ++running_of_[t];
      admitted.push_back(&j);
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  for (Job* j : admitted) start_running(*j);
  for (Job* j : cancelled) {
    finish(*j, JobState::Cancelled, "");
    ended(*j);
  }
}

void JobRegistry::start_running(Job& j) {
  {
    std::lock_guard jl(j.mu);
    j.info.state = JobState::Running;
    j.started = std::chrono::steady_clock::now();
  }
  if (health_ && !j.role)  // a silent loop is restarted: SFT continues from its last step, an evaluation starts over
    j.role = health_->add(
        "job-" + std::to_string(j.info.id), limits_.heartbeat,
        [this, &j] {
          std::lock_guard lk(mu_);
          if (j.exited || stop_) return;
          if (!launch(j)) ended(j);
        },
        [this, &j](const std::string& why) {  // its loop keeps failing: the job fails with the reason
          std::lock_guard lk(mu_);
          if (j.exited) return;
          if (j.thread.joinable()) j.superseded_threads.push_back(std::move(j.thread));
          finish(j, JobState::Failed, why);
          ended(j);
        });
  if (!launch(j)) ended(j);
}

// False (the job failed, with the reason) when no thread can be made: the daemon and every
// other job go on.
bool JobRegistry::launch(Job& j) {
  if (j.thread.joinable()) j.superseded_threads.push_back(std::move(j.thread));
  const std::uint64_t generation = j.role ? j.role->generation() : 1;
  try {
    j.thread = std::thread([this, &j, generation] {
      std::string error;
      try {
        j.info.kind == "sft" ? run_sft(j, generation) : run_eval(j, generation);
      } catch (const std::exception& e) {  // a job's failure is its own
        error = e.what();
      } catch (...) {
        error = "unknown exception";
      }
      if (superseded(j, generation)) return;  // the loop that replaced us reports for the job
      if (!error.empty()) finish(j, JobState::Failed, error);
      std::lock_guard lk(mu_);
      ended(j);
    });
  } catch (const std::system_error& e) {
    finish(j, JobState::Failed, std::string("nexusd cannot start a thread for this job: ") + e.what());
    return false;
  }
  return true;
}

bool JobRegistry::superseded(Job& job, std::uint64_t generation) {
  return job.role && !job.role->current(generation);
}

}  // namespace nexus::daemon
