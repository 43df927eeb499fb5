// The actor's updates on a rollout record, on a tenant's gaussian head (its slot's optimizer):
//   PPO   clipped surrogate objective, GAE(lambda) advantages from a value head of the tenant's
//         own, entropy bonus.
//   GRPO  group-relative advantages: each episode's return against the others that started from
//         the same state (same seed), no value head; the same clipped objective.
// Both read the features stored in the record: no backbone pass. An adapter tenant's record keeps
// its observations too (Rollout::images), and each minibatch's policy loss re-runs the adapted
// backbone on them, so the loss reaches the adapter; its critic reads the stored features.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <string>

#include "daemon/model/policy_port.hpp"
#include "daemon/model/tenant_slot.hpp"
#include "daemon/rl/rollout.hpp"

namespace nexus::rl {

struct UpdateConfig {
  int epochs = 4;
  int minibatch = 256;
  double clip = 0.2;
  double gamma = 0.99;
  double lambda = 0.95;
  double entropy = 0.0;     // bonus coefficient
  double value_coef = 0.5;  // PPO: weight of the value loss (own optimizer, own lr)
  double value_lr = 1e-3;
};

// V(pooled, state): the PPO critic, one per RL tenant, never shared. Its initialisation is a
// function of `seed` (drawn under model::seed_global_generator's lock, whatever other lanes do).
class ValueHeadImpl : public torch::nn::Module {
 public:
  ValueHeadImpl(std::int64_t feature_dim, std::int64_t state_dim, std::int64_t hidden, std::uint64_t seed);
  torch::Tensor forward(const torch::Tensor& pooled, const torch::Tensor& state);  // [..]

 private:
  torch::nn::Sequential net_{nullptr};
};
TORCH_MODULE(ValueHead);

// GAE(lambda) over [T, n] with episode ends in `done`; returns {advantages, returns}. Where an
// episode was truncated at step t, `cut_value` [T, n] (optional) holds the value of its true last
// observation: delta_t = r_t + gamma * cut_value_t - V_t, nothing flowing back across the end.
std::pair<torch::Tensor, torch::Tensor> gae(const torch::Tensor& reward, const torch::Tensor& value,
                                            const torch::Tensor& done, const torch::Tensor& last_value,
                                            double gamma, double lambda, const torch::Tensor& cut_value = {});
// (R_i - mean of its group) / (std of its group + eps) for groups of `group_size` sessions.
torch::Tensor group_relative(const torch::Tensor& episode_return, std::int64_t group_size);
// PPO's per-sample clipped surrogate min(r*A, clip(r, 1-eps, 1+eps)*A), r = exp(log_prob - old);
// the loss is its negated mean. Its own function so tests can hold it to hand-computed values.
torch::Tensor clipped_surrogate(const torch::Tensor& log_prob, const torch::Tensor& old_log_prob,
                                const torch::Tensor& advantage, double clip);

// Demonstration steps for DAPG's behaviour-cloning term (Rajeswaran et al., RSS 2018): their
// negated log-likelihood under the head, times `weight`, joins every minibatch's policy loss, so
// a policy warm-started on the demonstrations stays near them while PPO's early, noisy gradients
// (a critic that starts untrained) would otherwise walk it away (docs/design/env-rl.md, push).
struct DemoTerm {
  torch::Tensor pooled;   // [m, D] the backbone's features of the demonstration frames
  // Adapter tenants: the frames themselves (PolicyPort::act's layouts), re-run with the live
  // adapter in each minibatch as the rollout's are; undefined otherwise.
  torch::Tensor images, tokens, mask;
  torch::Tensor state;    // [m, S]
  torch::Tensor actions;  // [m, 1, A] the demonstrator's
  double weight = 0;
};
// The term for one minibatch, before its weight: the demonstrations' mean negated log-likelihood
// per action dimension (the gaussian head's SFT loss). Each minibatch takes at most as many
// demonstration rows as it has samples, rotating through the update's batch.
// (gen: the head's loss takes one; a gaussian head's draws nothing from it.)
// `adapted` (adapter tenants): the pass that gives the frames' features (see SlotRunner).
using AdaptedPooled = model::PolicyPort::AdaptedPooled;
torch::Tensor demo_term(model::ActionHead& head, const DemoTerm& demos, torch::Device device, at::Generator& gen,
                        const AdaptedPooled& adapted = {});

struct UpdateStats {
  double policy_loss = 0, value_loss = 0, entropy = 0, clip_fraction = 0;
  double demo_loss = 0;  // the behaviour-cloning term's mean (before its weight); 0 without one
  int minibatches = 0;
  int split_minibatches = 0;  // of them, run as parts in several turns (UpdateTurns)
};

// An adapter tenant's update minibatch cut into turns, as bounded training turns cut an SFT step
// (docs/design/service.md): each part re-runs the adapted backbone on some of the minibatch's
// rows in a turn of its own and keeps its gradients outside the slot; the last part's turn steps
// once on their sum, which equals the whole minibatch's gradient (fp32 rounding aside). A stop
// between parts applies nothing. `budget`: a turn's budget now (seconds 0: minibatches stay
// whole); `sizer`: what this job's adapted passes cost, learnt from its own parts and kept
// across updates. Head-only minibatches read stored features (milliseconds) and stay whole.
struct UpdateTurns {
  std::function<sched::TurnBudget()> budget;
  sched::TurnSizer* sizer = nullptr;
};

// Runs a function on the tenant's slot where slots are touched (nexusd: its executor). Each
// minibatch's optimizer step is one call, so other tenants' requests take turns with a long
// update instead of waiting for all of it. Everything else (advantages, the value head) runs on
// the caller's thread: the slot is all the executor owns. The function gets the adapted pass
// (PolicyPort::with_adapted_slot) for a record with observations, an empty one otherwise.
using SlotFunction = std::function<void(model::TenantSlot&, const AdaptedPooled&)>;
using SlotRunner = std::function<void(const SlotFunction&)>;

// weight scales the policy loss (staleness downweighting); 1 for fresh records. demos: the
// behaviour-cloning term, or null for none.
UpdateStats ppo_update(const SlotRunner& on_slot, ValueHead& value, torch::optim::Optimizer& value_opt,
                       const Rollout& r, const UpdateConfig& c, double weight, at::Generator& gen,
                       const DemoTerm* demos = nullptr, const UpdateTurns& turns = {});
UpdateStats grpo_update(const SlotRunner& on_slot, const Rollout& r, const UpdateConfig& c, double weight,
                        at::Generator& gen, const DemoTerm* demos = nullptr, const UpdateTurns& turns = {});

}  // namespace nexus::rl
