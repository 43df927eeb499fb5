// LibTorch first: c10 defines a glog-style CHECK that aborts; Catch must define the last one.
#include <torch/torch.h>
#undef CHECK
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <fstream>

#include "daemon/model/backbone.hpp"
#include "daemon/model/reproducible_math.hpp"
#include "daemon/model/safetensors.hpp"
#include "daemon/model/tenant_slot.hpp"
#include "processes.hpp"

using namespace nexus;

namespace {

struct Inputs {
  torch::Tensor images, tokens, mask;
};

Inputs inputs(const model::BackboneConfig& c, std::int64_t n, std::int64_t views = 1) {
  torch::manual_seed(3);
  Inputs in{torch::randint(0, 256, {n, views, c.image_size, c.image_size, 3}).to(torch::kUInt8),
            torch::zeros({n, c.max_tokens}, torch::kInt32), torch::zeros({n, c.max_tokens}, torch::kBool)};
  for (std::int64_t i = 0; i < n; ++i) model::tokenize_into(i % 2 ? "red" : "the blue circle", in.tokens, in.mask, i);
  return in;
}

// Features of `n` random inputs from a frozen, seeded tiny backbone.
model::VLAFeature tiny_features(std::int64_t n) {
  model::VLABackbone bb(*model::named_backbone("tiny"));
  bb->freeze();
  const auto in = inputs(bb->config(), n);
  torch::NoGradGuard g;
  return bb->forward(in.images, in.tokens, in.mask);
}

double sum_of_params(torch::nn::Module& m) {
  double s = 0;
  for (auto& p : m.parameters()) s += p.detach().abs().sum().item<double>();
  return s;
}

}  // namespace

TEST_CASE("backbone: deterministic init, frozen, VLAFeature shapes, checked inputs", "[model]") {
  const auto c = *model::named_backbone("tiny");
  model::VLABackbone a(c), b(c);
  a->freeze();
  b->freeze();
  const auto in = inputs(c, 3, 2);
  torch::NoGradGuard no_grad;
  const auto fa = a->forward(in.images, in.tokens, in.mask);
  const auto fb = b->forward(in.images, in.tokens, in.mask);
  CHECK(torch::equal(fa.tokens, fb.tokens));
  using Sizes = std::vector<std::int64_t>;
  CHECK(fa.tokens.sizes().vec() == Sizes({3, c.sequence_length(2), c.dim}));
  CHECK(fa.pooled.sizes().vec() == Sizes({3, c.dim}));
  CHECK(fa.mask.sizes().vec() == Sizes({3, c.sequence_length(2)}));
  CHECK(fa.mask[1].sum().item<int>() == 1 + 2 * c.patches_per_view() + 3);  // "red": 3 bytes
  for (auto& p : a->parameters()) CHECK_FALSE(p.requires_grad());
  CHECK_THROWS(a->forward(in.images.narrow(2, 0, 32), in.tokens, in.mask));
  CHECK_THROWS(a->forward(in.images, in.tokens.narrow(1, 0, 4), in.mask.narrow(1, 0, 4)));
  auto small = *model::named_backbone("small");
  model::VLABackbone s(small);
  std::int64_t n = 0;
  for (auto& p : s->parameters()) n += p.numel();
  CHECK(n > 10'000'000);
  CHECK(n < 30'000'000);
}

TEST_CASE("weights round-trip through safetensors, bad files are refused", "[model]") {
  test::TempDir dir;
  const auto c = *model::named_backbone("tiny");
  model::VLABackbone a(c);
  {
    torch::NoGradGuard g;
    for (auto& p : a->parameters()) p.add_(0.5);  // differ from the seeded init
  }
  const std::string path = dir.path + "/w.safetensors";
  model::save_weights(*a, path, {{"nexus.backbone", "tiny"}});
  CHECK(model::read_safetensors(path).metadata.at("nexus.backbone") == "tiny");
  model::VLABackbone b(c);
  model::load_weights(*b, path);
  CHECK(sum_of_params(*a) == Approx(sum_of_params(*b)).epsilon(1e-12));

  model::VLABackbone other(*model::named_backbone("small"));
  CHECK_THROWS_WITH(model::load_weights(*other, path), Catch::Contains("tensors"));
  std::ofstream(dir.path + "/short") << "abc";
  CHECK_THROWS_WITH(model::read_safetensors(dir.path + "/short"), Catch::Contains("header"));
  {
    std::ofstream f(dir.path + "/lying", std::ios::binary);
    const std::string h = R"({"x":{"dtype":"F32","shape":[1000],"data_offsets":[0,4000]}})";
    const std::uint64_t len = h.size();
    f.write(reinterpret_cast<const char*>(&len), 8);
    f << h << "tiny";
  }
  CHECK_THROWS_WITH(model::read_safetensors(dir.path + "/lying"), Catch::Contains("byte range"));
  CHECK_THROWS(model::read_safetensors(dir.path + "/missing"));
}

TEST_CASE("heads: shapes, kinds, and the gaussian's closed forms", "[model]") {
  const auto c = *model::named_backbone("tiny");
  const auto f = tiny_features(4);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  for (const std::string kind : {"mlp_chunk", "flow", "gaussian"}) {
    auto head = model::make_head({.kind = kind, .state_dim = 3, .action_dim = 7, .chunk = 5, .hidden = 32}, c.dim);
    const auto state = torch::randn({4, 3});
    CHECK(head->predict(f, state, gen).sizes().vec() == std::vector<std::int64_t>({4, 5, 7}));
    CHECK(head->loss(f, state, torch::zeros({4, 5, 7}), gen).dim() == 0);
  }
  CHECK_THROWS_WITH(model::make_head({.kind = "transformer"}, c.dim), Catch::Contains("unknown head kind"));
  auto g = model::make_head({.kind = "gaussian", .action_dim = 2, .chunk = 1, .hidden = 16}, c.dim);
  const auto out = model::gaussian_outputs(*g, f, {});
  const auto lp = model::gaussian_log_prob(out, out.mean.detach());
  // At the mean: log N = -log(sigma) - log(2 pi)/2 per dimension; log_std starts at -0.5.
  CHECK(lp[0].item<double>() == Approx(2 * (0.5 - 0.5 * std::log(2 * M_PI))).epsilon(1e-5));
  CHECK(model::gaussian_entropy(out).item<double>() == Approx(2 * (0.5 + 0.5 * std::log(2 * M_PI) - 0.5)).epsilon(1e-5));
}

TEST_CASE("heads: token queries read the feature tokens, and a head without them reads pooled alone", "[model]") {
  const auto c = *model::named_backbone("tiny");
  const auto f = tiny_features(4);
  // The same pooled feature and mask, other tokens (the pooled row is what it was).
  const model::VLAFeature other{f.tokens + torch::randn(f.tokens.sizes()), f.pooled, f.mask};
  auto gen = at::make_generator<at::CPUGeneratorImpl>(1);
  for (const std::string kind : {"mlp_chunk", "gaussian"}) {
    torch::manual_seed(3);
    auto plain = model::make_head({.kind = kind, .state_dim = 3, .action_dim = 2, .hidden = 32}, c.dim);
    auto queried = model::make_head({.kind = kind, .state_dim = 3, .action_dim = 2, .hidden = 32, .token_queries = 3}, c.dim);
    const auto state = torch::randn({4, 3});
    CHECK(torch::equal(plain->predict(f, state, gen), plain->predict(other, state, gen)));
    CHECK_FALSE(torch::allclose(queried->predict(f, state, gen), queried->predict(other, state, gen)));
    CHECK(queried->predict(f, state, gen).sizes().vec() == std::vector<std::int64_t>({4, 1, 2}));
    const auto params = queried->named_parameters();
    REQUIRE(params.contains("token_queries"));
    CHECK(params["token_queries"].sizes().vec() == std::vector<std::int64_t>({3, c.dim}));
    CHECK_FALSE(plain->named_parameters().contains("token_queries"));
    // A masked-out token is not read: changing it changes nothing.
    auto masked = f.mask.clone();
    masked.select(1, masked.size(1) - 1).fill_(false);
    auto last_changed = f.tokens.clone();
    last_changed.select(1, last_changed.size(1) - 1).add_(5.0);
    CHECK(torch::allclose(queried->predict({f.tokens, f.pooled, masked}, state, gen),
                          queried->predict({last_changed, f.pooled, masked}, state, gen)));
  }
  // A checkpoint keeps the queries; one written before token_queries existed loads as 0.
  test::TempDir dir;
  model::TenantSlot slot({.kind = "gaussian", .action_dim = 2, .hidden = 16, .token_queries = 2}, {}, c.dim, 8);
  slot.sft_step(f, {}, torch::zeros({4, 1, 2}));
  slot.save(dir.path + "/q");
  const auto loaded = model::TenantSlot::load(dir.path + "/q", c.dim);
  CHECK(loaded.slot->head().spec().token_queries == 2);
  CHECK(loaded.slot->digest().parameters == slot.digest().parameters);
  model::TenantSlot old_style({.kind = "gaussian", .action_dim = 2, .hidden = 16}, {}, c.dim, 8);
  old_style.save(dir.path + "/old");
  auto file = model::read_safetensors(dir.path + "/old.safetensors");
  auto manifest = nlohmann::json::parse(file.metadata.at("nexus.manifest"));
  manifest["head"].erase("token_queries");
  file.metadata["nexus.manifest"] = manifest.dump();
  model::write_safetensors(dir.path + "/old.safetensors", file, 0600);
  CHECK(model::TenantSlot::load(dir.path + "/old", c.dim).slot->head().spec().token_queries == 0);
  CHECK_THROWS_WITH(model::make_head({.kind = "flow", .token_queries = 2}, c.dim), Catch::Contains("token_queries"));
  CHECK_THROWS_WITH(model::make_head({.kind = "gaussian", .token_queries = -1}, c.dim), Catch::Contains("token_queries"));
}

TEST_CASE("a slot refuses bad batches and keeps its parameters", "[model][isolation]") {
  const auto c = *model::named_backbone("tiny");
  const auto f = tiny_features(4);
  model::TenantSlot slot({.kind = "mlp_chunk", .action_dim = 2, .chunk = 3, .hidden = 32}, {}, c.dim, 9);
  const auto good = torch::zeros({4, 3, 2});
  slot.sft_step(f, {}, good);
  const double before = sum_of_params(slot.head());
  auto nan = good.clone();
  nan[0][0][0] = std::nan("");
  try {
    slot.sft_step(f, {}, nan);
    FAIL("NaN actions accepted");
  } catch (const model::SlotError& e) {
    CHECK_FALSE(e.shape_error());
  }
  try {
    slot.sft_step(f, {}, torch::zeros({4, 2, 2}));
    FAIL("wrong chunk accepted");
  } catch (const model::SlotError& e) {
    CHECK(e.shape_error());
  }
  CHECK(sum_of_params(slot.head()) == before);
  CHECK(slot.steps() == 1);
  CHECK(slot.sft_step(f, {}, good).step == 2);
}

TEST_CASE("deterministic mode pins MKL's code branch, and keeps a branch the user chose", "[model][deterministic]") {
  const char* before = std::getenv("MKL_CBWR");
  const std::string saved = before ? before : "";
  const auto chosen = model::default_math_library_branch();
  CHECK((chosen == "AVX2,STRICT" || chosen == "COMPATIBLE"));
  ::unsetenv("MKL_CBWR");
  CHECK(model::pin_math_library_branch() == chosen);
  REQUIRE(std::getenv("MKL_CBWR") != nullptr);
  CHECK(std::string(std::getenv("MKL_CBWR")) == chosen);
  ::setenv("MKL_CBWR", "AVX", 1);
  CHECK(model::pin_math_library_branch() == "AVX");
  CHECK(std::string(std::getenv("MKL_CBWR")) == "AVX");
  if (before) ::setenv("MKL_CBWR", saved.c_str(), 1);
  else ::unsetenv("MKL_CBWR");
}
