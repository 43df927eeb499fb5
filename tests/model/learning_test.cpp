// Heads learn on top of the frozen, pretrained embedded backbone; on a random backbone they do
// not. Task: a chunk of actions toward the object the instruction names (synth::reach_actions).
// LibTorch first: c10 defines a glog-style CHECK that aborts; Catch must define the last one.
#include <torch/torch.h>
#undef CHECK
#include <catch2/catch.hpp>

#include <cstring>

#include "daemon/model/backbone.hpp"
#include "daemon/model/tenant_slot.hpp"
#include "figures.hpp"
#include "processes.hpp"
#include "synth/scenes.hpp"

using namespace nexus;

namespace {

constexpr int kChunk = 4;

struct Dataset {
  model::VLAFeature features;
  torch::Tensor actions;  // [n, kChunk, 2]
};

Dataset make_dataset(model::VLABackbone& backbone, std::uint64_t seed, std::int64_t n) {
  const auto& c = backbone->config();
  synth::SceneGenerator scenes(seed, {.image_size = static_cast<int>(c.image_size)});
  auto images = torch::empty({n, 1, c.image_size, c.image_size, 3}, torch::kUInt8);
  auto tokens = torch::zeros({n, c.max_tokens}, torch::kInt32);
  auto mask = torch::zeros({n, c.max_tokens}, torch::kBool);
  auto actions = torch::empty({n, kChunk, 2});
  for (std::int64_t i = 0; i < n; ++i) {
    const auto s = scenes.next();
    std::memcpy(images[i].data_ptr<std::uint8_t>(), s.image.data(), s.image.size());
    model::tokenize_into(s.instruction, tokens, mask, i);
    const auto a = synth::reach_actions(s, kChunk);
    std::memcpy(actions[i].data_ptr<float>(), a.data(), a.size() * sizeof(float));
  }
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> tok, pooled, m;
  for (std::int64_t i = 0; i < n; i += 128) {  // the frozen backbone runs once per scene
    const auto len = std::min<std::int64_t>(128, n - i);
    auto f = backbone->forward(images.narrow(0, i, len), tokens.narrow(0, i, len), mask.narrow(0, i, len));
    tok.push_back(f.tokens);
    pooled.push_back(f.pooled);
    m.push_back(f.mask);
  }
  return {{torch::cat(tok), torch::cat(pooled), torch::cat(m)}, actions};
}

model::VLAFeature rows(const model::VLAFeature& f, const torch::Tensor& idx) {
  return {f.tokens.index_select(0, idx), f.pooled.index_select(0, idx), f.mask.index_select(0, idx)};
}

// Held-out mean L1 action error after `steps` SFT steps, and the predict-the-mean baseline's.
// Every seed (scenes, head initialisation, batch picks) comes from the test's seed variant k.
std::pair<double, double> train_and_eval(model::VLABackbone& backbone, const std::string& kind, int steps) {
  const std::uint64_t k = test::test_seed();
  const auto train = make_dataset(backbone, 11 + 100 * k, 2048);
  const auto held = make_dataset(backbone, 12 + 100 * k, 256);
  // Source noise at the actions' scale (they span about +-0.3): see HeadSpec::flow_noise.
  model::TenantSlot slot({.kind = kind, .action_dim = 2, .chunk = kChunk, .hidden = 256, .flow_noise = 0.1},
                         {.lr = 1e-3}, backbone->config().dim, 5 + k);
  auto pick = at::make_generator<at::CPUGeneratorImpl>(3 + k);
  for (int s = 0; s < steps; ++s) {
    auto idx = torch::randint(train.actions.size(0), {64}, pick, torch::kLong);
    slot.sft_step(rows(train.features, idx), {}, train.actions.index_select(0, idx));
  }
  const auto pred = slot.predict(held.features, {});
  const double err = (pred - held.actions).abs().mean().item<double>();
  const double base = (held.actions - train.actions.mean(0, true)).abs().mean().item<double>();
  return {err, base};
}

model::VLABackbone pretrained_tiny() {
  const std::string path = test::tiny_weights_path();
  model::VLABackbone b(*model::named_backbone("tiny"));
  model::load_weights(*b, path);
  b->freeze();
  return b;
}

}  // namespace

TEST_CASE("mlp_chunk and flow heads learn ≥5x below the mean baseline on the pretrained tiny backbone",
          "[model][learning]") {
  torch::set_num_threads(2);
  auto backbone = pretrained_tiny();
  for (const std::string kind : {"mlp_chunk", "flow"}) {
    const auto [err, base] = train_and_eval(backbone, kind, 300);
    INFO(kind << ": held-out L1 " << err << " vs mean baseline " << base << " (" << base / err << "x)");
    // Bound: docs/design/learning-margins.md (seed distribution).
    CHECK(test::figure_holds("heads." + kind + ".improvement", base / err, ">=", 5.0));
  }
}

TEST_CASE("the same head on a random frozen backbone stays near the baseline", "[model][learning]") {
  torch::set_num_threads(2);
  model::VLABackbone random(*model::named_backbone("tiny"));
  random->freeze();
  for (const std::string kind : {"mlp_chunk", "flow"}) {
    const auto [err, base] = train_and_eval(random, kind, 300);
    INFO(kind << " on a random backbone: held-out L1 " << err << " vs mean baseline " << base);
    CHECK(test::figure_holds("heads." + kind + ".random_backbone_improvement", base / err, "<", 2.0));
  }
}
