// An RL job's rollout side (rl_rollout_loops.cpp only): its sessions and their current observations as the
// backbone wants them, for one generation of the rollout loop. Every call first checks that the
// loop still holds its role: a loop a restart superseded leaves (Superseded) before it touches a
// session or the queue again.
#pragma once
#include <chrono>
#include <thread>

#include "daemon/fault/fault_plan.hpp"
#include "daemon/model/backbone.hpp"
#include "daemon/rl/rl_job.hpp"

namespace nexus::rl {

struct Superseded {};  // a restart handed this loop's role to a new thread: leave, touching nothing

struct RlJob::Observer {
  Observer(RlJob& job, std::uint64_t generation) : job(job), generation(generation) {
    const auto n = static_cast<std::int64_t>(job.sessions_.size());
    const auto h = job.spec_.image_size;
    images = torch::zeros({n, 1, h, h, 3}, torch::kUInt8);
    state = torch::zeros({n, job.spec_.state_dim});
    tokens = torch::zeros({n, job.policy_.max_tokens()}, torch::kInt32);
    mask = torch::zeros({n, job.policy_.max_tokens()}, torch::kBool);
    instructions.resize(static_cast<std::size_t>(n));
  }

  // Resets (seeds) or steps (actions [rows, A]) the given rows' sessions and copies their new
  // observations into place. A session's error throws: the rollout loop failed.
  std::vector<env::SessionResult> run(const std::vector<std::int64_t>& rows, const std::vector<std::uint64_t>& seeds,
                                      const torch::Tensor& actions) {
    std::vector<std::uint64_t> ids;
    for (auto r : rows) ids.push_back(job.sessions_[static_cast<std::size_t>(r)]);
    const auto m = static_cast<std::int64_t>(rows.size());
    auto img = torch::empty({m, 1, images.size(2), images.size(3), 3}, torch::kUInt8);
    auto st = torch::empty({m, state.size(1)});
    std::vector<env::SessionResult> out;
    if (seeds.empty() && daemon::fault::armed() && job.progress().env_steps >= 3 * job.sessions_.size())
      inject_faults();
    still_current();
    if (!seeds.empty()) {
      out = job.envs_.reset(job.tenant_, ids, seeds, img.data_ptr<std::uint8_t>(), st.data_ptr<float>());
    } else {
      auto a = actions.contiguous();
      out = job.envs_.step(job.tenant_, ids, {a.data_ptr<float>(), static_cast<std::size_t>(a.numel())},
                           img.data_ptr<std::uint8_t>(), st.data_ptr<float>());
    }
    still_current();  // a hung call that returns after its loop was taken over changes nothing here
    if (job.rollout_role_) job.rollout_role_->beat();
    for (std::size_t i = 0; i < out.size(); ++i)
      if (!out[i].error.empty()) throw std::runtime_error("environment: " + out[i].error);
    if (seeds.empty()) {  // where the steps ran, for the job's status
      std::lock_guard lk(job.mu_);
      for (const auto& r : out) {
        ++job.progress_.engine_steps[r.engine];
        job.progress_.interrupted_episodes += !r.interrupted.empty();
      }
    }
    auto index = torch::tensor(rows, torch::kLong);
    images.index_copy_(0, index, img);
    state.index_copy_(0, index, st);
    for (std::size_t i = 0; i < out.size(); ++i) {
      auto& text = instructions[static_cast<std::size_t>(rows[i])];
      if (text != out[i].instruction) {
        text = out[i].instruction;
        model::tokenize_into(text, tokens, mask, rows[i]);
      }
    }
    return out;
  }

  PolicyPort::Acted act() { return act_on(images, tokens, mask, state); }

  // The pooled features of some rows' current observations (an act on those rows alone): a
  // truncated episode's true last observation, before its reset replaces it.
  torch::Tensor features(const std::vector<std::int64_t>& rows) {
    auto idx = torch::tensor(rows, torch::kLong);
    return act_on(images.index_select(0, idx), tokens.index_select(0, idx), mask.index_select(0, idx),
                  state.index_select(0, idx))
        .pooled;
  }

  PolicyPort::Acted act_on(const torch::Tensor& img, const torch::Tensor& tok, const torch::Tensor& msk,
                           const torch::Tensor& st) {
    PolicyPort::Acted acted;
    {
      daemon::RoleIdle waiting(job.rollout_role_.get());  // on the Inference Queue, not in a simulator
      acted = job.policy_.act(img, tok, msk.to(torch::kUInt8), st);
    }
    still_current();
    return acted;
  }

  void still_current() const {
    if (job.rollout_role_ && !job.rollout_role_->current(generation)) throw Superseded{};
  }

  // A test's fault plan (daemon/fault/fault_plan.hpp): a throw, or a hang like a stuck simulator
  // call, until the loop is taken over.
  void inject_faults() const {
    const auto action = daemon::fault::at(daemon::fault::Point::RlRollout);
    if (action == daemon::fault::Action::Throw) throw std::runtime_error("injected fault: an RL rollout loop threw");
    if (action == daemon::fault::Action::Hang)
      while (!job.stop_ && (!job.rollout_role_ || job.rollout_role_->current(generation)))
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }

  RlJob& job;
  const std::uint64_t generation;
  torch::Tensor images, state, tokens, mask;
  std::vector<std::string> instructions;
};

}  // namespace nexus::rl
