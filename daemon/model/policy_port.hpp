// What an RL job needs of the model service (ModelService::policy_port): acting on the
// Inference Queue, grouped with everyone's requests, and update work on the Training Queue,
// one minibatch per turn, charged to the tenant like its SFT steps.
//
// Thread safety: act() and with_slot() may be called from any thread; they block until done and
// throw std::runtime_error with the model service's reason on failure (or when cancelled).
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <stdexcept>

#include "daemon/model/tenant_slot.hpp"
#include "daemon/sched/turn_sizer.hpp"

namespace nexus::model {

class PolicyPort {
 public:
  virtual ~PolicyPort() = default;
  struct Acted {
    torch::Tensor pooled;    // [n, D] (owned: not a view of a group's batch)
    torch::Tensor actions;   // [n, chunk, A]
    torch::Tensor log_prob;  // [n]
    std::uint64_t version = 0;
  };
  // images uint8 [n, 1, H, W, 3], tokens int32 [n, T], mask uint8 [n, T], state float [n, S].
  virtual Acted act(const torch::Tensor& images, const torch::Tensor& tokens, const torch::Tensor& mask,
                    const torch::Tensor& state) = 0;
  // Runs fn on the tenant's slot where slots are touched (the model service's executor).
  virtual void with_slot(const std::function<void(TenantSlot&)>& fn) = 0;
  // An adapter tenant's update (Rollout::images): with_slot, and fn may call `adapted` on
  // observations in act()'s layouts (on the host) for their pooled features [n, D] through the
  // backbone with the slot's live adapter, the adapter's part of the graph recorded, so the
  // loss reaches the adapter. Throws std::runtime_error where the backbone takes no adapters
  // (the default: a port without one).
  using AdaptedPooled =
      std::function<torch::Tensor(const torch::Tensor& images, const torch::Tensor& tokens, const torch::Tensor& mask)>;
  virtual void with_adapted_slot(const std::function<void(TenantSlot&, const AdaptedPooled&)>& fn) {
    (void)fn;
    throw std::runtime_error("this policy port cannot re-run the backbone with an adapter");
  }
  // The budget of one update turn of this tenant now, as bounded training turns size an SFT
  // step's micro-batches (docs/design/service.md): seconds 0 keeps a minibatch whole (alone,
  // deterministic mode, no budget: the default, a port without a Training Queue).
  virtual sched::TurnBudget update_turn() const { return {}; }
  // Keeps `version` published for as long as the slot lives, whatever the retention of versions
  // (an RL job's starting policy: what the user compares the trained one against). Where there
  // is no retention (a slot held in-process), there is nothing to do.
  virtual void keep_version(std::uint64_t version) { (void)version; }
  virtual std::int64_t image_size() const = 0;
  virtual std::int64_t max_tokens() const = 0;
  virtual std::int64_t feature_dim() const = 0;
};

}  // namespace nexus::model
