// A tenant's model API: register a head on the resident backbone, train it with SFT steps,
// predict actions, publish immutable policy versions. Used through nexus::Client.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "nexus/tensor.hpp"

namespace nexus {

// A low-rank adapter (LoRA) on the resident backbone, trained with the head on this tenant's
// samples only: the backbone itself stays frozen and shared (docs/design/adapters.md). The
// built-in backbones only.
struct AdapterSpec {
  std::int32_t rank = 0;       // 1..64; 0: no adapter (the head alone)
  double alpha = 0;            // the update is scaled by alpha / rank; 0: alpha = rank
  std::uint32_t targets = 0;   // which projections (kAdapt* bits below); 0: all six
  std::uint32_t blocks = 0;    // bit i: encoder block i; 0: every block
  static constexpr std::uint32_t kQ = 1, kK = 2, kV = 4, kO = 8, kMlpIn = 16, kMlpOut = 32;
};

struct HeadSpec {
  std::string kind = "mlp_chunk";  // mlp_chunk, flow, gaussian
  std::int32_t state_dim = 0;      // proprioceptive state per sample (0: none)
  std::int32_t action_dim = 2;
  std::int32_t chunk = 1;          // actions per prediction
  std::int32_t hidden = 256;
  std::int32_t flow_steps = 10;    // Euler steps when a flow head samples
  double flow_noise = 1.0;         // std of the flow's source noise: about your actions' scale
  // mlp_chunk, gaussian: learned queries that attend over the backbone's feature tokens, next to
  // the pooled feature (0: pooled alone). The pooled feature carries mostly the one object an
  // instruction names; give a task about two objects (a block and its goal) a few queries.
  std::int32_t token_queries = 0;
  AdapterSpec adapter;             // rank > 0: also train a low-rank adapter on the backbone
};

struct OptimizerSpec {  // AdamW with global grad-norm clipping
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double weight_decay = 0.01;
  double grad_clip = 1.0;
};

struct TenantSpec {
  std::int32_t views = 1;  // camera views per sample
  HeadSpec head;
  OptimizerSpec optimizer;
  std::uint64_t seed = 0;  // head initialisation and the slot's RNG
};

// What the daemon's backbone expects, as answered by register_tenant().
struct BackboneInfo {
  std::string name;
  std::int32_t image_size = 0;  // images are uint8 [n, views, image_size, image_size, 3]
  std::int32_t max_views = 0;
  std::int32_t max_tokens = 0;  // tokens int32 [n, max_tokens], token_mask uint8 [n, max_tokens]
  std::int32_t feature_dim = 0;
};

// Tensors in the client arena (Client::alloc), read in place by the daemon. Do not modify them
// until the request's reply has arrived.
struct Observation {
  const Tensor* images = nullptr;
  const Tensor* tokens = nullptr;
  const Tensor* token_mask = nullptr;
  const Tensor* state = nullptr;  // when the head has state_dim > 0
};

struct SlotDigest {
  std::uint64_t parameters = 0;  // FNV-1a over the head's parameters and its published versions
  std::uint64_t optimizer = 0;   // ... over the training state (AdamW moments, step counts, RNG)
  std::uint64_t step = 0;
  std::uint64_t latest_version = 0;  // the newest published version; 0: none yet
  bool operator==(const SlotDigest&) const = default;
};

struct SftResult {
  double loss = 0;
  double grad_norm = 0;
  std::uint64_t step = 0;
};

struct Prediction {
  std::vector<float> actions;        // row-major [n, chunk, action_dim]
  std::vector<std::int64_t> shape;
};

struct FeaturesResult {  // Client::features: what nexusd wrote
  std::uint32_t samples = 0;
  std::uint32_t dim = 0;             // float32 [samples, dim] at the `out` tensor
};

// The embedded default tokenizer (one token per byte), into row `row` of int32 tokens and
// uint8 mask tensors of shape [n, max_tokens].
void tokenize(std::string_view text, const Tensor& tokens, const Tensor& token_mask, std::int64_t row);

}  // namespace nexus
