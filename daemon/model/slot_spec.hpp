// What a tenant registers for its slot: the head and the optimizer. Torch-free, so that the
// master and the model service's public header can name them without LibTorch.
#pragma once
#include <cstdint>
#include <string>

namespace nexus::model {

struct HeadSpec {
  std::string kind = "mlp_chunk";
  std::int64_t state_dim = 0;
  std::int64_t action_dim = 2;
  std::int64_t chunk = 1;
  std::int64_t hidden = 256;
  std::int64_t flow_steps = 10;
  // Std of the flow's source noise, in action units: match it to the actions' scale (as one
  // would normalise actions), or the velocity target is mostly noise and learning is slow.
  double flow_noise = 1.0;
  // mlp_chunk and gaussian: learned queries that attend over the backbone's feature tokens, their
  // read-outs next to the pooled feature (0: the pooled feature alone). The pooled feature
  // carries mostly the one object an instruction names; a task about two (push a block onto a
  // goal) needs the head to look at the tokens itself.
  std::int64_t token_queries = 0;
};

struct OptimizerConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double weight_decay = 0.01;
  double grad_clip = 1.0;  // max global L2 norm; <= 0 disables
};

}  // namespace nexus::model
