#include "daemon/jobs/sampled_step.hpp"

namespace nexus::daemon {

model::Request sampled_sft_request(const std::string& tenant, std::uint32_t uid, std::shared_ptr<const env::SampledBatch> b,
                                   std::function<void(model::Result)> done) {
  using model::DType;
  model::Request m;
  m.tenant = tenant;
  m.uid = uid;  // with the name, the feature cache's scope: a name's next owner reads none of its entries
  model::op::SftStep step;
  step.obs.images = {b->images.data(), DType::UInt8, {b->n, b->views, b->image_size, b->image_size, 3}};
  step.obs.tokens = {b->tokens.data(), DType::Int32, {b->n, b->max_tokens}};
  step.obs.mask = {b->mask.data(), DType::UInt8, {b->n, b->max_tokens}};
  if (b->state_dim > 0) step.obs.state = {b->state.data(), DType::Float32, {b->n, b->state_dim}};
  step.actions = {b->actions.data(), DType::Float32, {b->n, b->chunk, b->action_dim}};
  step.sample_keys = b->sample_keys;  // the batch is the daemon's own: its keys name its bytes
  m.op = std::move(step);
  m.keepalive = std::move(b);
  m.done = std::move(done);
  return m;
}

}  // namespace nexus::daemon
