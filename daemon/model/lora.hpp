// Per-tenant low-rank adapters (LoRA) on the built-in backbone, and the segmented pass that
// applies many tenants' adapters in one backbone forward (docs/design/adapters.md).
//
// A projection y = x W^T + b of the frozen backbone becomes, on tenant t's samples only,
//   y_t = x_t W^T + b + scale_t * (x_t A_t) B_t        A_t [in, r_t], B_t [r_t, out]
// The base GEMM runs once for the whole group; the low-rank part is a shrink (x A) and an
// expand (. B) per tenant, batched: every adapted sample gathers its tenant's A and B (padded to
// the group's largest rank with zeros, which adds exact zeros), one bmm shrinks and one GEMM with
// beta = 1 expands into the base output in place. W + A B is never formed. Samples without an
// adapter are left as the base GEMM made them.
//
// Thread safety: an AdapterBatch is built and used by one thread (the executor's).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "daemon/model/slot_spec.hpp"

namespace nexus::model {

// The six projections of an encoder block an adapter may target, in AdapterSpec bit order.
enum class Projection : int { Q = 0, K, V, O, MlpIn, MlpOut };
inline constexpr int kProjections = 6;

class LoraAdapterImpl : public torch::nn::Module {
 public:
  // A from the global generator (the caller seeds it), B zero: a new adapter changes nothing.
  // Throws std::invalid_argument for a rank out of 1..64 or a geometry not filled in.
  explicit LoraAdapterImpl(const AdapterSpec& spec);
  const AdapterSpec& spec() const { return spec_; }
  // A [in, r] and B [r, out] of (block, projection); undefined tensors where not targeted.
  // (A block past the adapter's geometry has none: a checkpoint made on another backbone.)
  const torch::Tensor& a(std::int64_t block, Projection p) const { return block < spec_.layers ? a_[index(block, p)] : none_; }
  const torch::Tensor& b(std::int64_t block, Projection p) const { return block < spec_.layers ? b_[index(block, p)] : none_; }

 private:
  torch::Tensor none_;
  std::size_t index(std::int64_t block, Projection p) const {
    return static_cast<std::size_t>(block * kProjections + static_cast<int>(p));
  }
  AdapterSpec spec_;
  std::vector<torch::Tensor> a_, b_;
};
TORCH_MODULE(LoraAdapter);

// The adapters of one group pass: each segment is `rows` consecutive samples from `first` that
// use `adapter` (live parameters, or a published version's). Segments must not overlap.
struct AdapterLayout;  // lora.cpp: where the adapted samples sit, worked out once per pass

struct AdapterBatch {
  struct Segment {
    std::int64_t first = 0, rows = 0;
    const LoraAdapterImpl* adapter = nullptr;
  };
  std::vector<Segment> segments;
  bool empty() const { return segments.empty(); }

  // Per block: the base output plus each adapted sample's low-rank delta, added into `base` in
  // place when autograd is off (GradMode), as a new tensor when it is on. `x` is the
  // projection's input [N, S, in], `base` its frozen output [N, S, out] (a fresh tensor the
  // caller no longer needs unadapted). Differentiable in the adapters' parameters (and x), never
  // in the backbone's.
  torch::Tensor apply(std::int64_t block, Projection p, const torch::Tensor& x, torch::Tensor base) const;
  // The fused qkv projection: q, k and v are column blocks [0, D), [D, 2D), [2D, 3D) of `base`.
  torch::Tensor apply_qkv(std::int64_t block, const torch::Tensor& x, torch::Tensor base) const;

 private:
  bool adapts(std::int64_t block, Projection p) const;  // some segment's adapter targets it
  // Each segment's A (a_side) or B of the projection; a [in, 1] / [1, out] zero for a segment
  // whose adapter does not target it.
  std::vector<torch::Tensor> weights(std::int64_t block, Projection p, bool a_side, std::int64_t in, std::int64_t out,
                                     const torch::TensorOptions& options) const;
  const AdapterLayout& layout(const torch::Tensor& x) const;  // built on first use (segments fixed by then)
  mutable std::shared_ptr<AdapterLayout> layout_;
};

// The segmented delta itself, for tests and the benchmark: rows of x [N, S, in] in segment k get
// scale_k * (x A_k) B_k; rows in no segment get zeros. As.size() == Bs.size() == segments.
torch::Tensor segmented_lora_delta(const torch::Tensor& x, const std::vector<std::int64_t>& first,
                                   const std::vector<std::int64_t>& rows, const std::vector<torch::Tensor>& As,
                                   const std::vector<torch::Tensor>& Bs, const std::vector<double>& scales,
                                   std::int64_t out_features);

// The adapter's spec in a checkpoint manifest, and back (absent: none). from_json throws
// nlohmann::json::exception on a malformed entry.
nlohmann::json adapter_to_json(const AdapterSpec& s);
AdapterSpec adapter_from_json(const nlohmann::json& head);

// "rank 16, alpha 32, q k v o mlp_in mlp_out, blocks all" (empty for rank 0): nexusctl tenants.
std::string describe_adapter(const AdapterSpec& s);

// Parameters and bytes of an adapter (fp32): memory accounting and the benchmark.
std::int64_t adapter_parameters(const AdapterSpec& s);

}  // namespace nexus::model
