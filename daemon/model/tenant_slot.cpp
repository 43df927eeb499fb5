#include "daemon/model/tenant_slot.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "daemon/model/devices.hpp"

namespace nexus::model {

TenantSlot::TenantSlot(const HeadSpec& spec, const OptimizerConfig& opt, std::int64_t feature_dim,
                       std::uint64_t seed, torch::Device device)
    : config_(opt),
      feature_dim_(feature_dim),
      device_(device),
      rng_(seeded_generator(seed)),
      inference_rng_(seeded_generator(seed ^ 0x9E3779B97F4A7C15ull)) {
  {
    // Head initialisation draws from the global generator: make it a function of the seed.
    const auto lock = seed_global_generator(seed);
    head_ = make_head(spec, feature_dim);
  }
  head_->to(device_);
  optimizer_ = std::make_unique<torch::optim::AdamW>(
      head_->parameters(), torch::optim::AdamWOptions(opt.lr)
                               .betas({opt.beta1, opt.beta2})
                               .weight_decay(opt.weight_decay));
}

void TenantSlot::check_inputs(const VLAFeature& f, const torch::Tensor& state, const torch::Tensor* actions) const {
  const auto& s = head_->spec();
  const auto n = f.pooled.size(0);
  if (s.state_dim > 0) {
    if (!state.defined() || state.dim() != 2 || state.size(0) != n || state.size(1) != s.state_dim)
      throw SlotError(true, "state must be [" + std::to_string(n) + ", " + std::to_string(s.state_dim) + "]");
    // Device tensors were checked on their host copies (request_binding.cpp): no sync here.
    if (state.is_cpu() && !torch::isfinite(state).all().item<bool>()) throw SlotError(false, "state holds NaN or Inf");
  }
  if (actions) {
    if (!actions->defined() || actions->dim() != 3 || actions->size(0) != n || actions->size(1) != s.chunk ||
        actions->size(2) != s.action_dim)
      throw SlotError(true, "actions must be [" + std::to_string(n) + ", " + std::to_string(s.chunk) + ", " +
                                std::to_string(s.action_dim) + "]");
    if (actions->is_cpu() && !torch::isfinite(*actions).all().item<bool>())
      throw SlotError(false, "actions hold NaN or Inf");
  }
}

StepResult TenantSlot::sft_step(const VLAFeature& f, const torch::Tensor& state, const torch::Tensor& actions) {
  check_inputs(f, state, &actions);
  return policy_step([&](ActionHead& head) {
    try {
      return head.loss(f, state, actions.to(torch::kFloat32), rng_);
    } catch (const c10::Error& e) {
      throw SlotError(true, e.what_without_backtrace());
    }
  });
}

torch::Tensor TenantSlot::predict(const VLAFeature& f, const torch::Tensor& state, std::uint64_t version) {
  check_inputs(f, state, nullptr);
  ActionHead* head = head_.get();
  if (version != 0) {
    auto it = versions_.find(version);
    if (it == versions_.end()) throw std::out_of_range("version " + std::to_string(version) + " was never published, or is no longer kept");
    head = it->second.get();
  }
  torch::NoGradGuard no_grad;
  head->eval();
  try {
    return head->predict(f, state, inference_rng_);  // never the training stream: see header
  } catch (const c10::Error& e) {
    throw SlotError(true, e.what_without_backtrace());
  }
}

TenantSlot::Acted TenantSlot::act(const VLAFeature& f, const torch::Tensor& state) {
  check_inputs(f, state, nullptr);
  if (head_->spec().kind != "gaussian") throw SlotError(true, "RL needs a gaussian head, this slot has " + head_->spec().kind);
  ActionHead* head = versions_.empty() ? head_.get() : versions_.rbegin()->second.get();
  torch::NoGradGuard no_grad;
  auto out = gaussian_outputs(*head, f, state);
  auto noise = normal_draws(out.mean.sizes(), rng_, out.mean.options());
  auto actions = out.mean + torch::exp(out.log_std) * noise;
  return {actions, gaussian_log_prob(out, actions), latest_version()};
}

TenantSlot::Accumulation TenantSlot::begin_step(std::int64_t total) {
  head_->train();
  optimizer_->zero_grad();
  Accumulation acc;
  acc.total = total;
  acc.noise = head_->draw_noise(total, rng_, torch::TensorOptions().dtype(torch::kFloat32).device(device_));
  return acc;
}

void TenantSlot::micro_step(Accumulation& acc, const VLAFeature& f, const torch::Tensor& state,
                            const torch::Tensor& actions, std::int64_t offset) {
  micro_loss(acc, f, state, actions, offset).backward();  // gradients add up across micro-batches
}

torch::Tensor TenantSlot::micro_loss(Accumulation& acc, const VLAFeature& f, const torch::Tensor& state,
                                     const torch::Tensor& actions, std::int64_t offset) {
  check_inputs(f, state, &actions);
  const auto n = actions.size(0);
  head_->train();
  torch::Tensor loss;
  try {
    const auto noise = acc.noise.defined() ? acc.noise.narrow(0, offset, n) : acc.noise;
    // The whole batch's loss is the mean over its samples: this micro-batch's share is n / total.
    loss = head_->loss_drawn(f, state, actions.to(torch::kFloat32), noise) *
           (static_cast<double>(n) / static_cast<double>(acc.total));
  } catch (const c10::Error& e) {
    throw SlotError(true, e.what_without_backtrace());
  }
  acc.losses.push_back(loss.detach());
  return loss;
}

torch::Tensor TenantSlot::step_loss(const VLAFeature& f, const torch::Tensor& state, const torch::Tensor& actions) {
  check_inputs(f, state, &actions);
  head_->train();
  optimizer_->zero_grad();
  try {
    return head_->loss(f, state, actions.to(torch::kFloat32), rng_);
  } catch (const c10::Error& e) {
    throw SlotError(true, e.what_without_backtrace());
  }
}

const LoraAdapterImpl* TenantSlot::adapter(std::uint64_t version) const {
  if (version == 0) return head_->adapter();
  auto it = versions_.find(version);
  if (it == versions_.end()) throw std::out_of_range("version " + std::to_string(version) + " was never published, or is no longer kept");
  return it->second->adapter();
}

const LoraAdapterImpl* TenantSlot::acting_adapter() const {
  return versions_.empty() ? head_->adapter() : versions_.rbegin()->second->adapter();
}

StepResult TenantSlot::finish_step(Accumulation& acc) {
  return apply_gradients(torch::stack(acc.losses).sum());
}

StepResult TenantSlot::policy_step(const std::function<torch::Tensor(ActionHead&)>& loss_of) {
  head_->train();
  optimizer_->zero_grad();
  auto loss = loss_of(*head_);
  loss.backward();  // a NaN loss only makes NaN gradients: they are dropped below, never applied
  return apply_gradients(loss);
}

TenantSlot::PolicyPart TenantSlot::policy_gradients(const std::function<torch::Tensor(ActionHead&)>& loss_of) {
  head_->train();
  const auto params = head_->parameters();
  auto loss = loss_of(*head_);
  auto grads = torch::autograd::grad({loss}, params, {}, /*retain_graph=*/false, /*create_graph=*/false,
                                     /*allow_unused=*/true);
  for (std::size_t i = 0; i < grads.size(); ++i)
    if (!grads[i].defined()) grads[i] = torch::zeros_like(params[i]);
  return {loss.detach(), std::move(grads)};
}

StepResult TenantSlot::apply_policy_gradients(const PolicyPart& sum) {
  auto params = head_->parameters();
  if (sum.grads.size() != params.size()) throw SlotError(false, "the update's gradients do not fit this head");
  for (std::size_t i = 0; i < params.size(); ++i)
    if (!sum.grads[i].sizes().equals(params[i].sizes())) throw SlotError(false, "the update's gradients do not fit this head");
  optimizer_->zero_grad();
  for (std::size_t i = 0; i < params.size(); ++i) params[i].mutable_grad() = sum.grads[i].to(params[i].device()).clone();
  return apply_gradients(sum.loss);
}

static thread_local double optimizer_seconds = 0;
double optimizer_seconds_this_thread() { return optimizer_seconds; }

StepResult TenantSlot::apply_gradients(const torch::Tensor& loss) {
  struct Timed {  // however the step ends (a NaN throws)
    std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
    ~Timed() { optimizer_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); }
  } timed;
  const auto norm = clip_gradients(head_->parameters(), config_.grad_clip);
  // The step's one host synchronisation: loss and norm, read together, before the update.
  // Read in place from the host copy: no .item() (tests/model/devices_test.cpp counts them).
  const auto result =
      torch::stack({loss.detach().to(torch::kFloat32).reshape({}), norm.to(torch::kFloat32)}).to(torch::kCPU).contiguous();
  const double loss_value = result.data_ptr<float>()[0], norm_value = result.data_ptr<float>()[1];
  if (!std::isfinite(loss_value) || !std::isfinite(norm_value)) {
    optimizer_->zero_grad();
    throw SlotError(false, std::isfinite(loss_value) ? "gradient is NaN or Inf; no update made"
                                                     : "loss is NaN or Inf; no update made");
  }
  optimizer_->step();
  return StepResult{loss_value, config_.grad_clip > 0 ? norm_value : 0.0, ++steps_};
}

std::uint64_t TenantSlot::publish() {
  auto copy = [&] {
    const auto lock = lock_global_generator();  // its draws are overwritten, but they are draws
    return make_head(head_->spec(), feature_dim_);
  }();
  copy->to(device_);
  {
    torch::NoGradGuard no_grad;
    auto src = head_->parameters();
    auto dst = copy->parameters();
    for (std::size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  for (auto& p : copy->parameters()) p.set_requires_grad(false);
  copy->eval();
  const std::uint64_t v = ++published_;
  versions_.emplace(v, std::move(copy));
  return v;
}

std::size_t TenantSlot::retain(std::size_t keep, const std::set<std::uint64_t>& pinned) {
  keep = std::max<std::size_t>(keep, 1);
  std::vector<std::uint64_t> drop;
  std::size_t newer = 0;  // versions newer than the one looked at
  for (auto it = versions_.rbegin(); it != versions_.rend(); ++it, ++newer)
    if (newer >= keep && !pinned.count(it->first)) drop.push_back(it->first);
  for (auto v : drop) versions_.erase(v);
  return drop.size();
}

}  // namespace nexus::model
