// The heads' side of a group pass (GroupExecutor's): each bound request's head runs on its rows
// of the shared features (SFT step, micro-batch, prediction, features written to the tenant),
// and predictions are answered after the pass, each tenant's failure its own.
#include "daemon/model/devices.hpp"
#include "daemon/model/group_executor.hpp"

namespace nexus::model::detail {

void GroupExecutor::answer_predictions(std::vector<PendingPrediction>& predictions) {
  if (predictions.empty()) return;
  torch::Tensor host;
  try {
    std::vector<torch::Tensor> flat;
    for (const auto& p : predictions) flat.push_back(p.actions.to(torch::kFloat32).reshape({-1}));
    host = torch::cat(flat).to(torch::kCPU).contiguous();  // the group's one result copy
  } catch (const std::exception& e) {
    for (auto& p : predictions) fail(*p.bound->work, Fault::Internal, e.what());
    return;
  }
  const float* data = host.data_ptr<float>();
  for (auto& p : predictions) {
    Predicted out;
    out.shape = p.actions.sizes().vec();
    const auto n = static_cast<std::size_t>(p.actions.numel());
    out.actions.assign(data, data + n);
    data += n;
    answer(*p.bound, std::move(out));
  }
}

bool GroupExecutor::run_micro(Bound& b, const VLAFeature& f) {
  TenantSlot& slot = *b.slot->trainer;
  StepChain& chain = *b.chain;
  try {
    if (!chain.accumulation) chain.accumulation = std::make_shared<TenantSlot::Accumulation>(slot.begin_step(chain.n));
    slot.micro_step(*chain.accumulation, f, on_device(b.state), on_device(b.actions), b.offset);
    if (b.offset + b.n < chain.n) return true;
    const auto r = slot.finish_step(*chain.accumulation);
    answer(b, Stepped{r.loss, r.grad_norm, static_cast<std::uint64_t>(r.step)});
  } catch (const SlotError& e) {
    fail(*b.work, Fault::BadBatch, e.what());
  } catch (const std::exception& e) {
    fail(*b.work, Fault::Internal, e.what());
  }
  return false;
}

// A head's failure is its tenant's alone: typed error, the group's others go on.
void GroupExecutor::run_head(Bound& b, const VLAFeature& f, std::vector<PendingPrediction>& predictions) {
  if (b.kind == Bound::Kind::Features) {  // the tenant's own head will read them: one copy out
    try {
      if (b.out.is_cuda()) {
        // A tenant's CUDA region. nexusd has it mapped for the region's own device only, so
        // features from another device come through the host; and the copy must be complete
        // before the reply: the tenant's reads are on its own streams, in another process, and
        // the region may be unmapped as soon as the request lets go of it.
        b.out.copy_(b.out.device() == f.pooled.device() ? f.pooled : f.pooled.to(torch::kCPU));
        torch::cuda::synchronize(b.out.device().index());
      } else {
        b.out.copy_(f.pooled);
      }
      answer(b, FeaturesWritten{static_cast<std::uint32_t>(b.n), static_cast<std::uint32_t>(f.pooled.size(1))});
    } catch (const std::exception& e) {
      fail(*b.work, Fault::Internal, e.what());
    }
    return;
  }
  TenantSlot& slot = *b.slot->trainer;
  if (b.kind == Bound::Kind::Micro) {
    // The next micro-batch arrives now, as a closed-loop tenant's next step would: the Training
    // Queue's pick may then wait briefly for an active tenant to join it (sched::pick_training).
    if (run_micro(b, f)) continuations_->push_back(MicroWork{b.chain, b.tenant, sched::Clock::now()});
    return;
  }
  if (b.kind == Bound::Kind::Act) {
    auto& act = std::get<ActWork>(*b.work);
    try {
      auto a = slot.act(f, on_device(b.state));
      // The RL job works on the host: its features, actions and log-probabilities come back.
      // pooled is a view of the group's batch: host_copy clones it even on the CPU.
      act.done.set_value({host_copy(f.pooled), a.actions.to(torch::kCPU), a.log_prob.to(torch::kCPU), a.version});
    } catch (const std::exception& e) {
      fail(*b.work, Fault::Internal, e.what());
    }
    return;
  }
  try {
    if (b.kind == Bound::Kind::Sft) {
      const auto r = slot.sft_step(f, on_device(b.state), on_device(b.actions));
      answer(b, Stepped{r.loss, r.grad_norm, static_cast<std::uint64_t>(r.step)});
    } else {
      predictions.push_back({&b, slot.predict(f, on_device(b.state), b.version)});  // answered after the group
    }
  } catch (const SlotError& e) {
    fail(*b.work, Fault::BadBatch, e.what());
  } catch (const std::out_of_range& e) {
    fail(*b.work, Fault::UnknownVersion, e.what());
  } catch (const std::exception& e) {
    fail(*b.work, Fault::Internal, e.what());
  }
}

}  // namespace nexus::model::detail
