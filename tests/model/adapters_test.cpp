// Per-tenant adapters (LoRA) on the built-in backbone (docs/design/adapters.md): the segmented
// delta against the materialised W + s A B, a grouped pass of mixed tenants against each alone
// (features and gradients), the frozen backbone, and one tenant's poison against another's digest.
// LibTorch first: c10 defines a glog-style CHECK that aborts; Catch must define the last one.
#include <torch/torch.h>
#undef CHECK
#include <catch2/catch.hpp>

#include <filesystem>
#include <limits>
#include <unistd.h>

#include "daemon/model/adapted_backbone.hpp"
#include "daemon/model/tenant_slot.hpp"

using namespace nexus;

namespace {

const model::BackboneConfig kTiny = *model::named_backbone("tiny");

model::AdapterSpec adapter(std::int64_t rank, std::uint32_t targets = 0, std::uint32_t blocks = 0) {
  model::AdapterSpec a;
  a.rank = rank, a.alpha = 2.0 * static_cast<double>(rank), a.targets = targets, a.blocks = blocks;
  a.layers = kTiny.layers, a.dim = kTiny.dim, a.mlp_hidden = kTiny.mlp_ratio * kTiny.dim;
  return a;
}

// A slot whose adapter already does something: a fresh adapter's B is zero (the identity).
std::unique_ptr<model::TenantSlot> slot_with(const model::AdapterSpec& a, std::uint64_t seed, double lr = 1e-3) {
  model::HeadSpec head{.kind = "mlp_chunk", .action_dim = 2, .chunk = 1, .hidden = 32};
  head.adapter = a;
  auto slot = std::make_unique<model::TenantSlot>(head, model::OptimizerConfig{.lr = lr}, kTiny.dim, seed);
  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed + 100);
  for (auto& item : slot->head().named_parameters())
    if (item.key().find("_B") != std::string::npos) item.value().copy_(torch::randn(item.value().sizes(), gen) * 0.05);
  return slot;
}

struct Inputs {
  torch::Tensor images, tokens, mask;
  Inputs rows(std::int64_t from, std::int64_t n) const {
    return {images.narrow(0, from, n), tokens.narrow(0, from, n), mask.narrow(0, from, n)};
  }
};

Inputs inputs(std::int64_t n, std::uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  Inputs in{torch::randint(0, 256, {n, 1, kTiny.image_size, kTiny.image_size, 3}, gen, torch::kUInt8),
            torch::randint(0, 256, {n, kTiny.max_tokens}, gen, torch::kInt32),
            torch::ones({n, kTiny.max_tokens}, torch::kBool)};
  in.mask.narrow(1, 20, kTiny.max_tokens - 20).fill_(false);
  return in;
}

// |a - b| <= 1e-5 relative to b's scale (at least 1): fp32 sums in another order.
bool close(const torch::Tensor& a, const torch::Tensor& b) {
  const double scale = std::max(1.0, b.abs().max().item<double>());
  return (a - b).abs().max().item<double>() <= 1e-5 * scale;
}

// A loss of the tenant's features that reads both the pooled feature and the tokens.
torch::Tensor probe_loss(const model::VLAFeature& f, std::uint64_t seed) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto w = torch::randn({f.pooled.size(1)}, gen);
  return (f.pooled * w).sum() + f.tokens.pow(2).mean();
}

model::VLAFeature rows_of(const model::VLAFeature& f, std::int64_t from, std::int64_t n) {
  return {f.tokens.narrow(0, from, n), f.pooled.narrow(0, from, n), f.mask.narrow(0, from, n)};
}

}  // namespace

TEST_CASE("the segmented LoRA delta is each segment's scale (x A) B, and zero on rows of no segment",
          "[model][adapters]") {
  torch::manual_seed(3);
  const auto x = torch::randn({6, 5, 12});
  const auto w = torch::randn({7, 12});
  const std::vector<std::int64_t> first = {0, 3, 4}, rows = {2, 1, 2};
  const std::vector<torch::Tensor> as = {torch::randn({12, 3}), torch::randn({12, 1}), torch::randn({12, 5})};
  const std::vector<torch::Tensor> bs = {torch::randn({3, 7}), torch::randn({1, 7}), torch::randn({5, 7})};
  const std::vector<double> scales = {2.0, 0.5, 1.0};
  const auto delta = model::segmented_lora_delta(x, first, rows, as, bs, scales, 7);
  REQUIRE(delta.sizes().vec() == std::vector<std::int64_t>({6, 5, 7}));
  CHECK(torch::equal(delta[2], torch::zeros({5, 7})));  // row 2 is in no segment: exact zeros
  for (std::size_t k = 0; k < first.size(); ++k) {
    const auto xs = x.narrow(0, first[k], rows[k]);
    // The materialised adapted weight, which the grouped pass never forms.
    const auto merged = w.t() + scales[k] * torch::matmul(as[k], bs[k]);
    CHECK(close(torch::matmul(xs, w.t()) + delta.narrow(0, first[k], rows[k]), torch::matmul(xs, merged)));
  }
  // Segments covering the batch in order (no gather of rows), of several samples each or one
  // sample each (no gather of weights), with scales that differ and scales that do not.
  for (const auto& layout : {std::vector<std::int64_t>{2, 1, 3}, std::vector<std::int64_t>{1, 1, 1, 1, 1, 1}})
    for (const bool same_scale : {false, true}) {
      std::vector<std::int64_t> at;
      std::vector<torch::Tensor> a2, b2;
      std::vector<double> s2;
      std::int64_t row = 0;
      for (std::size_t k = 0; k < layout.size(); ++k) {
        at.push_back(row), row += layout[k];
        const auto r = static_cast<std::int64_t>(k % 3) + 1;
        a2.push_back(torch::randn({12, r})), b2.push_back(torch::randn({r, 7}));
        s2.push_back(same_scale ? 1.5 : 0.5 * static_cast<double>(k + 1));
      }
      INFO("segments " << layout.size() << (same_scale ? ", one scale" : ", scales differ"));
      const auto d2 = model::segmented_lora_delta(x, at, layout, a2, b2, s2, 7);
      for (std::size_t k = 0; k < layout.size(); ++k) {
        const auto xs = x.narrow(0, at[k], layout[k]);
        CHECK(close(d2.narrow(0, at[k], layout[k]), s2[k] * torch::matmul(torch::matmul(xs, a2[k]), b2[k])));
      }
    }
}

TEST_CASE("a grouped pass of four adapters of different ranks and two head-only tenants equals each alone, "
          "features and gradients: the backbone stays frozen and bitwise unchanged",
          "[model][adapters][equivalence]") {
  model::VLABackbone bb(kTiny);
  bb->freeze();
  std::vector<torch::Tensor> before;
  for (const auto& p : bb->parameters()) before.push_back(p.clone());
  // Members in pass order: (rows, slot or none). Ranks 1, 4, 16 and 64 on different projections
  // and blocks, two head-only tenants between them.
  std::vector<std::unique_ptr<model::TenantSlot>> slots;
  slots.push_back(slot_with(adapter(1), 1));
  slots.push_back(slot_with(adapter(4, model::AdapterSpec::kAdaptQ | model::AdapterSpec::kAdaptV), 2));
  slots.push_back(slot_with(adapter(16, model::AdapterSpec::kAdaptMlpIn | model::AdapterSpec::kAdaptMlpOut, 0b10), 3));
  slots.push_back(slot_with(adapter(64, 0, 0b01), 4));
  struct Member {
    std::int64_t rows;
    model::TenantSlot* slot;
  };
  const std::vector<Member> members = {{2, slots[0].get()}, {1, nullptr},         {3, slots[1].get()},
                                       {1, slots[2].get()}, {2, nullptr},         {2, slots[3].get()}};
  std::int64_t total = 0;
  for (const auto& m : members) total += m.rows;
  const auto in = inputs(total, 9);

  model::AdapterBatch batch;
  std::int64_t offset = 0;
  for (const auto& m : members) {
    if (m.slot) batch.segments.push_back({offset, m.rows, m.slot->adapter()});
    offset += m.rows;
  }
  torch::AutoGradMode grad(true);
  const auto grouped = model::AdaptedForward(*bb)(in.images, in.tokens, in.mask, batch);
  {  // Without autograd the deltas are added into the base outputs in place (lora.cpp): the same.
    torch::NoGradGuard no_grad;
    const auto inference = model::AdaptedForward(*bb)(in.images, in.tokens, in.mask, batch);
    CHECK(close(inference.tokens, grouped.tokens.detach()));
  }
  std::vector<torch::Tensor> losses;
  offset = 0;
  for (std::size_t i = 0; i < members.size(); ++i) {
    if (members[i].slot) losses.push_back(probe_loss(rows_of(grouped, offset, members[i].rows), i));
    offset += members[i].rows;
  }
  torch::autograd::backward(losses);  // one backward for the group, as the executor runs it
  std::vector<std::vector<torch::Tensor>> grouped_grads;
  for (auto& s : slots) {
    grouped_grads.emplace_back();
    for (auto& p : s->head().parameters()) {
      grouped_grads.back().push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
      if (p.grad().defined()) p.mutable_grad() = torch::Tensor();
    }
  }

  offset = 0;
  for (std::size_t i = 0; i < members.size(); ++i) {
    const auto& m = members[i];
    const auto alone_in = in.rows(offset, m.rows);
    const auto mine = rows_of(grouped, offset, m.rows);
    offset += m.rows;
    INFO("member " << i);
    if (!m.slot) {
      torch::NoGradGuard no_grad;
      const auto alone = bb->forward(alone_in.images, alone_in.tokens, alone_in.mask);
      CHECK(close(mine.pooled, alone.pooled));
      CHECK(close(mine.tokens, alone.tokens));
      continue;
    }
    model::AdapterBatch own;
    own.segments.push_back({0, m.rows, m.slot->adapter()});
    const auto alone = model::AdaptedForward(*bb)(alone_in.images, alone_in.tokens, alone_in.mask, own);
    CHECK(close(mine.pooled, alone.pooled));
    CHECK(close(mine.tokens, alone.tokens));
    {
      torch::NoGradGuard no_grad;  // one segment, in place: a matmul and a broadcast B
      CHECK(close(model::AdaptedForward(*bb)(alone_in.images, alone_in.tokens, alone_in.mask, own).tokens,
                  alone.tokens.detach()));
    }
    probe_loss(alone, i).backward();
    const auto k = static_cast<std::size_t>(std::find_if(slots.begin(), slots.end(), [&](auto& s) { return s.get() == m.slot; }) - slots.begin());
    const auto params = m.slot->head().parameters();
    std::size_t adapter_grads = 0;
    for (std::size_t j = 0; j < params.size(); ++j) {
      const auto& g = params[j].grad();
      REQUIRE(g.defined() == grouped_grads[k][j].defined());
      if (!g.defined()) continue;  // the head's own parameters: not in this probe's loss
      ++adapter_grads;
      CHECK(close(grouped_grads[k][j], g));
    }
    CHECK(adapter_grads == m.slot->adapter()->parameters().size());
  }
  const auto after = bb->parameters();
  for (std::size_t i = 0; i < before.size(); ++i) {
    CHECK(torch::equal(after[i], before[i]));
    CHECK_FALSE(after[i].grad().defined());
  }
}

TEST_CASE("a new adapter changes nothing, and an adapter on blocks or projections it does not target adds no "
          "parameters there", "[model][adapters]") {
  model::VLABackbone bb(kTiny);
  bb->freeze();
  const auto in = inputs(3, 4);
  model::HeadSpec head{.kind = "gaussian", .action_dim = 2, .hidden = 16};
  head.adapter = adapter(8, model::AdapterSpec::kAdaptO, 0b10);
  model::TenantSlot slot(head, {}, kTiny.dim, 1);
  const auto* a = slot.adapter();
  REQUIRE(a != nullptr);
  CHECK(a->parameters().size() == 2);  // block 1's o: A and B
  CHECK_FALSE(a->a(0, model::Projection::O).defined());
  CHECK(a->a(1, model::Projection::O).defined());
  CHECK(model::adapter_parameters(head.adapter) == 8 * (kTiny.dim + kTiny.dim));
  model::AdapterBatch batch;
  batch.segments.push_back({0, 3, a});
  torch::NoGradGuard no_grad;
  CHECK(torch::equal(model::AdaptedForward(*bb)(in.images, in.tokens, in.mask, batch).pooled,
                     bb->forward(in.images, in.tokens, in.mask).pooled));
  CHECK_THROWS_AS(model::LoraAdapterImpl(adapter(65)), std::invalid_argument);
  CHECK_THROWS_AS(model::LoraAdapterImpl(adapter(4, 64)), std::invalid_argument);
  CHECK_THROWS_AS(model::LoraAdapterImpl(adapter(4, 0, 0b100)), std::invalid_argument);  // tiny has 2 blocks
}

namespace {

// Trains x, y (adapters) and z (head-only) in grouped passes as the executor does: one forward,
// one backward for the adapter tenants, then each its own update. Returns y's digest.
model::TenantSlot::Digest train_beside(model::TenantSlot& x, model::TenantSlot& y, model::TenantSlot& z,
                                       const Inputs& x_in, int steps, int* x_refused) {
  model::VLABackbone bb(kTiny);
  bb->freeze();
  const auto y_in = inputs(3, 21), z_in = inputs(2, 22);
  const auto images = torch::cat({x_in.images, y_in.images, z_in.images});
  const auto tokens = torch::cat({x_in.tokens, y_in.tokens, z_in.tokens});
  const auto mask = torch::cat({x_in.mask, y_in.mask, z_in.mask});
  const auto actions = torch::full({5, 1, 2}, 0.25);
  for (int step = 0; step < steps; ++step) {
    model::AdapterBatch batch;
    batch.segments = {{0, 3, x.adapter()}, {3, 3, y.adapter()}};
    torch::AutoGradMode grad(true);
    const auto f = model::AdaptedForward(*bb)(images, tokens, mask, batch);
    auto lx = x.step_loss(rows_of(f, 0, 3), {}, actions.narrow(0, 0, 3));
    auto ly = y.step_loss(rows_of(f, 3, 3), {}, actions.narrow(0, 0, 3));
    torch::autograd::backward({lx, ly});
    try {
      x.finish_deferred(lx);
    } catch (const model::SlotError&) {
      ++*x_refused;
    }
    y.finish_deferred(ly);
    const model::VLAFeature plain{f.tokens.detach(), f.pooled.detach(), f.mask};
    z.sft_step(rows_of(plain, 6, 2), {}, actions.narrow(0, 0, 2));
  }
  return y.digest();
}

}  // namespace

TEST_CASE("one tenant's NaN adapter, huge learning rate or saturated input leaves a neighbour's adapter bitwise "
          "as it would be", "[model][adapters][isolation]") {
  const auto clean_in = inputs(3, 20);
  int refused = 0;
  auto x = slot_with(adapter(4), 1), y = slot_with(adapter(16), 2), z = slot_with({}, 3);
  const auto expected = train_beside(*x, *y, *z, clean_in, 4, &refused);
  CHECK(refused == 0);

  // A huge learning rate on saturated images: x's steps go through (or are refused), y's do not move.
  auto poisoned_in = clean_in;
  poisoned_in.images = torch::full_like(clean_in.images, 255);
  {
    auto x2 = slot_with(adapter(4), 1, /*lr=*/9.0), y2 = slot_with(adapter(16), 2), z2 = slot_with({}, 3);
    const auto got = train_beside(*x2, *y2, *z2, poisoned_in, 4, &refused);
    CHECK(x2->digest().parameters != x->digest().parameters);
    CHECK(got.parameters == expected.parameters);  // y: bitwise the run beside a healthy x
    CHECK(got.optimizer == expected.optimizer);
  }
  // x's adapter poisoned with a NaN: each of its steps is refused, no update made; y unmoved.
  refused = 0;
  auto x3 = slot_with(adapter(4), 1), y3 = slot_with(adapter(16), 2), z3 = slot_with({}, 3);
  {
    torch::NoGradGuard no_grad;
    for (auto& item : x3->head().named_parameters())
      if (item.key().find("b1_o_B") != std::string::npos) item.value()[0][0] = std::numeric_limits<float>::quiet_NaN();
  }
  const auto x_before = x3->digest();
  const auto got = train_beside(*x3, *y3, *z3, clean_in, 4, &refused);
  CHECK(refused == 4);
  CHECK(x3->digest().parameters == x_before.parameters);
  CHECK(got.parameters == expected.parameters);
  CHECK(got.optimizer == expected.optimizer);
  CHECK(got.step == 4);
}

TEST_CASE("an adapter is published, checkpointed and loaded with its head", "[model][adapters]") {
  auto slot = slot_with(adapter(8, 0, 0b01), 5);
  const auto in = inputs(4, 30);
  model::VLABackbone bb(kTiny);
  bb->freeze();
  auto step = [&] {
    model::AdapterBatch batch;
    batch.segments = {{0, 4, slot->adapter()}};
    torch::AutoGradMode grad(true);
    const auto loss = slot->step_loss(model::AdaptedForward(*bb)(in.images, in.tokens, in.mask, batch), {}, torch::ones({4, 1, 2}));
    loss.backward();
    return slot->finish_deferred(loss);
  };
  step();
  const auto v = slot->publish();
  const auto b_at_v = slot->adapter(v)->b(0, model::Projection::Q).clone();
  step();
  CHECK(torch::equal(slot->adapter(v)->b(0, model::Projection::Q), b_at_v));  // the version is pinned as published
  CHECK_FALSE(torch::equal(slot->adapter()->b(0, model::Projection::Q), b_at_v));
  CHECK(slot->acting_adapter() == slot->adapter(v));

  const auto dir = std::filesystem::temp_directory_path() / ("nexus_adapter_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  slot->save((dir / "slot").string());
  auto loaded = model::TenantSlot::load((dir / "slot").string(), kTiny.dim);
  // A checkpoint of an adapter made for another backbone's width is refused, not misapplied.
  CHECK_THROWS_WITH(model::TenantSlot::load((dir / "slot").string(), 64), Catch::Contains("width"));
  std::filesystem::remove_all(dir);
  CHECK(loaded.slot->head().spec().adapter.rank == 8);
  CHECK(loaded.slot->head().spec().adapter.blocks == 0b01);
  CHECK(loaded.slot->digest().parameters == slot->digest().parameters);
  CHECK(loaded.slot->digest().optimizer == slot->digest().optimizer);
  CHECK(torch::equal(loaded.slot->adapter(v)->b(0, model::Projection::Q), b_at_v));
}
