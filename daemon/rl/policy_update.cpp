#include "daemon/rl/policy_update.hpp"

#include <chrono>
#include <optional>

#include "daemon/model/devices.hpp"

namespace nexus::rl {

ValueHeadImpl::ValueHeadImpl(std::int64_t feature_dim, std::int64_t state_dim, std::int64_t hidden, std::uint64_t seed) {
  const auto lock = model::seed_global_generator(seed);
  net_ = register_module("net", torch::nn::Sequential(torch::nn::Linear(feature_dim + state_dim, hidden),
                                                      torch::nn::GELU(), torch::nn::Linear(hidden, hidden),
                                                      torch::nn::GELU(), torch::nn::Linear(hidden, 1)));
}

torch::Tensor ValueHeadImpl::forward(const torch::Tensor& pooled, const torch::Tensor& state) {
  auto x = state.defined() && state.size(-1) > 0 ? torch::cat({pooled, state}, -1) : pooled;
  return net_->forward(x).squeeze(-1);
}

std::pair<torch::Tensor, torch::Tensor> gae(const torch::Tensor& reward, const torch::Tensor& value,
                                            const torch::Tensor& done, const torch::Tensor& last_value,
                                            double gamma, double lambda, const torch::Tensor& cut_value) {
  const auto T = reward.size(0);
  auto adv = torch::zeros_like(reward);
  auto running = torch::zeros_like(last_value);
  auto next_value = last_value;
  for (auto t = T - 1; t >= 0; --t) {
    auto live = 1.0 - done[t];  // no bootstrap across an episode's end
    auto bootstrap = next_value * live;  // an episode's end bootstraps only if it was cut short
    if (cut_value.defined()) bootstrap = bootstrap + cut_value[t];
    auto delta = reward[t] + gamma * bootstrap - value[t];
    running = delta + gamma * lambda * live * running;
    adv[t] = running;
    next_value = value[t];
  }
  return {adv, adv + value};
}

torch::Tensor group_relative(const torch::Tensor& episode_return, std::int64_t group_size) {
  auto g = episode_return.view({-1, group_size});
  auto centred = g - g.mean(1, true);
  return (centred / (g.std(1, /*unbiased=*/false, true) + 1e-6)).view({-1});
}

torch::Tensor clipped_surrogate(const torch::Tensor& log_prob, const torch::Tensor& old_log_prob,
                                const torch::Tensor& advantage, double clip) {
  auto ratio = torch::exp(log_prob - old_log_prob);
  return torch::min(ratio * advantage, torch::clamp(ratio, 1 - clip, 1 + clip) * advantage);
}

torch::Tensor demo_term(model::ActionHead& head, const DemoTerm& demos, torch::Device device, at::Generator& gen,
                        const AdaptedPooled& adapted) {
  const bool rerun = demos.images.defined();
  if (rerun && !adapted) throw std::runtime_error("an adapter tenant's demonstrations need the adapted pass");
  const model::VLAFeature f{{}, rerun ? adapted(demos.images, demos.tokens, demos.mask) : demos.pooled.to(device), {}};
  return head.loss(f, demos.state.to(device), demos.actions.to(device), gen);  // the head's own SFT loss
}

namespace {

// An adapter tenant's observations, one row per flattened sample (Rollout::images).
struct Observed {
  torch::Tensor images, tokens, mask;
  bool defined() const { return images.defined(); }
  Observed rows(const torch::Tensor& idx) const {
    return {images.index_select(0, idx), tokens.index_select(0, idx), mask.index_select(0, idx)};
  }
};

// A minibatch's demonstration rows (DemoTerm): at most as many as the minibatch has, rotating
// through the update's batch, so the term never costs more than the minibatch itself.
DemoTerm demo_rows(const DemoTerm& demos, std::int64_t wanted, std::int64_t& at) {
  const auto rows = demos.pooled.size(0), m = std::min(rows, wanted);
  auto take = (torch::arange(m, torch::kLong) + at) % rows;
  at = (at + m) % rows;
  DemoTerm part;
  part.pooled = demos.pooled.index_select(0, take);
  part.state = demos.state.index_select(0, take);
  part.actions = demos.actions.index_select(0, take);
  part.weight = demos.weight;
  if (demos.images.defined())
    part.images = demos.images.index_select(0, take), part.tokens = demos.tokens.index_select(0, take),
    part.mask = demos.mask.index_select(0, take);
  return part;
}

DemoTerm narrow(const DemoTerm& d, std::int64_t from, std::int64_t n) {
  DemoTerm part = d;
  for (auto* t : {&part.pooled, &part.state, &part.actions, &part.images, &part.tokens, &part.mask})
    if (t->defined()) *t = t->narrow(0, from, n);
  return part;
}

// Rows of a minibatch an update turn may hold (0: the whole minibatch in one turn).
std::int64_t rows_per_turn(const UpdateTurns& turns, bool adapted) {
  if (!adapted || !turns.budget || turns.sizer == nullptr) return 0;  // head-only: milliseconds
  const auto budget = turns.budget();
  // The floor keeps an SFT micro-batch from being mostly a pass's fixed part; a part here runs a
  // backward through the backbone for each row, so its fixed part weighs less: a quarter of it.
  const auto least = std::max<std::int64_t>(1, budget.least / 4);
  return budget.seconds > 0 ? turns.sizer->samples_within(budget.seconds, least) : 0;
}

// The clipped surrogate over flattened samples with per-sample advantages; shared by both. With
// observations, each minibatch's features come from the adapted pass instead of `pooled`, and a
// minibatch bigger than a turn holds runs as parts, one turn each, stepped once after the last.
UpdateStats clipped_epochs(const SlotRunner& on_slot, const torch::Tensor& pooled, const Observed& seen,
                           const torch::Tensor& state, const torch::Tensor& actions, const torch::Tensor& old_log_prob,
                           const torch::Tensor& adv, const UpdateConfig& c, double weight, at::Generator& gen,
                           const std::function<double(const torch::Tensor&)>& value_step, const DemoTerm* demos,
                           const UpdateTurns& turns) {
  UpdateStats s;
  const auto n = pooled.size(0);
  const model::VLAFeature none{};  // gaussian heads read only pooled: see Rollout
  // Progress figures summed where the head is, in double, and read once at the end: the
  // minibatch's one host synchronisation is its step's (tenant_slot.cpp).
  torch::Tensor clipped_sum, entropy_sum, demo_sum;
  std::int64_t demo_at = 0;
  auto add = [](torch::Tensor& sum, const torch::Tensor& x) {
    auto d = x.detach().to(torch::kDouble);
    sum = sum.defined() ? sum + d : d;
  };
  // The loss of `rows` of a minibatch: `share` of the minibatch's mean (1 when whole), and of its
  // demonstrations' term `demo` (`demo_share` of it). Parts' losses and gradients add up to the
  // whole minibatch's.
  auto loss_of = [&](model::ActionHead& head, torch::Device device, const AdaptedPooled& adapted,
                     const torch::Tensor& rows, double share, const DemoTerm* demo, double demo_share) {
    if (seen.defined() && !adapted) throw std::runtime_error("an adapter tenant's update needs the adapted pass");
    // The rollout is on the host; the rows go where the slot's head is.
    auto pick = [&](const torch::Tensor& t) { return t.index_select(0, rows).to(device); };
    // An adapter tenant's features as its live adapter makes them now (the graph reaches the
    // adapter); a head-only tenant's as they were when it acted (the same: a frozen backbone).
    torch::Tensor features;
    if (seen.defined()) {
      const auto mine = seen.rows(rows);
      features = adapted(mine.images, mine.tokens, mine.mask);
    } else {
      features = pick(pooled);
    }
    model::VLAFeature f{none.tokens, features, none.mask};
    auto out = model::gaussian_outputs(head, f, pick(state));
    auto lp = model::gaussian_log_prob(out, pick(actions));
    auto old = pick(old_log_prob);
    auto surrogate = clipped_surrogate(lp, old, pick(adv), c.clip);
    auto ent = model::gaussian_entropy(out);
    add(clipped_sum, ((torch::exp(lp - old) - 1).abs() > c.clip).to(torch::kFloat32).mean() * share);
    add(entropy_sum, ent * share);
    auto loss = weight * (-surrogate.mean() - c.entropy * ent) * share;
    if (demo == nullptr || demo->state.size(0) == 0) return loss;
    auto bc = demo_term(head, *demo, device, gen, adapted) * demo_share;
    add(demo_sum, bc);
    return loss + demo->weight * bc;
  };
  for (int e = 0; e < c.epochs; ++e) {
    auto order = torch::randperm(n, gen, torch::kLong);
    for (std::int64_t at = 0; at < n; at += c.minibatch) {
      const auto k = std::min<std::int64_t>(c.minibatch, n - at);
      auto idx = order.narrow(0, at, k);
      std::optional<DemoTerm> part;
      if (demos) part = demo_rows(*demos, k, demo_at);
      const DemoTerm* demo = part ? &*part : nullptr;
      model::StepResult step;
      const auto cut = rows_per_turn(turns, seen.defined());
      if (cut <= 0 || cut >= k) {
        on_slot([&](model::TenantSlot& slot, const AdaptedPooled& adapted) {
          step = slot.policy_step(
              [&](model::ActionHead& head) { return loss_of(head, slot.device(), adapted, idx, 1.0, demo, 1.0); });
        });
      } else {
        const auto parts = (k + cut - 1) / cut, m = demo ? demo->state.size(0) : 0;
        model::TenantSlot::PolicyPart sum;
        for (std::int64_t p = 0; p < parts; ++p) {
          const auto from = p * cut, rows = std::min(cut, k - from);
          const auto demo_from = m * p / parts, demo_n = m * (p + 1) / parts - demo_from;  // demos spread evenly
          std::optional<DemoTerm> demo_part;
          if (demo) demo_part = narrow(*demo, demo_from, demo_n);
          double seconds = 0;
          on_slot([&](model::TenantSlot& slot, const AdaptedPooled& adapted) {
            const auto started = std::chrono::steady_clock::now();
            auto got = slot.policy_gradients([&](model::ActionHead& head) {
              return loss_of(head, slot.device(), adapted, idx.narrow(0, from, rows), double(rows) / double(k),
                             demo ? &*demo_part : nullptr, m > 0 ? double(demo_n) / double(m) : 0.0);
            });
            seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
            if (p == 0) {
              sum = std::move(got);
            } else {
              sum.loss = sum.loss + got.loss;
              for (std::size_t i = 0; i < sum.grads.size() && i < got.grads.size(); ++i) sum.grads[i] += got.grads[i];
            }
            if (p == parts - 1) step = slot.apply_policy_gradients(sum);  // the minibatch's one step
          });
          turns.sizer->observe(rows, seconds);
        }
        ++s.split_minibatches;
      }
      s.policy_loss += step.loss;
      if (value_step) s.value_loss += value_step(idx);
      ++s.minibatches;
    }
  }
  if (s.minibatches > 0) {
    s.clip_fraction = clipped_sum.item<double>();  // sums: divided below
    s.entropy = entropy_sum.item<double>();
    if (demo_sum.defined()) s.demo_loss = demo_sum.item<double>() / s.minibatches;
    s.policy_loss /= s.minibatches;
    s.value_loss /= s.minibatches;
    s.entropy /= s.minibatches;
    s.clip_fraction /= s.minibatches;
  }
  return s;
}

torch::Tensor flat(const torch::Tensor& t) { return t.flatten(0, 1); }  // [T, n, ...] -> [T*n, ...]

Observed observed(const Rollout& r) {
  if (!r.images.defined()) return {};
  return {flat(r.images), flat(r.tokens), flat(r.mask)};
}

}  // namespace

UpdateStats ppo_update(const SlotRunner& on_slot, ValueHead& value, torch::optim::Optimizer& value_opt,
                       const Rollout& r, const UpdateConfig& c, double weight, at::Generator& gen,
                       const DemoTerm* demos, const UpdateTurns& turns) {
  torch::Tensor adv, ret;
  {
    torch::NoGradGuard ng;
    auto v = value->forward(r.pooled, r.state);  // [T, n]
    auto last = value->forward(r.last_pooled, r.last_state);
    torch::Tensor cut;
    if (r.cut_index.defined() && r.cut_index.numel() > 0) {
      cut = torch::zeros_like(r.reward);
      cut.view({-1}).index_copy_(0, r.cut_index, value->forward(r.cut_pooled, r.cut_state));
    }
    std::tie(adv, ret) = gae(r.reward, v, r.done, last, c.gamma, c.lambda, cut);
  }
  auto a = flat(adv);
  a = (a - a.mean()) / (a.std() + 1e-8);
  auto pooled = flat(r.pooled), state = flat(r.state), returns = flat(ret);
  auto value_step = [&](const torch::Tensor& idx) {
    value_opt.zero_grad();
    auto loss = c.value_coef * (value->forward(pooled.index_select(0, idx), state.index_select(0, idx)) -
                                returns.index_select(0, idx))
                                   .pow(2)
                                   .mean();
    loss.backward();
    torch::nn::utils::clip_grad_norm_(value->parameters(), 1.0);
    value_opt.step();
    return loss.item<double>();
  };
  return clipped_epochs(on_slot, pooled, observed(r), state, flat(r.actions), flat(r.log_prob), a, c, weight, gen,
                        value_step, demos, turns);
}

UpdateStats grpo_update(const SlotRunner& on_slot, const Rollout& r, const UpdateConfig& c, double weight,
                        at::Generator& gen, const DemoTerm* demos, const UpdateTurns& turns) {
  // Every live step of an episode carries its episode's group-relative advantage.
  auto per_session = group_relative(r.episode_return, r.group_size);          // [n]
  auto adv = per_session.unsqueeze(0).expand_as(r.reward).contiguous();        // [T, n]
  auto live = flat(r.alive).nonzero().squeeze(1);
  auto pick = [&](const torch::Tensor& t) { return flat(t).index_select(0, live); };
  Observed seen;
  if (r.images.defined()) seen = observed(r).rows(live);
  return clipped_epochs(on_slot, pick(r.pooled), seen, pick(r.state), pick(r.actions), pick(r.log_prob), pick(adv), c,
                        weight, gen, {}, demos, turns);
}

}  // namespace nexus::rl
