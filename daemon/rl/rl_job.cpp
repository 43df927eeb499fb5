#include "daemon/rl/rl_job.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <optional>

#include "daemon/rl/rl_observer.hpp"

namespace nexus::rl {
namespace {
struct StopRequested {};  // thrown between update minibatches once the job is asked to stop
}  // namespace

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
    policy_.with_slot([&](model::TenantSlot& slot) {
      const auto& h = slot.head().spec();
      if (h.kind != "gaussian" || h.chunk != 1 || h.action_dim != spec_.action_dim || h.state_dim != spec_.state_dim)
        throw std::runtime_error("RL on " + c.task + " needs a gaussian head with chunk 1, action_dim " +
                                 std::to_string(spec_.action_dim) + " and state_dim " + std::to_string(spec_.state_dim));
      // Records keep the pooled features only (Rollout): a head that attends over the tokens
      // would need every step's tokens kept too.
      if (h.token_queries != 0)
        throw std::runtime_error("RL heads read the pooled feature only: register the gaussian head with token_queries 0");
      torch::manual_seed(c.seed);  // the value head's initialisation, under the executor's lock
      value_ = ValueHead(policy_.feature_dim(), spec_.state_dim, 256);
      value_opt_ = std::make_unique<torch::optim::AdamW>(value_->parameters(), torch::optim::AdamWOptions(c.update.value_lr));
      progress_.first_version = progress_.version = slot.publish();  // the starting policy
    });
    policy_.keep_version(progress_.first_version);  // before the update loop publishes (and retention drops) any
  } catch (...) {
    envs_.close(tenant_, sessions_);
    throw;
  }
  started_ = std::chrono::steady_clock::now();
  progress_.state = "running";
  supervise(supervision);
  std::lock_guard lk(threads_mu_);
  producer_ = std::thread([this] { produce(1); });
  actor_ = std::thread([this] { consume(1); });
}

void RlJob::supervise(const RlSupervision& s) {
  throw_once_ = s.inject_rollout_throw;
  hang_once_ = s.inject_rollout_hang;
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
  stop_ = true;
  queue_.close();
  std::lock_guard lk(mu_);
  if (progress_.state == "running") progress_.state = "stopped";
}

bool RlJob::finished() const {
  std::lock_guard lk(mu_);
  return progress_.state != "running" && progress_.state != "starting";
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
    if (progress_.state == "running") {
      progress_.state = "failed";
      progress_.error = why;
    }
  }
  stop_ = true;
  queue_.close();
}

void RlJob::episode_ended(bool success, float episode_return, bool truncated) {
  std::lock_guard lk(mu_);
  progress_.truncated_episodes += truncated;
  window_.emplace_back(success, episode_return);
  if (window_.size() > 100) window_.pop_front();
  ++progress_.episodes;
}

void RlJob::loop_failed(daemon::Role* role, std::uint64_t generation, const std::string& why) {
  if (stop_) return;
  if (role)
    role->failed(why, generation);
  else
    fail(why);
}

void RlJob::check_demos(const DemoBatch& d, std::int64_t n) const {
  const auto size = policy_.image_size();
  auto shaped = [](const torch::Tensor& t, std::vector<std::int64_t> shape) {
    return t.defined() && t.sizes() == c10::IntArrayRef(shape);
  };
  if (!shaped(d.images, {n, 1, size, size, 3}) || d.images.scalar_type() != torch::kUInt8)
    throw std::runtime_error("demonstrations must have one camera view (RL acts on one)");
  if (spec_.action_dim == 0) return;  // before the sessions open: the task's widths are not known yet
  if (!shaped(d.state, {n, spec_.state_dim}) || !shaped(d.actions, {n, 1, spec_.action_dim}))
    throw std::runtime_error("demonstrations for " + config_.task + " need state_dim " + std::to_string(spec_.state_dim) +
                             " and action_dim " + std::to_string(spec_.action_dim) + ", got state " +
                             std::to_string(d.state.size(-1)) + " and actions " + std::to_string(d.actions.size(-1)));
}

DemoTerm RlJob::draw_demos() {
  auto d = config_.demos.sample(config_.demos.batch);
  check_demos(d, config_.demos.batch);  // the tenant may have loaded another file under the name since
  // The frames' features: an act (Inference Queue, grouped) whose sampled actions are dropped;
  // its draw from the slot's RNG is harmless (a job's producer and actor race in any case).
  auto acted = policy_.act(d.images, d.tokens, d.mask, d.state);
  return {acted.pooled, d.state, d.actions, config_.demos.weight};
}

void RlJob::produce(std::uint64_t generation) {
  try {
    if (config_.algorithm == "ppo")
      produce_ppo(generation);
    else
      produce_grpo(generation);
  } catch (const Superseded&) {
  } catch (const std::exception& e) {
    loop_failed(rollout_role_.get(), generation, std::string("rollout: ") + e.what());
  }
}

namespace {

// One record's steps as they are taken, stacked into the Rollout at its end.
struct StepLists {
  std::vector<torch::Tensor> pooled, state, actions, log_prob, reward, alive;
  void add(const PolicyPort::Acted& acted, const torch::Tensor& obs_state) {
    pooled.push_back(acted.pooled);
    state.push_back(obs_state.clone());
    actions.push_back(acted.actions);
    log_prob.push_back(acted.log_prob);
  }
  void stack_into(Rollout& r) const {
    r.pooled = torch::stack(pooled);
    r.state = torch::stack(state);
    r.actions = torch::stack(actions);
    r.log_prob = torch::stack(log_prob);
    r.reward = torch::stack(reward);
    r.alive = alive.empty() ? torch::ones_like(r.reward) : torch::stack(alive);
  }
};

std::vector<std::int64_t> all_rows(std::size_t n) {
  std::vector<std::int64_t> r(n);
  for (std::size_t i = 0; i < n; ++i) r[i] = static_cast<std::int64_t>(i);
  return r;
}
}  // namespace

// PPO: continuous rollouts of `horizon` steps; a finished episode is reset at once.
void RlJob::produce_ppo(std::uint64_t generation) {
  Observer obs(*this, generation);
  const auto n = sessions_.size();
  const auto T = config_.horizon;
  std::vector<std::uint64_t> seeds(n);
  for (auto& s : seeds) s = next_seed_++;
  obs.run(all_rows(n), seeds, {});
  std::vector<float> returns(n, 0.f);
  auto acted = obs.act();
  while (!stop_) {
    Rollout r;
    StepLists steps;
    std::vector<torch::Tensor> done;
    std::vector<std::int64_t> cut_index;  // truncated episodes: their true last observations
    std::vector<torch::Tensor> cut_pooled, cut_state;
    r.version = acted.version;
    for (int t = 0; t < T && !stop_; ++t) {
      steps.add(acted, obs.state);
      auto step = obs.run(all_rows(n), {}, acted.actions.select(1, 0));
      auto rew = torch::empty({static_cast<std::int64_t>(n)}), dn = torch::zeros({static_cast<std::int64_t>(n)});
      std::vector<std::int64_t> finished, cut;
      for (std::size_t i = 0; i < n; ++i) {
        rew[static_cast<std::int64_t>(i)] = step[i].outcome.reward;
        returns[i] += step[i].outcome.reward;
        if (step[i].outcome.done) {
          dn[static_cast<std::int64_t>(i)] = 1;
          finished.push_back(static_cast<std::int64_t>(i));
          if (step[i].outcome.truncated) cut.push_back(static_cast<std::int64_t>(i));
          episode_ended(step[i].outcome.success, returns[i], step[i].outcome.truncated);
          returns[i] = 0;
        }
      }
      steps.reward.push_back(rew);
      done.push_back(dn);
      if (!cut.empty()) {  // before the resets below overwrite their observations
        cut_pooled.push_back(obs.features(cut));
        cut_state.push_back(obs.state.index_select(0, torch::tensor(cut, torch::kLong)).clone());
        for (auto i : cut) cut_index.push_back(t * static_cast<std::int64_t>(n) + i);
        std::lock_guard lk(mu_);
        progress_.truncations_kept += cut.size();
      }
      if (!finished.empty()) {
        std::vector<std::uint64_t> fresh(finished.size());
        for (auto& s : fresh) s = next_seed_++;
        obs.run(finished, fresh, {});
      }
      {
        std::lock_guard lk(mu_);
        progress_.env_steps += n;
      }
      acted = obs.act();
      r.version = std::min(r.version, acted.version);
    }
    if (stop_) break;
    steps.stack_into(r);
    r.done = torch::stack(done);
    r.last_pooled = acted.pooled;
    r.last_state = obs.state.clone();
    if (!cut_index.empty()) {
      r.cut_index = torch::tensor(cut_index, torch::kLong);
      r.cut_pooled = torch::cat(cut_pooled);
      r.cut_state = torch::cat(cut_state);
    }
    obs.still_current();
    if (!queue_.push(std::move(r))) break;
  }
}

// GRPO: every record is one episode per session; groups of group_size sessions start from the
// same seed, so their returns differ only by the policy's sampling.
void RlJob::produce_grpo(std::uint64_t generation) {
  Observer obs(*this, generation);
  const auto n = sessions_.size();
  const auto G = static_cast<std::size_t>(config_.group_size);
  while (!stop_) {
    std::vector<std::uint64_t> seeds(n);
    for (std::size_t g = 0; g < n / G; ++g) {
      const std::uint64_t seed = next_seed_++;
      for (std::size_t k = 0; k < G; ++k) seeds[g * G + k] = seed;
    }
    obs.run(all_rows(n), seeds, {});
    Rollout r;
    r.group_size = static_cast<std::int64_t>(G);
    r.version = UINT64_MAX;
    StepLists steps;
    std::vector<bool> live(n, true);
    auto ret = torch::zeros({static_cast<std::int64_t>(n)});
    for (int t = 0; t < spec_.max_steps && !stop_; ++t) {
      std::vector<std::int64_t> rows;
      for (std::size_t i = 0; i < n; ++i)
        if (live[i]) rows.push_back(static_cast<std::int64_t>(i));
      if (rows.empty()) break;
      auto acted = obs.act();  // all rows: finished ones are masked out below
      r.version = std::min(r.version, acted.version);
      steps.add(acted, obs.state);
      auto alive_t = torch::zeros({static_cast<std::int64_t>(n)}), rew = torch::zeros({static_cast<std::int64_t>(n)});
      auto step = obs.run(rows, {}, acted.actions.select(1, 0).index_select(0, torch::tensor(rows, torch::kLong)));
      for (std::size_t j = 0; j < rows.size(); ++j) {
        const auto i = rows[j];
        alive_t[i] = 1;
        rew[i] = step[j].outcome.reward;
        if (step[j].outcome.done) {
          live[static_cast<std::size_t>(i)] = false;
          episode_ended(step[j].outcome.success, ret[i].item<float>() + step[j].outcome.reward);
        }
      }
      ret += rew;
      steps.reward.push_back(rew);
      steps.alive.push_back(alive_t);
      std::lock_guard lk(mu_);
      progress_.env_steps += rows.size();
    }
    if (stop_) break;
    steps.stack_into(r);
    r.done = torch::zeros_like(r.reward);
    r.episode_return = ret;
    obs.still_current();
    if (!queue_.push(std::move(r))) break;
  }
}

void RlJob::consume(std::uint64_t generation) {
  auto superseded = [&] { return update_role_ && !update_role_->current(generation); };
  try {
    // A restarted loop goes on from the last published iteration.
    std::uint64_t version = progress().version;
    for (int it = progress().iterations; it < config_.iterations && !stop_;) {
      auto record = queue_.pop();
      if (!record || superseded()) break;
      const long age = static_cast<long>(version - record->version);
      const double weight = staleness_weight(config_.staleness, age);
      if (weight == 0) {
        std::lock_guard lk(mu_);
        ++progress_.records_dropped;
        continue;
      }
      // A stop (cancel, detach) is honoured between minibatches, not after the whole update.
      const SlotRunner on_slot = [this](const std::function<void(model::TenantSlot&)>& fn) {
        if (stop_) throw StopRequested{};
        policy_.with_slot(fn);
      };
      std::optional<DemoTerm> demos;
      if (uses_demos()) demos = draw_demos();
      const DemoTerm* term = demos ? &*demos : nullptr;
      const UpdateStats stats =
          config_.algorithm == "ppo"
              ? ppo_update(on_slot, value_, *value_opt_, *record, config_.update, weight, shuffle_, term)
              : grpo_update(on_slot, *record, config_.update, weight, shuffle_, term);
      if (superseded()) return;  // the update it finished is its successor's to publish or redo
      policy_.with_slot([&](model::TenantSlot& slot) { version = slot.publish(); });
      ++it;
      std::lock_guard lk(mu_);
      progress_.iterations = it;
      progress_.version = version;
      progress_.policy_loss = stats.policy_loss;
      progress_.value_loss = stats.value_loss;
      progress_.entropy = stats.entropy;
      progress_.demo_loss = stats.demo_loss;
      if (weight < 1) ++progress_.records_downweighted;
    }
    if (superseded()) return;
    {
      std::lock_guard lk(mu_);
      if (progress_.state == "running") progress_.state = "done";
    }
    stop_ = true;
    queue_.close();
  } catch (const StopRequested&) {
    // stop() set the state; the update in progress was abandoned between minibatches
  } catch (const std::exception& e) {
    loop_failed(update_role_.get(), generation, std::string("update: ") + e.what());
  }
}

}  // namespace nexus::rl
