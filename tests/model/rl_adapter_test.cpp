// RL updates of an adapter tenant (docs/design/adapters.md, RL), in-process on the built-in
// backbone: the update re-runs the adapted backbone on the record's observations, so the policy
// loss and the demonstrations' term reach the adapter; the backbone's weights do not move.
// (Through nexusd: tests/integration/adapters_service_test.cpp.)
#include <torch/torch.h>
#undef CHECK
#include <catch2/catch.hpp>

#include <ATen/CPUGeneratorImpl.h>

#include "daemon/model/adapted_backbone.hpp"
#include "daemon/model/tenant_slot.hpp"
#include "daemon/rl/policy_update.hpp"

using namespace nexus;

namespace {

const model::BackboneConfig kTiny = *model::named_backbone("tiny");
constexpr std::int64_t kSteps = 2, kSessions = 4;

// The adapter's parameters, copied (to compare before and after an update).
std::vector<torch::Tensor> adapter_parameters(model::TenantSlot& slot) {
  std::vector<torch::Tensor> out;
  for (auto& item : slot.head().named_parameters())
    if (item.key().rfind("adapter.", 0) == 0) out.push_back(item.value().detach().clone());
  return out;
}
bool same(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!torch::equal(a[i], b[i])) return false;
  return true;
}

struct Fixture {
  std::unique_ptr<model::AdaptableBackbone> backbone = model::make_adaptable_backbone(kTiny, "");
  std::unique_ptr<model::TenantSlot> slot;
  rl::Rollout record;
  rl::DemoTerm demos;

  Fixture() {
    model::HeadSpec head{.kind = "gaussian", .state_dim = 4, .action_dim = 2, .chunk = 1, .hidden = 32};
    head.adapter.rank = 4, head.adapter.alpha = 8;
    head.adapter.layers = kTiny.layers, head.adapter.dim = kTiny.dim, head.adapter.mlp_hidden = kTiny.mlp_ratio * kTiny.dim;
    // No weight decay: a parameter moves only where a loss's gradient reaches it.
    slot = std::make_unique<model::TenantSlot>(head, model::OptimizerConfig{.lr = 1e-2, .weight_decay = 0}, kTiny.dim, 7);
    auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
    const auto h = kTiny.image_size, n = kSteps * kSessions;
    auto images = torch::randint(0, 256, {n, 1, h, h, 3}, gen, torch::kUInt8);
    auto tokens = torch::randint(0, 128, {n, kTiny.max_tokens}, gen, torch::kInt32);
    auto mask = torch::ones({n, kTiny.max_tokens}, torch::kUInt8);
    auto state = torch::randn({n, 4}, gen);
    // The acting pass: the acting adapter, no graph (as the Inference Queue's).
    model::AdapterBatch acting;
    acting.segments.push_back({0, n, slot->acting_adapter()});
    const auto f = backbone->forward_adapted(images, tokens, mask.to(torch::kBool), acting, /*grad=*/false);
    const auto acted = slot->act(f, state);
    auto steps = [](const torch::Tensor& t) { return t.unflatten(0, {kSteps, kSessions}); };  // [T*n, ...] -> [T, n, ...]
    record.pooled = steps(f.pooled.clone()), record.state = steps(state), record.actions = steps(acted.actions);
    record.log_prob = steps(acted.log_prob), record.reward = torch::randn({kSteps, kSessions}, gen);
    record.done = torch::zeros({kSteps, kSessions}), record.alive = torch::ones({kSteps, kSessions});
    record.last_pooled = f.pooled.narrow(0, 0, kSessions).clone(), record.last_state = state.narrow(0, 0, kSessions);
    record.images = steps(images), record.tokens = steps(tokens), record.mask = steps(mask);
    // Demonstrations: other frames, the demonstrator's actions.
    demos.images = torch::randint(0, 256, {3, 1, h, h, 3}, gen, torch::kUInt8);
    demos.tokens = torch::randint(0, 128, {3, kTiny.max_tokens}, gen, torch::kInt32);
    demos.mask = torch::ones({3, kTiny.max_tokens}, torch::kUInt8);
    demos.state = torch::randn({3, 4}, gen), demos.actions = torch::randn({3, 1, 2}, gen).clamp(-1, 1);
    model::AdapterBatch d;
    d.segments.push_back({0, 3, slot->acting_adapter()});
    demos.pooled = backbone->forward_adapted(demos.images, demos.tokens, demos.mask.to(torch::kBool), d, false).pooled.clone();
    demos.weight = 1;
  }

  // nexusd's with_adapted_slot in-process: the tenant's rows alone, its live adapter, the graph kept.
  rl::SlotRunner runner() {
    return [this](const rl::SlotFunction& fn) {
      const rl::AdaptedPooled pass = [this](const torch::Tensor& img, const torch::Tensor& tok, const torch::Tensor& msk) {
        model::AdapterBatch a;
        a.segments.push_back({0, img.size(0), slot->adapter(0)});
        return backbone->forward_adapted(img, tok, msk.to(torch::kBool), a, /*grad=*/true).pooled;
      };
      fn(*slot, pass);
    };
  }
};

std::uint64_t backbone_sum(model::AdaptableBackbone& b) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the weights' bytes
  for (const auto& p : b.module().parameters()) {
    auto c = p.contiguous();
    const auto* bytes = static_cast<const std::uint8_t*>(c.data_ptr());
    for (std::size_t i = 0; i < c.nbytes(); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
  }
  return h;
}

}  // namespace

TEST_CASE("an adapter tenant's PPO and GRPO updates re-run the adapted backbone: the loss reaches the adapter, the "
          "first minibatch clips no ratio, the backbone stays as it was",
          "[model][rl][adapters]") {
  Fixture fx;
  const auto backbone_before = backbone_sum(*fx.backbone);
  const auto adapter_before = adapter_parameters(*fx.slot);
  REQUIRE(!adapter_before.empty());
  rl::ValueHead value(kTiny.dim, 4, 32, /*seed=*/1);
  torch::optim::AdamW value_opt(value->parameters(), torch::optim::AdamWOptions(1e-3));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  // One minibatch of the whole record: the re-run features are the acting ones (up to rounding), so
  // no ratio is clipped.
  rl::UpdateConfig c;
  c.epochs = 1, c.minibatch = kSteps * kSessions;
  const auto s = rl::ppo_update(fx.runner(), value, value_opt, fx.record, c, 1.0, gen);
  CHECK(s.clip_fraction == 0);
  CHECK(std::isfinite(s.policy_loss));
  const auto after_ppo = adapter_parameters(*fx.slot);
  CHECK_FALSE(same(adapter_before, after_ppo));  // the policy loss reached the adapter
  CHECK(backbone_sum(*fx.backbone) == backbone_before);

  // GRPO on the same steps (one group of all four sessions).
  fx.record.group_size = kSessions;
  fx.record.episode_return = torch::tensor({1.0f, 0.0f, 2.0f, -1.0f});
  rl::grpo_update(fx.runner(), fx.record, c, 1.0, gen);
  CHECK_FALSE(same(after_ppo, adapter_parameters(*fx.slot)));
  CHECK(backbone_sum(*fx.backbone) == backbone_before);

  // A record without observations (a head-only tenant's) leaves the adapter alone: the contrast
  // that shows the re-run is what moves it (a fresh slot: Adam's moments would move it anyway).
  Fixture fresh;
  const auto before_plain = adapter_parameters(*fresh.slot);
  auto plain = fresh.record;
  plain.images = plain.tokens = plain.mask = torch::Tensor();
  rl::ppo_update(fresh.runner(), value, value_opt, plain, c, 1.0, gen);
  CHECK(same(before_plain, adapter_parameters(*fresh.slot)));
}

TEST_CASE("an adapter tenant's behaviour-cloning term re-runs the demonstrations' frames through its adapter",
          "[model][rl][adapters]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  rl::UpdateConfig c;
  c.epochs = 1, c.minibatch = kSteps * kSessions;
  // Weight 0 on the policy loss: only the demonstrations' term can move anything. Each case on a
  // fresh slot (Adam's moments from an earlier step would move the adapter by themselves).
  auto adapter_moved = [&](bool frames) {
    Fixture fx;
    fx.record.group_size = kSessions;
    fx.record.episode_return = torch::tensor({1.0f, 0.0f, 2.0f, -1.0f});
    auto demos = fx.demos;
    if (!frames) demos.images = demos.tokens = demos.mask = torch::Tensor();  // stored features alone
    const auto before = adapter_parameters(*fx.slot);
    const auto s = rl::grpo_update(fx.runner(), fx.record, c, /*weight=*/0.0, gen, &demos);
    CHECK(s.demo_loss != 0);  // the term was computed (a gaussian NLL may have either sign)
    return !same(before, adapter_parameters(*fx.slot));
  };
  CHECK(adapter_moved(true));
  CHECK_FALSE(adapter_moved(false));
}

TEST_CASE("an adapter tenant's update minibatch cut into turns steps once and equals it whole, and a stop between "
          "its parts applies nothing",
          "[model][rl][adapters][turns]") {
  rl::UpdateConfig c;
  // One minibatch, one optimizer step: after a second, AdamW's m / (sqrt(v) + eps) magnifies
  // rounding in the gradients that are near zero there (seen: 1e-5 on a step of 1e-2).
  c.epochs = 1, c.minibatch = kSteps * kSessions, c.entropy = 0.01;
  // GRPO on one group of the four sessions, the behaviour-cloning term on: every part of the loss.
  auto run = [&](Fixture& fx, const rl::UpdateTurns& turns, int& calls, int stop_at = -1) {
    fx.record.group_size = kSessions;
    fx.record.episode_return = torch::tensor({1.0f, 0.0f, 2.0f, -1.0f});
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    const auto inner = fx.runner();
    const rl::SlotRunner counted = [&](const rl::SlotFunction& fn) {
      if (calls++ == stop_at) throw std::runtime_error("stopped");  // as RlJob's on_slot throws StopRequested
      inner(fn);
    };
    return rl::grpo_update(counted, fx.record, c, 1.0, gen, &fx.demos, turns);
  };
  auto all_parameters = [](model::TenantSlot& slot) {
    std::vector<torch::Tensor> out;
    for (auto& p : slot.head().parameters()) out.push_back(p.detach().clone());
    return out;
  };
  Fixture whole_fx, cut_fx;
  int whole_calls = 0, cut_calls = 0;
  const auto whole = run(whole_fx, {}, whole_calls);
  // A budget no pass fits: every turn holds the least part, a quarter of the budget's least (an
  // adapted part's floor): 3 rows, 3 + 3 + 2 of each 8-row minibatch.
  sched::TurnSizer sizer;
  const rl::UpdateTurns tight{[] { return sched::TurnBudget{1e-9, 12}; }, &sizer};
  const auto cut = run(cut_fx, tight, cut_calls);
  CHECK(whole_calls == 1);
  CHECK(cut_calls == 3);  // one turn per part
  CHECK(whole.split_minibatches == 0);
  CHECK(cut.split_minibatches == 1);
  CHECK(sizer.measured());  // the parts' passes were measured for the next update's sizing
  CHECK(cut.policy_loss == Approx(whole.policy_loss).epsilon(1e-5).margin(1e-6));
  CHECK(cut.demo_loss == Approx(whole.demo_loss).epsilon(1e-5).margin(1e-6));
  CHECK(cut.entropy == Approx(whole.entropy).epsilon(1e-6));
  CHECK(cut.clip_fraction == Approx(whole.clip_fraction).margin(1e-9));
  CHECK(whole_fx.slot->steps() == cut_fx.slot->steps());  // one optimizer step a minibatch either way
  const auto a = all_parameters(*whole_fx.slot), b = all_parameters(*cut_fx.slot);
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    INFO("parameter " << i << " of " << a.size() << ", " << a[i].sizes() << ": largest difference "
                      << (a[i] - b[i]).abs().max().item<double>() << " on values up to " << a[i].abs().max().item<double>());
    CHECK(torch::allclose(a[i], b[i], 1e-5, 1e-6));
  }
  // The tiny backbone's features move with the adapter: the cut path had to reach it.
  CHECK_FALSE(same(adapter_parameters(*cut_fx.slot), adapter_parameters(*Fixture().slot)));

  // A stop after the first part (the second part's turn refused): no step, the slot as it was.
  Fixture stopped_fx;
  const auto before = all_parameters(*stopped_fx.slot);
  int calls = 0;
  CHECK_THROWS_WITH(run(stopped_fx, tight, calls, /*stop_at=*/1), "stopped");
  CHECK(stopped_fx.slot->steps() == 0);
  CHECK(same(before, all_parameters(*stopped_fx.slot)));
}
