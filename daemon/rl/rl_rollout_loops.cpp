// An RL job's producer (RlJob, rl_job.hpp): the rollout loops that step the job's sessions and
// queue records, and the hand-over of each record to the actor. rl_job.cpp holds the job's
// lifecycle, rl_updates.cpp the actor (the update loop).
#include "daemon/rl/rl_job.hpp"
#include "daemon/rl/rl_observer.hpp"

namespace nexus::rl {

bool RlJob::hand_over(Rollout&& record, Observer& obs) {
  obs.still_current();
  std::uint64_t mine;
  {
    std::lock_guard lk(mu_);
    mine = ++records_queued_;
  }
  if (!queue_.push(std::move(record))) return false;
  if (!config_.synchronous) return true;
  {
    daemon::RoleIdle waiting(rollout_role_.get());  // on the actor, not in a simulator
    std::unique_lock lk(mu_);
    // In slices: a loop the Health Manager gave to a new thread meanwhile must notice.
    while (records_used_ < mine && !stop_) {
      record_used_cv_.wait_for(lk, std::chrono::milliseconds(200));
      if (rollout_role_ && !rollout_role_->current(obs.generation)) break;
    }
  }
  obs.still_current();
  return !stop_;
}

void RlJob::record_used() {
  {
    std::lock_guard lk(mu_);
    ++records_used_;
  }
  record_used_cv_.notify_all();
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

void RlJob::produce(std::uint64_t generation) {
  try {
    if (config_.algorithm == "ppo")
      produce_ppo(generation);
    else
      produce_grpo(generation);
  } catch (const Superseded&) {
  } catch (const std::exception& e) {
    loop_failed(rollout_role_.get(), generation, std::string("rollout: ") + e.what());
  } catch (...) {
    loop_failed(rollout_role_.get(), generation, "rollout: unknown exception");
  }
}

namespace {

// One record's steps as they are taken, stacked into the Rollout at its end. `observations`:
// an adapter tenant's, which keep what each step acted on (the Observer's tensors change in place).
struct StepLists {
  bool observations = false;
  std::vector<torch::Tensor> pooled, state, actions, log_prob, reward, alive, images, tokens, mask;
  template <class Obs>
  void add(const PolicyPort::Acted& acted, const Obs& obs) {
    pooled.push_back(acted.pooled);
    state.push_back(obs.state.clone());
    actions.push_back(acted.actions);
    log_prob.push_back(acted.log_prob);
    if (!observations) return;
    images.push_back(obs.images.clone());
    tokens.push_back(obs.tokens.clone());
    mask.push_back(obs.mask.to(torch::kUInt8, /*non_blocking=*/false, /*copy=*/true));
  }
  void stack_into(Rollout& r) const {
    if (observations) r.images = torch::stack(images), r.tokens = torch::stack(tokens), r.mask = torch::stack(mask);
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
    steps.observations = keeps_observations();
    std::vector<torch::Tensor> done;
    std::vector<std::int64_t> cut_index;  // truncated episodes: their true last observations
    std::vector<torch::Tensor> cut_pooled, cut_state;
    r.version = acted.version;
    for (int t = 0; t < T && !stop_; ++t) {
      steps.add(acted, obs);
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
    if (!hand_over(std::move(r), obs)) break;
    if (config_.synchronous) acted = obs.act();  // the next record's first step, by the new version
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
    steps.observations = keeps_observations();
    std::vector<bool> live(n, true);
    auto ret = torch::zeros({static_cast<std::int64_t>(n)});
    for (int t = 0; t < spec_.max_steps && !stop_; ++t) {
      std::vector<std::int64_t> rows;
      for (std::size_t i = 0; i < n; ++i)
        if (live[i]) rows.push_back(static_cast<std::int64_t>(i));
      if (rows.empty()) break;
      auto acted = obs.act();  // all rows: finished ones are masked out below
      r.version = std::min(r.version, acted.version);
      steps.add(acted, obs);
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
    if (!hand_over(std::move(r), obs)) break;
  }
}

}  // namespace nexus::rl
