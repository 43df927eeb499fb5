// The ceiling for nexus-bench group: the same backbone in this process, no IPC.
#include <torch/torch.h>

#include <chrono>

#include "daemon/model/backbone.hpp"
#include "group.hpp"

namespace nexus::bench {
namespace {

using Clock = std::chrono::steady_clock;

model::VLABackbone& backbone_for(const std::string& name) {
  static std::map<std::string, model::VLABackbone> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    model::VLABackbone b(*model::named_backbone(name));
    b->freeze();
    it = cache.emplace(name, b).first;
  }
  return it->second;
}

double forward_seconds(model::VLABackbone& b, std::int64_t n, int repeats) {
  const auto& c = b->config();
  auto images = torch::randint(0, 256, {n, 1, c.image_size, c.image_size, 3}).to(torch::kUInt8);
  auto tokens = torch::randint(0, 256, {n, c.max_tokens}).to(torch::kInt32);
  auto mask = torch::ones({n, c.max_tokens}, torch::kBool);
  torch::NoGradGuard no_grad;
  b->forward(images, tokens, mask);  // warm-up
  const auto t0 = Clock::now();
  for (int i = 0; i < repeats; ++i) b->forward(images, tokens, mask);
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

}  // namespace

InProcess inprocess_throughput(const std::string& name, int tenants, int batch, int rounds) {
  auto& b = backbone_for(name);
  InProcess r;
  const double samples = double(tenants) * batch * rounds;
  r.grouped_sps = samples / forward_seconds(b, std::int64_t(tenants) * batch, rounds);
  r.serial_sps = samples / forward_seconds(b, batch, rounds * tenants);
  return r;
}

double backbone_flops_per_sample(const std::string& name) {
  const auto c = *model::named_backbone(name);
  const double s = double(c.sequence_length(1)), d = double(c.dim), p = double(c.patch * c.patch * 3);
  const double per_layer = 2 * s * d * 3 * d     // qkv
                           + 2 * 2 * s * s * d   // scores and weighted sum
                           + 2 * s * d * d       // output projection
                           + 2 * 2 * s * d * c.mlp_ratio * d;  // MLP
  return double(c.patches_per_view()) * 2 * p * d + double(c.layers) * per_layer;
}

double peak_gemm_flops() {
  constexpr std::int64_t n = 1024;
  auto a = torch::randn({n, n}), b = torch::randn({n, n});
  torch::mm(a, b);  // warm-up
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    auto c = torch::mm(a, b);
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n / secs);
  }
  return best;
}

}  // namespace nexus::bench
