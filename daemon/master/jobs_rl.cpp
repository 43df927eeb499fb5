// RL jobs as registry jobs: an rl::RlJob on the tenant's policy port (LibTorch: the one job
// translation unit that includes it).
#include "daemon/master/job.hpp"
#include "daemon/model/policy_port.hpp"
#include "daemon/rl/rl_job.hpp"

namespace nexus::daemon {

class RlRun {
 public:
  RlRun(const std::string& tenant, rl::RlConfig config, model::ModelService& model, env::EnvService& envs,
        rl::RlSupervision supervision)
      : port_(model.policy_port(tenant)), job_(tenant, std::move(config), *port_, envs, std::move(supervision)) {}
  rl::RlJob& job() { return job_; }
  const rl::RlJob& job() const { return job_; }

 private:
  std::unique_ptr<model::PolicyPort> port_;  // outlives the job (declared first)
  rl::RlJob job_;
};

void RlRunDeleter::operator()(RlRun* run) const { delete run; }

std::unique_ptr<RlRun, RlRunDeleter> start_rl_run(const std::string& tenant, const wire::RlStartRequest& r,
                                                  model::ModelService& model, env::EnvService& envs,
                                                  HealthManager* health, std::uint64_t id, const JobLimits& limits,
                                                  std::uint64_t& first_version) {
  rl::RlConfig c;
  c.algorithm = r.algorithm()->str();
  c.task = r.task()->str();
  c.sessions = r.sessions(), c.horizon = r.horizon(), c.group_size = r.group_size(), c.iterations = r.iterations();
  c.max_steps = r.max_steps(), c.seed = r.seed(), c.queue_capacity = std::clamp(r.queue_capacity(), 1, 8);
  c.staleness = {std::max(0, r.max_staleness()), r.downweight_stale() ? rl::StalePolicy::Downweight : rl::StalePolicy::Drop};
  c.update = {r.epochs(), r.minibatch(), r.clip(), r.gamma(), r.lambda(), r.entropy(), 0.5, r.value_lr()};
  if (c.iterations > 100000 || c.update.epochs > 32 || c.update.minibatch > 4096)
    throw std::runtime_error("iterations <= 100000, epochs <= 32, minibatch <= 4096");
  const rl::RlSupervision supervision{health, "job-" + std::to_string(id), limits.heartbeat, limits.inject_rl_throw,
                                      limits.inject_rl_hang};
  std::unique_ptr<RlRun, RlRunDeleter> run(new RlRun(tenant, std::move(c), model, envs, supervision));
  first_version = run->job().progress().first_version;
  return run;
}

void rl_progress(const RlRun& run, JobInfo& info) {
  const auto p = run.job().progress();
  info.state = p.state == "done" ? "finished" : p.state == "stopped" ? "cancelled" : p.state == "failed" ? "failed" : "running";
  info.error = p.error;
  info.done = p.iterations;
  info.loss = p.policy_loss;
  info.success_rate = p.recent_success;
  info.mean_return = p.recent_return;
  info.version = p.version;
  info.rl = {p.first_version, p.env_steps, p.episodes, p.records_dropped, p.records_downweighted, p.value_loss, p.entropy};
}

void rl_stop(RlRun& run) { run.job().stop(); }
bool rl_finished(const RlRun& run) { return run.job().finished(); }

}  // namespace nexus::daemon
