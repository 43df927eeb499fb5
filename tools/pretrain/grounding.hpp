// Grounding batches for pretraining and evaluation: scenes rendered into backbone inputs, with
// the named object's position, colour and shape as targets.
#pragma once
#include <torch/torch.h>

#include "daemon/model/backbone_config.hpp"
#include "synth/scenes.hpp"

namespace nexus::pretrain {

struct GroundingBatch {
  torch::Tensor images;  // uint8 [B, 1, H, W, 3]
  torch::Tensor tokens;  // int32 [B, T]
  torch::Tensor mask;    // bool [B, T]
  torch::Tensor xy;      // float [B, 2] in [0, 1]
  torch::Tensor color;   // int64 [B]
  torch::Tensor shape;   // int64 [B]
  torch::Tensor patch_color;  // int64 [B, patches]: colour at each patch's centre, kColors = none
};

GroundingBatch make_batch(synth::SceneGenerator& scenes, const model::BackboneConfig& config, std::int64_t batch);

// Linear read-outs used only while pretraining: from the pooled feature, xy (2) + colour logits
// + shape logits of the named object; from each patch token, the colour under it (dense: it
// makes patch features say what is where, which the pooled feature then looks up).
inline constexpr std::int64_t kGroundingOutputs = 2 + synth::kColors + synth::kShapes;
inline constexpr std::int64_t kPatchClasses = synth::kColors + 1;

struct GroundingMetrics {
  double loss = 0;
  double xy_l1 = 0;           // mean |predicted - true| over x and y, image fractions
  double baseline_xy_l1 = 0;  // predicting the mean position
  double color_accuracy = 0;
  double shape_accuracy = 0;
};

// `out` [B, kGroundingOutputs] from the pooled feature; `patch_logits` [B, patches, kPatchClasses].
GroundingMetrics grounding_metrics(const torch::Tensor& out, const torch::Tensor& patch_logits, const GroundingBatch& b);
torch::Tensor grounding_loss(const torch::Tensor& out, const torch::Tensor& patch_logits, const GroundingBatch& b);

}  // namespace nexus::pretrain
