// Heads learn on top of the frozen, pretrained embedded backbone; on a random backbone they do
// not. Task: a chunk of actions toward the object the instruction names (synth::reach_actions).
// LibTorch first: c10 defines a glog-style CHECK that aborts; Catch must define the last one.
#include <torch/torch.h>
#undef CHECK
#include <catch2/catch.hpp>

#include <cstdio>
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

// The downstream targets. Reach: a chunk from the image centre to the named object, an affine
// function of what pretraining regressed (the named object's position). Relation: the
// instruction names two objects, "move the red square to the blue circle", and the chunk goes
// from the first to the second: pretraining never saw two named objects, never regressed a
// second one's position, and never a difference of two.
enum class Target { Reach, Relation };

void scene_target(const synth::Scene& s, Target target, std::string& instruction, std::vector<float>& actions) {
  if (target == Target::Reach) {
    instruction = s.instruction;
    actions = synth::reach_actions(s, kChunk);
    return;
  }
  const auto& from = s.objects[static_cast<std::size_t>(s.target)];
  const auto& to = s.objects[(static_cast<std::size_t>(s.target) + 1) % s.objects.size()];
  instruction = std::string("move the ") + synth::color_name(from.color) + " " + synth::shape_name(from.shape) +
                " to the " + synth::color_name(to.color) + " " + synth::shape_name(to.shape);
  actions.assign(kChunk * 2, 0.0f);
  for (int k = 0; k < kChunk; ++k) {
    actions[static_cast<std::size_t>(2 * k)] = (to.x - from.x) * static_cast<float>(k + 1) / kChunk;
    actions[static_cast<std::size_t>(2 * k + 1)] = (to.y - from.y) * static_cast<float>(k + 1) / kChunk;
  }
}

Dataset make_dataset(model::VLABackbone& backbone, std::uint64_t seed, std::int64_t n, Target target = Target::Reach) {
  const auto& c = backbone->config();
  synth::SceneGenerator scenes(seed, {.image_size = static_cast<int>(c.image_size)});
  auto images = torch::empty({n, 1, c.image_size, c.image_size, 3}, torch::kUInt8);
  auto tokens = torch::zeros({n, c.max_tokens}, torch::kInt32);
  auto mask = torch::zeros({n, c.max_tokens}, torch::kBool);
  auto actions = torch::empty({n, kChunk, 2});
  std::string instruction;
  std::vector<float> a;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto s = scenes.next();
    std::memcpy(images[i].data_ptr<std::uint8_t>(), s.image.data(), s.image.size());
    scene_target(s, target, instruction, a);
    model::tokenize_into(instruction, tokens, mask, i);
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
std::pair<double, double> train_and_eval(model::VLABackbone& backbone, const std::string& kind, int steps,
                                         Target target = Target::Reach) {
  const std::uint64_t k = test::test_seed();
  const auto train = make_dataset(backbone, 11 + 100 * k, 2048, target);
  const auto held = make_dataset(backbone, 12 + 100 * k, 256, target);
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

TEST_CASE("pretraining transfers to a target it never regressed: the vector between two named objects",
          "[model][learning]") {
  torch::set_num_threads(2);
  auto pretrained = pretrained_tiny();
  model::VLABackbone random(*model::named_backbone("tiny"));
  random->freeze();
  const auto [err, base] = train_and_eval(pretrained, "mlp_chunk", 300, Target::Relation);
  const auto [rerr, rbase] = train_and_eval(random, "mlp_chunk", 300, Target::Relation);
  INFO("relation: pretrained held-out L1 " << err << ", random backbone " << rerr << ", mean baseline " << base);
  std::fprintf(stderr, "relation: pretrained %.2fx below the mean baseline, random backbone %.2fx\n", base / err,
               rbase / rerr);
  // Measured over seeds 0-5: pretrained 1.19-1.27x, random 0.99-1.00x (docs/design/learning-margins.md).
  // Weak, and honestly so: pooled features carry mostly one named object, so the head learns the
  // part of the vector the first object gives. The random backbone in the same test is the
  // mutation: it gives nothing.
  CHECK(test::figure_holds("transfer.relation.improvement", base / err, ">=", 1.10));
  CHECK(test::figure_holds("transfer.relation.over_random", (base / err) / (rbase / rerr), ">=", 1.10));
}
