// RL jobs as registry jobs: an rl::RlJob on the tenant's policy port (LibTorch: the one job
// translation unit that includes it).
#include "daemon/jobs/job.hpp"
#include "daemon/model/policy_port.hpp"
#include "daemon/rl/rl_job.hpp"

namespace nexus::daemon {

class RlRun {
 public:
  RlRun(const std::string& tenant, rl::RlConfig config, model::ModelService& model, env::EnvService& envs,
        rl::RlSupervision supervision, ObservationLedger& observations, uid_t owner)
      : hold_(observations, owner), port_(model.policy_port(tenant)),
        job_(tenant, with_hold(std::move(config)), *port_, envs, std::move(supervision)) {}
  rl::RlJob& job() { return job_; }
  const rl::RlJob& job() const { return job_; }

 private:
  rl::RlConfig with_hold(rl::RlConfig c) {
    c.hold_observations = [this](std::uint64_t bytes) { hold_.take(bytes); };
    return c;
  }
  ObservationHold hold_;                     // given back after the job's records are freed (declared first)
  std::unique_ptr<model::PolicyPort> port_;  // outlives the job
  rl::RlJob job_;
};

void RlRunDeleter::operator()(RlRun* run) const { delete run; }

namespace {

// The behaviour-cloning term's demonstrations: batches the Environment Service's dataset side
// samples from the tenant's own loaded file (the RL job checks that they fit the task).
rl::DemoConfig demo_config(const std::string& tenant, const RlJobSpec& r, env::DatasetStore& datasets,
                           std::int64_t max_tokens) {
  rl::DemoConfig d;
  d.weight = r.demo_weight, d.batch = r.demo_batch;
  const std::string name = r.demo_dataset;
  if (d.weight == 0 && name.empty()) return d;  // a named dataset is checked even at weight 0
  if (name.empty()) throw std::runtime_error("demo_weight needs demo_dataset: a dataset this tenant loaded");
  d.sample = [&datasets, tenant, name, max_tokens](std::int64_t n) {
    auto b = std::make_shared<env::SampledBatch>(datasets.sample(tenant, name, n, /*chunk=*/1, max_tokens));
    // RL acts in the simulator's units: normalised demonstrations would pull the head elsewhere.
    if (b->normalized) throw std::runtime_error("demo_dataset '" + name + "' was loaded with normalize: load it without");
    // Views over the batch's vectors; the batch lives as long as any of them (their deleter holds it).
    auto view = [&b](void* data, std::vector<std::int64_t> shape, torch::ScalarType type) {
      return torch::from_blob(data, shape, [b](void*) {}, torch::TensorOptions().dtype(type));
    };
    const auto s = b->image_size;
    return rl::DemoBatch{view(b->images.data(), {n, b->views, s, s, 3}, torch::kUInt8),
                         view(b->tokens.data(), {n, b->max_tokens}, torch::kInt32),
                         view(b->mask.data(), {n, b->max_tokens}, torch::kUInt8),
                         view(b->state.data(), {n, b->state_dim}, torch::kFloat32),
                         view(b->actions.data(), {n, 1, b->action_dim}, torch::kFloat32)};
  };
  return d;
}

}  // namespace

std::unique_ptr<RlRun, RlRunDeleter> start_rl_run(const std::string& tenant, uid_t owner, const RlJobSpec& r,
                                                  model::ModelService& model, env::EnvService& envs,
                                                  env::DatasetStore& datasets, HealthManager* health, std::uint64_t id,
                                                  const JobLimits& limits, ObservationLedger& observations,
                                                  std::uint64_t& first_version) {
  rl::RlConfig c;
  c.algorithm = r.algorithm;
  c.task = r.task;
  c.sessions = r.sessions, c.horizon = r.horizon, c.group_size = r.group_size, c.iterations = r.iterations;
  c.max_steps = r.max_steps, c.seed = r.seed, c.queue_capacity = std::clamp(r.queue_capacity, 1, 8);
  c.synchronous = r.synchronous;
  c.staleness = {std::max(0, r.max_staleness), r.downweight_stale ? rl::StalePolicy::Downweight : rl::StalePolicy::Drop};
  c.update = {r.epochs, r.minibatch, r.clip, r.gamma, r.lambda, r.entropy, 0.5, r.value_lr};
  if (c.iterations > 100000 || c.update.epochs > 32 || c.update.minibatch > 4096)
    throw std::runtime_error("iterations <= 100000, epochs <= 32, minibatch <= 4096");
  c.demos = demo_config(tenant, r, datasets, model.backbone().max_tokens);
  const rl::RlSupervision supervision{health, "job-" + std::to_string(id), limits.heartbeat};
  std::unique_ptr<RlRun, RlRunDeleter> run(new RlRun(tenant, std::move(c), model, envs, supervision, observations, owner));
  first_version = run->job().progress().first_version;
  return run;
}

void rl_progress(const RlRun& run, JobInfo& info) {
  const auto p = run.job().progress();
  switch (p.state) {  // the RL run's states as a job's: the one conversion
    case rl::RunState::Done: info.state = JobState::Finished; break;
    case rl::RunState::Stopped: info.state = JobState::Cancelled; break;
    case rl::RunState::Failed: info.state = JobState::Failed; break;
    case rl::RunState::Starting:
    case rl::RunState::Running: info.state = JobState::Running; break;
  }
  info.error = p.error;
  info.done = p.iterations;
  info.loss = p.policy_loss;
  info.success_rate = p.recent_success;
  info.mean_return = p.recent_return;
  info.version = p.version;
  info.rl = {p.first_version, p.env_steps, p.episodes, p.records_dropped, p.records_downweighted, p.value_loss, p.entropy,
             p.demo_loss, p.records_behind, p.engine_steps, p.interrupted_episodes, p.split_minibatches,
             p.observation_bytes};
}

void rl_stop(RlRun& run) { run.job().stop(); }
bool rl_finished(const RlRun& run) { return run.job().finished(); }

}  // namespace nexus::daemon
