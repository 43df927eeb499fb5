#include "daemon/rl/rl_job.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <optional>

namespace nexus::rl {

RlJob::RlJob(std::string tenant, RlConfig config, PolicyPort& policy, env::EnvService& envs, RlSupervision supervision)
    : tenant_(std::move(tenant)), config_(std::move(config)), policy_(policy), envs_(envs),
      queue_(static_cast<std::size_t>(std::max(1, config_.queue_capacity))),
      shuffle_(at::make_generator<at::CPUGeneratorImpl>(config_.seed + 17)),
      next_seed_(config_.seed * 1000003ull) {
  const auto& c = config_;
  if (c.algorithm != "ppo" && c.algorithm != "grpo") throw std::runtime_error("algorithm must be ppo or grpo");
  if (c.sessions < 1 || c.sessions > 256) throw std::runtime_error("sessions must be 1..256");
  if (c.algorithm == "grpo" && (c.group_size < 2 || c.sessions % c.group_size != 0))
    throw std::runtime_error("grpo: sessions must be a multiple of group_size (>= 2)");
  if (c.horizon < 1 || c.horizon > 4096 || c.iterations < 1 || c.update.epochs < 1 || c.update.minibatch < 1)
    throw std::runtime_error("horizon 1..4096, iterations, epochs and minibatch >= 1");
  // A record is held in daemon memory (a few hundred bytes per step) while queued and used.
  if (c.algorithm == "ppo" && static_cast<long>(c.sessions) * c.horizon > kMaxRecordSteps)
    throw std::runtime_error("sessions x horizon must be <= " + std::to_string(kMaxRecordSteps) + " steps per record");
  if (!(c.update.clip > 0 && c.update.clip < 1) || !(c.update.gamma > 0 && c.update.gamma <= 1) ||
      !(c.update.lambda >= 0 && c.update.lambda <= 1) || !(c.update.entropy >= 0) || !(c.update.value_lr > 0))
    throw std::runtime_error("clip (0,1), gamma (0,1], lambda [0,1], entropy >= 0, value_lr > 0");
  // A demo batch is one act (at most 256 samples, as a rollout step of 256 sessions).
  if (!(c.demos.weight >= 0 && c.demos.weight <= 100) || c.demos.batch < 1 || c.demos.batch > kMaxDemoBatch)
    throw std::runtime_error("demo weight must be 0..100 and demo batch 1.." + std::to_string(kMaxDemoBatch));
  // Named demonstrations are checked at any weight, before sessions open (loaded, unnormalised,
  // one view), and their widths once the task's are known.
  DemoBatch probe;
  if (c.demos.sample) check_demos(probe = c.demos.sample(1), 1);
  auto opened = envs_.open(tenant_, c.task, c.sessions, static_cast<int>(policy_.image_size()), c.max_steps);
  sessions_ = opened.ids;
  spec_ = opened.spec;
  try {
    if (c.algorithm == "grpo" && static_cast<long>(c.sessions) * spec_.max_steps > kMaxRecordSteps)
      throw std::runtime_error("grpo: sessions x episode limit must be <= " + std::to_string(kMaxRecordSteps) +
                               " steps per record");
    if (c.demos.sample) check_demos(probe, 1);
    // The slot must be a gaussian head taking this task's proprio state, one action per step.
    // Checked in both turns below: the tenant may register another head between them.
    const auto check_head = [&](model::TenantSlot& slot) -> const model::HeadSpec& {
      const auto& h = slot.head().spec();
      if (h.kind != "gaussian" || h.chunk != 1 || h.action_dim != spec_.action_dim || h.state_dim != spec_.state_dim)
        throw std::runtime_error("RL on " + c.task + " needs a gaussian head with chunk 1, action_dim " +
                                 std::to_string(spec_.action_dim) + " and state_dim " + std::to_string(spec_.state_dim));
      // Records keep the pooled features only (Rollout): a head that attends over the tokens
      // would need every step's tokens kept too.
      if (h.token_queries != 0)
        throw std::runtime_error("RL heads read the pooled feature only: register the gaussian head with token_queries 0");
      return h;
    };
    policy_.with_slot([&](model::TenantSlot& slot) {
      const auto& h = check_head(slot);
      // An adapter tenant's updates re-run the adapted backbone on the records' observations
      // (Rollout::images), which the job then holds in daemon memory: bounded here.
      if (h.adapter.rank > 0) {
        const long steps = static_cast<long>(c.sessions) * (c.algorithm == "ppo" ? c.horizon : spec_.max_steps);
        const auto per_step = static_cast<std::uint64_t>(spec_.image_size) * spec_.image_size * 3 +
                              static_cast<std::uint64_t>(policy_.max_tokens()) * 5;  // tokens int32, mask one byte
        observation_bytes_ = static_cast<std::uint64_t>(steps) * per_step;
        // Records held at once: the one being collected, those queued, the one being updated on.
        const auto held = observation_bytes_ * static_cast<std::uint64_t>(std::max(1, c.queue_capacity) + 2);
        if (held > kMaxHeldObservationBytes)
          throw std::runtime_error("an adapter tenant's RL job keeps every step's observation: sessions x " +
                                   std::string(c.algorithm == "ppo" ? "horizon" : "episode limit") + " x (queue_capacity + 2) = " +
                                   std::to_string(held >> 20) + " MiB, more than the " +
                                   std::to_string(kMaxHeldObservationBytes >> 20) + " MiB a job may hold: make them smaller");
        progress_.observation_bytes = held;  // before the job's threads start, as first_version below
      }
    });
    // Outside the slot's turn, so that a refusal keeps its type (a user's bound: daemon/jobs),
    // and before anything is published.
    if (progress_.observation_bytes > 0 && c.hold_observations) c.hold_observations(progress_.observation_bytes);
    policy_.with_slot([&](model::TenantSlot& slot) {
      if ((check_head(slot).adapter.rank > 0) != keeps_observations())
        throw std::runtime_error("the tenant registered another head while its RL job started: start the job again");
      value_ = ValueHead(policy_.feature_dim(), spec_.state_dim, 256, c.seed);
      value_opt_ = std::make_unique<torch::optim::AdamW>(value_->parameters(), torch::optim::AdamWOptions(c.update.value_lr));
      progress_.first_version = progress_.version = slot.publish();  // the starting policy
    });
    policy_.keep_version(progress_.first_version);  // before the update loop publishes (and retention drops) any
  } catch (...) {
    envs_.close(tenant_, sessions_);
    throw;
  }
  started_ = std::chrono::steady_clock::now();
  progress_.state = RunState::Running;
  supervise(supervision);
  std::lock_guard lk(threads_mu_);
  producer_ = std::thread([this] { produce(1); });
  actor_ = std::thread([this] { consume(1); });
}

void RlJob::supervise(const RlSupervision& s) {
  health_ = s.health;
  if (!health_) return;
  // A restart hands the loop to a new thread of the role's new generation; the old thread, if it
  // ever wakes, finds itself superseded and leaves (joined at the end).
  auto restart = [this](std::thread& loop, daemon::Role& role, void (RlJob::*body)(std::uint64_t)) {
    std::lock_guard lk(threads_mu_);
    if (stop_) return;
    retired_.push_back(std::move(loop));
    loop = std::thread([this, body, g = role.generation()] { (this->*body)(g); });
  };
  auto give_up = [this](const std::string& why) { fail(why); };
  rollout_role_ = health_->add(
      s.name + "-rollout", s.heartbeat, [this, restart] { restart(producer_, *rollout_role_, &RlJob::produce); }, give_up);
  update_role_ = health_->add(
      s.name + "-update", std::chrono::milliseconds(0), [this, restart] { restart(actor_, *update_role_, &RlJob::consume); },
      give_up);
}

RlJob::~RlJob() {
  stop();
  // No restart runs or starts once the roles are gone: the threads below are all there are.
  if (rollout_role_) health_->remove(rollout_role_);
  if (update_role_) health_->remove(update_role_);
  std::lock_guard lk(threads_mu_);
  if (producer_.joinable()) producer_.join();
  if (actor_.joinable()) actor_.join();
  for (auto& t : retired_) t.join();
  envs_.close(tenant_, sessions_);
}

void RlJob::stop() {
  {
    // The state with the flag, under mu_: the update loop that sees the flag must not call a
    // stopped job "done", and a synchronous producer checks the flag there before it waits.
    std::lock_guard lk(mu_);
    if (progress_.state == RunState::Running) progress_.state = RunState::Stopped;
    stop_ = true;
  }
  queue_.close();
  record_used_cv_.notify_all();
}

bool RlJob::finished() const {
  std::lock_guard lk(mu_);
  return progress_.state != RunState::Running && progress_.state != RunState::Starting;
}

RlProgress RlJob::progress() const {
  std::lock_guard lk(mu_);
  auto p = progress_;
  p.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  if (!window_.empty()) {
    double ok = 0, ret = 0;
    for (auto [s, r] : window_) ok += s, ret += r;
    p.recent_success = ok / static_cast<double>(window_.size());
    p.recent_return = ret / static_cast<double>(window_.size());
  }
  return p;
}

void RlJob::fail(const std::string& why) {
  {
    std::lock_guard lk(mu_);
    if (progress_.state == RunState::Running) {
      progress_.state = RunState::Failed;
      progress_.error = why;
    }
    stop_ = true;  // under mu_: a synchronous producer checks it there before it waits
  }
  queue_.close();
  record_used_cv_.notify_all();
}

}  // namespace nexus::rl
