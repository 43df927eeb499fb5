// Tenants' adapters in a group pass (GroupExecutor's; the plan is in group_executor.hpp and
// docs/design/adapters.md).
#include "daemon/model/group_executor.hpp"

namespace nexus::model::detail {

bool GroupExecutor::resolve_adapter(Bound& b, SlotEntry* slot) {
  if (b.kind == Bound::Kind::Features) {  // features mode has no head, but its tenant may have an adapter
    std::string refused;
    slot = slots_.find(b.tenant, &refused);
    if (!slot && !refused.empty()) {  // it has a slot, which a bound keeps from coming back
      fail(*b.work, Fault::OverQuota, refused);
      return false;
    }
  }
  if (!slot) return true;
  const TenantSlot& t = *slot->trainer;
  try {
    b.adapter = b.kind == Bound::Kind::Act ? t.acting_adapter() : t.adapter(b.kind == Bound::Kind::Predict ? b.version : 0);
  } catch (const std::out_of_range& e) {
    fail(*b.work, Fault::UnknownVersion, e.what());
    return false;
  }
  return true;
}

std::vector<std::vector<Bound>> GroupExecutor::adapter_rounds(std::vector<Bound>& bound) {
  std::vector<std::vector<Bound>> rounds(1);
  std::map<const SlotEntry*, std::size_t> steps;  // adapter training steps per slot so far
  for (auto& b : bound) {
    const std::size_t r = b.trains_adapter() ? steps[b.slot]++ : 0;
    if (r >= rounds.size()) rounds.resize(r + 1);
    rounds[r].push_back(std::move(b));
  }
  return rounds;
}

void GroupExecutor::defer_step(Bound& b, const VLAFeature& f, std::vector<DeferredStep>& deferred) {
  TenantSlot& slot = *b.slot->trainer;
  try {
    if (b.kind == Bound::Kind::Sft) {
      deferred.push_back({&b, slot.step_loss(f, on_device(b.state), on_device(b.actions))});
      return;
    }
    StepChain& chain = *b.chain;
    if (!chain.accumulation) chain.accumulation = std::make_shared<TenantSlot::Accumulation>(slot.begin_step(chain.n));
    deferred.push_back({&b, slot.micro_loss(*chain.accumulation, f, on_device(b.state), on_device(b.actions), b.offset)});
  } catch (const SlotError& e) {
    fail(*b.work, Fault::BadBatch, e.what());
  } catch (const std::exception& e) {
    fail(*b.work, Fault::Internal, e.what());
  }
}

void GroupExecutor::backward_deferred(std::vector<DeferredStep>& deferred, metrics::Service service, Ran& ran) {
  const auto t0 = sched::Clock::now();
  const double optimizer0 = optimizer_seconds_this_thread();
  std::vector<torch::Tensor> losses;
  for (const auto& d : deferred) losses.push_back(d.loss);
  std::string error;
  try {
    // One backward for all: d(sum)/d(loss_t) is 1 whatever the other losses are, and each
    // tenant's loss depends on its own rows only, so a NaN stays in its tenant's gradients
    // (which finish_deferred then refuses).
    torch::autograd::backward(losses);
  } catch (const std::exception& e) {
    error = e.what();
  }
  std::int64_t samples = 0;
  for (const auto& d : deferred) samples += d.bound->n;
  for (auto& d : deferred) {
    Bound& b = *d.bound;
    TenantSlot& slot = *b.slot->trainer;
    try {
      if (!error.empty()) throw std::runtime_error("adapter backward: " + error);
      if (b.kind == Bound::Kind::Sft) {
        const auto r = slot.finish_deferred(d.loss);
        answer(b, Stepped{r.loss, r.grad_norm, static_cast<std::uint64_t>(r.step)});
      } else if (b.offset + b.n < b.chain->n) {
        continuations_->push_back(MicroWork{b.chain, b.tenant, sched::Clock::now()});  // as run_head does
      } else {
        const auto r = slot.finish_step(*b.chain->accumulation);
        answer(b, Stepped{r.loss, r.grad_norm, static_cast<std::uint64_t>(r.step)});
      }
    } catch (const SlotError& e) {
      fail(*b.work, Fault::BadBatch, e.what());
    } catch (const std::exception& e) {
      fail(*b.work, Fault::Internal, e.what());
    }
  }
  // The backward through the backbone is the adapter tenants' own work: charged to them by samples.
  const double seconds = std::chrono::duration<double>(sched::Clock::now() - t0).count();
  for (const auto& d : deferred) {
    const double share = seconds * static_cast<double>(d.bound->n) / static_cast<double>(samples);
    ran.charged[d.bound->tenant] += share;
    if (accounting_) accounting_->charge(d.bound->tenant, service, share, 0, 0);
  }
  std::lock_guard lk(stats_mu_);
  stats_.head_seconds += seconds;
  // Most of it is the backward through the backbone's blocks: the profile counts it there, all
  // but the optimizer steps (counted with the heads', which the turn moves out of heads_s).
  const double optimizer = optimizer_seconds_this_thread() - optimizer0;
  profile_.backbone_s += seconds - optimizer;
  profile_.heads_s += optimizer;
}

}  // namespace nexus::model::detail
