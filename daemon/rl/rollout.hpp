// Rollout records: what the producer hands the actor through the Training Queue. A record holds
// the backbone features computed when the step was taken (the backbone is frozen, so they are
// still right), which is why a head-only tenant's updates never rerun the backbone. An adapter
// tenant's features change as its adapter learns: its records keep the observations too, and its
// updates re-run the adapted backbone on them (docs/design/adapters.md, RL).
#pragma once
#include <torch/torch.h>

#include <cstdint>

namespace nexus::rl {

// T steps of n sessions. The gaussian head reads only pooled features and proprio state, so
// those are what is kept of the VLAFeature (a few hundred bytes per step, not the token grid).
struct Rollout {
  torch::Tensor pooled;    // [T, n, D]
  torch::Tensor state;     // [T, n, S]
  torch::Tensor actions;   // [T, n, 1, A] as sampled
  torch::Tensor log_prob;  // [T, n] under the acting version
  torch::Tensor reward;    // [T, n]
  torch::Tensor done;      // [T, n] 1 where the episode ended at this step
  torch::Tensor alive;     // [T, n] 1 where the session was in an episode (GRPO pads finished ones)
  torch::Tensor last_pooled, last_state;  // PPO: the observation after step T-1 (value bootstrap)
  // PPO: episodes the limit cut short (truncated, not terminated) bootstrap from the value of
  // their true last observation, seen before the reset replaced it: [k] flat step indices
  // (t * n + session), and that observation's pooled features [k, D] and state [k, S].
  torch::Tensor cut_index, cut_pooled, cut_state;
  // Adapter tenants only (undefined otherwise): the observations each step acted on, in
  // PolicyPort::act's layouts: images uint8 [T, n, 1, H, W, 3], tokens int32 and mask uint8
  // [T, n, L]. Bounded per job (RlJob: kMaxHeldObservationBytes).
  torch::Tensor images, tokens, mask;
  torch::Tensor episode_return;  // GRPO: [n] each session's episode return
  std::int64_t group_size = 0;   // GRPO: sessions [g*G, (g+1)*G) share a start state
  std::uint64_t version = 0;     // the oldest policy version that acted in the record
};

}  // namespace nexus::rl
