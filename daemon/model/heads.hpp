// Tenant action heads on top of the frozen backbone's VLAFeature.
//
//   mlp_chunk  OFT-style: MLP over pooled features (+ proprio state) -> action chunk; L1 loss.
//   flow       GR00T-style flow matching: a small network conditioned on the feature tokens
//              (attention pooling with a learned query) predicts the velocity from noise to the
//              action chunk; MSE loss; K-step Euler sampling.
//   gaussian   MLP mean plus a learned log-std, for RL: log-probabilities and entropy; its SFT
//              loss is the negative log-likelihood.
//
// mlp_chunk and gaussian read the pooled feature, and with HeadSpec::token_queries also that many
// learned queries' read-outs of the tokens (the flow head's attention, several queries).
//
// Every head maps (features, state) to actions [n, chunk, action_dim]. Randomness (flow noise,
// gaussian sampling) comes only from the generator passed in: a tenant's RNG, never global state.
#pragma once
#include <torch/torch.h>

#include <memory>
#include <string>

#include "daemon/model/backbone.hpp"
#include "daemon/model/lora.hpp"
#include "daemon/model/slot_spec.hpp"

namespace nexus::model {

class ActionHead : public torch::nn::Module {
 public:
  explicit ActionHead(HeadSpec spec) : spec_(std::move(spec)) {}
  const HeadSpec& spec() const { return spec_; }

  // state float [n, state_dim] (undefined when state_dim == 0), actions float [n, chunk, action_dim].
  // The loss draws its randomness for the n samples first (draw_noise), then computes on them.
  torch::Tensor loss(const VLAFeature& f, const torch::Tensor& state, const torch::Tensor& actions, at::Generator& gen) {
    return loss_drawn(f, state, actions, draw_noise(actions.size(0), gen, actions.options()));
  }
  // What a training loss draws for n samples ([n, ...]; undefined for a head that draws nothing),
  // and the loss given those draws' rows for its samples. A step split into micro-batches draws
  // once for the whole batch and hands each micro-batch its rows: the same numbers as unsplit.
  virtual torch::Tensor draw_noise(std::int64_t n, at::Generator& gen, const torch::TensorOptions& options) { return {}; }
  virtual torch::Tensor loss_drawn(const VLAFeature& f, const torch::Tensor& state, const torch::Tensor& actions,
                                   const torch::Tensor& noise) = 0;
  virtual torch::Tensor predict(const VLAFeature& f, const torch::Tensor& state, at::Generator& gen) = 0;

  // The tenant's adapter on the backbone (HeadSpec::adapter), null when it has none. It is a
  // submodule of the head, so its parameters train, publish, checkpoint and digest with it.
  const LoraAdapterImpl* adapter() const { return adapter_.is_empty() ? nullptr : adapter_.get(); }
  void attach_adapter();  // make_head's: registers `adapter` when spec().adapter.rank > 0

 protected:
  torch::Tensor with_state(const torch::Tensor& pooled, const torch::Tensor& state) const;
  // The head's input: the pooled feature, the token queries' read-outs (HeadSpec::token_queries),
  // the state. Its width is trunk_input_width(feature_dim).
  torch::Tensor trunk_input(const VLAFeature& f, const torch::Tensor& state) const;
  std::int64_t trunk_input_width(std::int64_t feature_dim) const;
  void register_token_queries(std::int64_t feature_dim);  // call from the constructor
  HeadSpec spec_;
  torch::Tensor token_queries_;  // [token_queries, D]; undefined when there are none
  LoraAdapter adapter_{nullptr};
};

// Throws std::invalid_argument for an unknown kind or non-positive sizes.
std::shared_ptr<ActionHead> make_head(const HeadSpec& spec, std::int64_t feature_dim);

// RL helpers of the gaussian head (nullptr-safe casts are the caller's business).
struct GaussianOutputs {
  torch::Tensor mean;     // [n, chunk, action_dim]
  torch::Tensor log_std;  // [chunk, action_dim]
};
GaussianOutputs gaussian_outputs(ActionHead& head, const VLAFeature& f, const torch::Tensor& state);
torch::Tensor gaussian_log_prob(const GaussianOutputs& g, const torch::Tensor& actions);  // [n]
torch::Tensor gaussian_entropy(const GaussianOutputs& g);                               // scalar, per sample

}  // namespace nexus::model
