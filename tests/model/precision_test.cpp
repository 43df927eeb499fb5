// [model] precision (daemon/model/precision.hpp): float32 is the backbone itself, bf16 runs its
// pass and an adapter's under bfloat16 autocast and hands float32 features back within the bound
// below, autocast ends with the pass (a lane's other work stays float32), and the feature cache
// keys bf16 features apart. Named "devices: ..." so that scripts/gpu-check.sh runs them on a
// GPU too, where the CUDA halves (bf16 and tf32 on cuda:0) run.
// LibTorch first: c10 defines a glog-style CHECK that aborts; Catch must define the last one.
#include <ATen/autocast_mode.h>
#include <torch/torch.h>
#undef CHECK
#include <catch2/catch.hpp>

#include "daemon/model/adapted_backbone.hpp"
#include "daemon/model/feature_cache.hpp"
#include "daemon/model/precision.hpp"

using namespace nexus;

namespace {

// bf16 against float32, as the largest difference over the largest float32 magnitude, on the
// tiny backbone's seeded weights and random images: measured 0.0070 (pooled) and 0.0063 (tokens)
// on this project's CPU VM; bfloat16 keeps 8 significant bits (2^-8 = 0.0039 per rounding), and
// the blocks' matmuls add them up. The bound leaves about 3x (docs/design/gpu.md, "Precision").
constexpr double kBf16Bound = 0.02;
// tf32 (CUDA only) keeps 10 bits: 4x tighter.
constexpr double kTf32Bound = 0.01;

struct Inputs {
  torch::Tensor images, tokens, mask;
};

Inputs inputs(const model::BackboneConfig& c, std::int64_t n, torch::Device device) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(17);
  Inputs in{torch::randint(0, 256, {n, 1, c.image_size, c.image_size, 3}, gen, torch::kUInt8),
            torch::randint(0, 256, {n, c.max_tokens}, gen, torch::kInt32), torch::ones({n, c.max_tokens}, torch::kBool)};
  in.mask.narrow(1, 24, c.max_tokens - 24).fill_(false);
  return {in.images.to(device), in.tokens.to(device), in.mask.to(device)};
}

double relative_difference(const torch::Tensor& a, const torch::Tensor& reference) {
  const auto ref = reference.to(torch::kCPU, torch::kFloat64);
  return (a.to(torch::kCPU, torch::kFloat64) - ref).abs().max().item<double>() / ref.abs().max().item<double>();
}

bool autocast_on(torch::Device device) {
#if TORCH_VERSION_MAJOR >= 2
  return at::autocast::is_autocast_enabled(device.type());
#else
  return device.is_cuda() ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
#endif
}

// The same tiny backbone at float32 and at `precision` on `device`: their features on one batch.
void compare_features(torch::Device device, model::Precision precision, double bound) {
  const auto c = *model::named_backbone("tiny");
  const auto in = inputs(c, 6, device);
  // float32's features first: tf32's switch is process-wide from with_precision on.
  const auto f32 = model::make_adaptable_backbone(c, "", device)->forward(in.images, in.tokens, in.mask);
  auto at_precision = model::with_precision(model::make_adaptable_backbone(c, "", device), precision, device);
  REQUIRE(dynamic_cast<model::AdaptableBackbone*>(at_precision.get()) != nullptr);  // still takes adapters
  const auto low = at_precision->forward(in.images, in.tokens, in.mask);
  CHECK_FALSE(autocast_on(device));  // the pass's autocast ended with it
  CHECK(low.pooled.scalar_type() == torch::kFloat32);
  CHECK(low.tokens.scalar_type() == torch::kFloat32);
  CHECK(low.pooled.device() == device);
  const double pooled = relative_difference(low.pooled, f32.pooled), tokens = relative_difference(low.tokens, f32.tokens);
  INFO(model::precision_name(precision) << " on " << device << ": pooled " << pooled << ", tokens " << tokens);
  CHECK(pooled > 0);  // it did compute at another precision (a float32 pass is bitwise itself)
  CHECK(pooled <= bound);
  CHECK(tokens <= bound);
  WARN(std::string(model::precision_name(precision)) << " on " << device.str() << " against float32: pooled " << pooled
                                                     << ", tokens " << tokens << " (bound " << bound << ")");
}

}  // namespace

TEST_CASE("devices: the backbone's precision is float32 tf32 or bf16 and tf32 is float32 on a CPU", "[model][precision]") {
  using model::Precision;
  CHECK(model::parse_precision("float32") == Precision::Float32);
  CHECK(model::parse_precision("tf32") == Precision::TF32);
  CHECK(model::parse_precision("bf16") == Precision::BF16);
  for (const char* bad : {"fp16", "BF16", "", "float"}) CHECK_FALSE(model::parse_precision(bad).has_value());
  for (auto p : {Precision::Float32, Precision::TF32, Precision::BF16})
    CHECK(model::parse_precision(model::precision_name(p)) == p);
  CHECK(model::effective_precision(Precision::TF32, torch::kCPU) == Precision::Float32);
  CHECK(model::effective_precision(Precision::TF32, torch::Device("cuda:0")) == Precision::TF32);
  CHECK(model::effective_precision(Precision::BF16, torch::kCPU) == Precision::BF16);
  // What a replica is configured with: a name that is none, and bf16 on compiled code, refused.
  CHECK(model::configured_precision("tf32", "tiny", torch::kCPU) == Precision::Float32);
  CHECK(model::configured_precision("bf16", "torchscript", torch::kCPU) == Precision::BF16);
  CHECK_THROWS_WITH(model::configured_precision("fp16", "tiny", torch::kCPU), Catch::Contains("float32, tf32 or bf16"));
  CHECK_THROWS_WITH(model::configured_precision("bf16", "aoti", torch::kCPU), Catch::Contains("AOTInductor"));
  CHECK(model::configured_precision("float32", "aoti", torch::kCPU) == Precision::Float32);
  // float32 (and tf32 on a CPU) is the backbone itself: bitwise what it always computed.
  const auto c = *model::named_backbone("tiny");
  for (auto p : {Precision::Float32, Precision::TF32}) {
    auto inner = model::make_adaptable_backbone(c, "", torch::kCPU);
    const auto* raw = inner.get();
    CHECK(model::with_precision(std::move(inner), p, torch::kCPU).get() == raw);
  }
}

TEST_CASE("devices: a bf16 backbone gives float32 features within its bound of float32's", "[model][precision]") {
  compare_features(torch::kCPU, model::Precision::BF16, kBf16Bound);
  if (!torch::cuda::is_available()) {
    WARN("no CUDA device here: bf16 and tf32 on cuda:0 did not run");
    return;
  }
  compare_features(torch::Device("cuda:0"), model::Precision::BF16, kBf16Bound);
  compare_features(torch::Device("cuda:0"), model::Precision::TF32, kTf32Bound);
  at::globalContext().setAllowTF32CuBLAS(false);  // tf32 is process-wide: the other cases want float32
  at::globalContext().setAllowTF32CuDNN(false);
}

TEST_CASE("devices: an adapter trains through a bf16 pass and its gradients stay float32", "[model][precision]") {
  const auto c = *model::named_backbone("tiny");
  model::AdapterSpec spec;
  spec.rank = 4, spec.alpha = 8, spec.layers = c.layers, spec.dim = c.dim, spec.mlp_hidden = c.mlp_ratio * c.dim;
  torch::manual_seed(9);
  model::LoraAdapterImpl adapter(spec);
  {
    torch::NoGradGuard no_grad;
    for (auto& p : adapter.parameters()) p.copy_(torch::randn(p.sizes()) * 0.05);
  }
  auto backbone = model::with_precision(model::make_adaptable_backbone(c, "", torch::kCPU), model::Precision::BF16, torch::kCPU);
  auto& adaptable = dynamic_cast<model::AdaptableBackbone&>(*backbone);
  std::vector<torch::Tensor> weights_before;
  for (const auto& p : adaptable.module().parameters()) weights_before.push_back(p.clone());
  const auto in = inputs(c, 4, torch::kCPU);
  model::AdapterBatch batch;
  batch.segments.push_back({0, 4, &adapter});
  auto grads = [&](model::AdaptableBackbone& b) {
    for (auto& p : adapter.parameters()) p.mutable_grad() = torch::Tensor();
    const auto f = b.forward_adapted(in.images, in.tokens, in.mask, batch, /*grad=*/true);
    CHECK(f.pooled.scalar_type() == torch::kFloat32);
    (f.pooled.pow(2).mean() + f.tokens.mean()).backward();
    std::vector<torch::Tensor> g;
    for (auto& p : adapter.parameters()) {
      REQUIRE(p.grad().defined());
      CHECK(p.grad().scalar_type() == torch::kFloat32);
      CHECK(torch::isfinite(p.grad()).all().item<bool>());
      g.push_back(p.grad().clone());
    }
    return g;
  };
  const auto low = grads(adaptable);
  CHECK_FALSE(autocast_on(torch::kCPU));
  auto reference = model::make_adaptable_backbone(c, "", torch::kCPU);
  const auto f32 = grads(*reference);
  REQUIRE(low.size() == f32.size());
  // The gradients of a bf16 pass point where float32's do (cosine), and differ from them.
  const auto a = torch::cat([&] { std::vector<torch::Tensor> v; for (auto& t : low) v.push_back(t.flatten()); return v; }());
  const auto b = torch::cat([&] { std::vector<torch::Tensor> v; for (auto& t : f32) v.push_back(t.flatten()); return v; }());
  const double cosine = (a * b).sum().item<double>() / (a.norm().item<double>() * b.norm().item<double>());
  INFO("cosine of the adapter's gradients, bf16 against float32: " << cosine);
  CHECK(cosine > 0.99);
  CHECK_FALSE(torch::equal(a, b));
  // The frozen backbone's weights are untouched.
  std::size_t i = 0;
  for (const auto& p : adaptable.module().parameters()) CHECK(torch::equal(p, weights_before[i++]));
}

TEST_CASE("devices: the feature cache keys bf16 features apart from float32 ones", "[model][precision][cache]") {
  const auto c = *model::named_backbone("tiny");
  auto backbone = model::make_adaptable_backbone(c, "", torch::kCPU);
  const auto plain = model::backbone_digest(*backbone, "tiny", "");
  CHECK(model::backbone_digest(*backbone, "tiny", "", "float32") == plain);  // entries made before precision existed
  CHECK(model::backbone_digest(*backbone, "tiny", "", "bf16") != plain);
  CHECK(model::backbone_digest(*backbone, "tiny", "", "tf32") != plain);
  CHECK(model::backbone_digest(*backbone, "tiny", "", "tf32") != model::backbone_digest(*backbone, "tiny", "", "bf16"));
}
