#include "grounding.hpp"

#include <cstring>

#include "daemon/model/backbone.hpp"

namespace nexus::pretrain {

GroundingBatch make_batch(synth::SceneGenerator& scenes, const model::BackboneConfig& c, std::int64_t n) {
  GroundingBatch b;
  const std::int64_t s = c.image_size;
  b.images = torch::empty({n, 1, s, s, 3}, torch::kUInt8);
  b.tokens = torch::zeros({n, c.max_tokens}, torch::kInt32);
  b.mask = torch::zeros({n, c.max_tokens}, torch::kBool);
  b.xy = torch::empty({n, 2});
  b.color = torch::empty({n}, torch::kLong);
  b.shape = torch::empty({n}, torch::kLong);
  const std::int64_t g = c.image_size / c.patch;
  b.patch_color = torch::full({n, g * g}, synth::kColors, torch::kLong);
  auto pc = b.patch_color.accessor<std::int64_t, 2>();
  auto xy = b.xy.accessor<float, 2>();
  auto color = b.color.accessor<std::int64_t, 1>();
  auto shape = b.shape.accessor<std::int64_t, 1>();
  for (std::int64_t i = 0; i < n; ++i) {
    const synth::Scene scene = scenes.next();
    std::memcpy(b.images[i].data_ptr<std::uint8_t>(), scene.image.data(), scene.image.size());
    model::tokenize_into(scene.instruction, b.tokens, b.mask, i);
    const auto& o = scene.objects[scene.target];
    xy[i][0] = o.x;
    xy[i][1] = o.y;
    color[i] = o.color;
    shape[i] = o.shape;
    for (std::int64_t py = 0; py < g; ++py)
      for (std::int64_t px = 0; px < g; ++px) {
        const std::uint8_t* rgb = &scene.image[((py * c.patch + c.patch / 2) * s + px * c.patch + c.patch / 2) * 3];
        for (int k = 0; k < synth::kColors; ++k)
          if (std::memcmp(rgb, synth::color_rgb(k), 3) == 0) pc[i][py * g + px] = k;
      }
  }
  return b;
}

torch::Tensor grounding_loss(const torch::Tensor& out, const torch::Tensor& patch_logits, const GroundingBatch& b) {
  return torch::l1_loss(torch::sigmoid(out.slice(1, 0, 2)), b.xy) * 10 +
         torch::cross_entropy_loss(out.slice(1, 2, 2 + synth::kColors), b.color) +
         torch::cross_entropy_loss(out.slice(1, 2 + synth::kColors, kGroundingOutputs), b.shape) +
         torch::cross_entropy_loss(patch_logits.reshape({-1, kPatchClasses}), b.patch_color.reshape({-1}));
}

GroundingMetrics grounding_metrics(const torch::Tensor& out, const torch::Tensor& patch_logits, const GroundingBatch& b) {
  GroundingMetrics m;
  auto xy = torch::sigmoid(out.slice(1, 0, 2));
  auto color_logits = out.slice(1, 2, 2 + synth::kColors);
  auto shape_logits = out.slice(1, 2 + synth::kColors, kGroundingOutputs);
  m.loss = grounding_loss(out, patch_logits, b).item<double>();
  m.xy_l1 = (xy - b.xy).abs().mean().item<double>();
  m.baseline_xy_l1 = (b.xy - b.xy.mean(0, true)).abs().mean().item<double>();
  m.color_accuracy = color_logits.argmax(1).eq(b.color).to(torch::kFloat32).mean().item<double>();
  m.shape_accuracy = shape_logits.argmax(1).eq(b.shape).to(torch::kFloat32).mean().item<double>();
  return m;
}

}  // namespace nexus::pretrain
