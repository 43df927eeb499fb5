// An RL job's demonstrations for DAPG's behaviour-cloning term (DemoConfig): their checks and
// each update's draw. Apart from rl_job.cpp (lifecycle), rl_updates.cpp (actor) and
// rl_rollout_loops.cpp (producer).
#include "daemon/rl/rl_job.hpp"

namespace nexus::rl {

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
  // The frames' features: an act (Inference Queue, grouped) whose sampled actions are dropped.
  // Its draw from the slot's RNG is harmless: overlapped, the producer's acts race it anyway;
  // synchronous, the producer is waiting, so it comes at the same point of every run.
  auto acted = policy_.act(d.images, d.tokens, d.mask, d.state);
  DemoTerm term;
  term.pooled = acted.pooled, term.state = d.state, term.actions = d.actions, term.weight = config_.demos.weight;
  // An adapter tenant's term re-runs the frames through its live adapter, as its rollouts do.
  if (keeps_observations()) term.images = d.images, term.tokens = d.tokens, term.mask = d.mask;
  return term;
}

}  // namespace nexus::rl
