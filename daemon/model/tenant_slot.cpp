#include "daemon/model/tenant_slot.hpp"

#include <ATen/CPUGeneratorImpl.h>

namespace nexus::model {

TenantSlot::TenantSlot(const HeadSpec& spec, const OptimizerConfig& opt, std::int64_t feature_dim,
                       std::uint64_t seed)
    : config_(opt), feature_dim_(feature_dim), rng_(at::make_generator<at::CPUGeneratorImpl>(seed)) {
  {
    // Head initialisation draws from the global generator: make it a function of the seed.
    static std::mutex init_mu;
    std::lock_guard lock(init_mu);
    torch::manual_seed(seed);
    head_ = make_head(spec, feature_dim);
  }
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
    if (!torch::isfinite(state).all().item<bool>()) throw SlotError(false, "state holds NaN or Inf");
  }
  if (actions) {
    if (!actions->defined() || actions->dim() != 3 || actions->size(0) != n || actions->size(1) != s.chunk ||
        actions->size(2) != s.action_dim)
      throw SlotError(true, "actions must be [" + std::to_string(n) + ", " + std::to_string(s.chunk) + ", " +
                                std::to_string(s.action_dim) + "]");
    if (!torch::isfinite(*actions).all().item<bool>()) throw SlotError(false, "actions hold NaN or Inf");
  }
}

StepResult TenantSlot::sft_step(const VLAFeature& f, const torch::Tensor& state, const torch::Tensor& actions) {
  check_inputs(f, state, &actions);
  head_->train();
  optimizer_->zero_grad();
  torch::Tensor loss;
  try {
    loss = head_->loss(f, state, actions.to(torch::kFloat32), rng_);
  } catch (const c10::Error& e) {
    throw SlotError(true, e.what_without_backtrace());
  }
  if (!torch::isfinite(loss).item<bool>()) throw SlotError(false, "loss is NaN or Inf; no update made");
  loss.backward();
  double norm = 0;
  if (config_.grad_clip > 0)
    norm = torch::nn::utils::clip_grad_norm_(head_->parameters(), config_.grad_clip);
  if (!std::isfinite(norm)) {
    optimizer_->zero_grad();
    throw SlotError(false, "gradient is NaN or Inf; no update made");
  }
  optimizer_->step();
  return StepResult{loss.item<double>(), norm, ++steps_};
}

torch::Tensor TenantSlot::predict(const VLAFeature& f, const torch::Tensor& state, std::uint64_t version) {
  check_inputs(f, state, nullptr);
  ActionHead* head = head_.get();
  if (version != 0) {
    auto it = versions_.find(version);
    if (it == versions_.end()) throw std::out_of_range("version " + std::to_string(version) + " was never published");
    head = it->second.get();
  }
  torch::NoGradGuard no_grad;
  head->eval();
  try {
    return head->predict(f, state, rng_);
  } catch (const c10::Error& e) {
    throw SlotError(true, e.what_without_backtrace());
  }
}

std::uint64_t TenantSlot::publish() {
  auto copy = make_head(head_->spec(), feature_dim_);
  {
    torch::NoGradGuard no_grad;
    auto src = head_->parameters();
    auto dst = copy->parameters();
    for (std::size_t i = 0; i < src.size(); ++i) dst[i].copy_(src[i]);
  }
  for (auto& p : copy->parameters()) p.set_requires_grad(false);
  copy->eval();
  const std::uint64_t v = latest_version() + 1;
  versions_.emplace(v, std::move(copy));
  return v;
}

}  // namespace nexus::model
