// What a tenant registers for its slot: the head and the optimizer. Torch-free, so that the
// master and the model service's public header can name them without LibTorch.
#pragma once
#include <cstdint>
#include <string>

namespace nexus::model {

// A tenant's low-rank adapter (LoRA) on the backbone's linear projections (docs/design/adapters.md):
// W x + (alpha / rank) B A x on its own samples only. rank 0: none (the head alone).
struct AdapterSpec {
  std::int64_t rank = 0;     // 1..64
  double alpha = 0;          // (0, 1024]; 0: = rank (scale 1)
  std::uint32_t targets = 0; // kAdapt* bits; 0: all six
  std::uint32_t blocks = 0;  // bit i: encoder block i; 0: all
  // The backbone's geometry, filled in at registration (never from the tenant): the adapter's
  // shapes follow from it, and a checkpoint made on another backbone is refused.
  std::int64_t layers = 0, dim = 0, mlp_hidden = 0;

  double scale() const { return (alpha > 0 ? alpha : static_cast<double>(rank)) / static_cast<double>(rank); }
  bool targets_projection(std::uint32_t bit) const { return (targets == 0 ? kAdaptAll : targets) & bit; }
  bool on_block(std::int64_t i) const { return blocks == 0 || (i < 32 && ((blocks >> i) & 1u)); }

  static constexpr std::uint32_t kAdaptQ = 1, kAdaptK = 2, kAdaptV = 4, kAdaptO = 8, kAdaptMlpIn = 16,
                                 kAdaptMlpOut = 32, kAdaptAll = 63;
  static constexpr std::int64_t kMaxRank = 64;
};

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
  // The tenant's adapter, trained with the head and checkpointed, published and evicted with it.
  AdapterSpec adapter;
};

struct OptimizerConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double weight_decay = 0.01;
  double grad_clip = 1.0;  // max global L2 norm; <= 0 disables
};

}  // namespace nexus::model
