// One group pass: bind each member to its slot, pack the group, run the backbone once,
// partition the features (narrow() views, no copy), and run each member's head.
//
// Isolation: a member that fails binding, or whose head throws, fails alone (typed error). If the
// grouped backbone pass itself throws, it is re-run member by member, so that only the member
// it fails on is answered with the error.
// Devices: members are bound on the host; the group's batch is packed there and moved to the
// replica's device in one copy per input, heads run there, and each reply's results come back
// in one device-to-host copy: the group's predictions in one copy together (on a GPU each copy
// waits for the device), features into each tenant's memory, RL acting's per member.
// Accounting: the pass's backbone time is charged to the members by their share of samples;
// each head's time to its own tenant.
//
// Thread safety: its lane's thread only (a replica's lanes have one executor each), with the
// group's slots leased (SlotRegistry::lease).
#pragma once
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "daemon/metrics/accounting.hpp"
#include "daemon/model/adapted_backbone.hpp"
#include "daemon/model/devices.hpp"
#include "daemon/model/request_binding.hpp"
#include "daemon/model/slot_registry.hpp"

namespace nexus::model::detail {

// Answers a bound member's request (a micro-batch: its chain's).
void answer(Bound& b, Result r);

// What a replica gives its executor: the references outlive it (the replica owns them all).
struct GroupExecutorParts {
  Backbone& backbone;
  torch::Device device;
  SlotRegistry& slots;
  CostModel cost;
  bool deterministic = false;              // one fixed order of floating-point work (bitwise results)
  metrics::Accounting* accounting = nullptr;  // null: nothing charged (tests)
  ModelStats& stats;                       // guarded by stats_mu
  ExecutorProfile& profile;                // its lane's; guarded by stats_mu
  std::mutex& stats_mu;
};

class GroupExecutor {
 public:
  explicit GroupExecutor(const GroupExecutorParts& parts);

  struct Ran {
    std::map<std::string, double> charged;  // compute-seconds per tenant
    std::vector<Work> continuations;         // chains' next micro-batches, for the caller to queue
    std::int64_t samples = 0;                // through the backbone
  };
  // Answers every live member of `group` exactly once (errors included). `split_above` > 0: an
  // SFT step of more samples runs as micro-batches of that many (a StepChain; its first here).
  Ran run(std::vector<Work>& group, metrics::Service service, std::int64_t split_above);
  // Dataset SFT steps read and fill `cache` (not owned; outlives the executor), keyed under the
  // digest of this executor's backbone.
  void use_feature_cache(FeatureCache* cache, const daemon::ContentDigest& backbone_digest) {
    cache_ = cache, backbone_digest_ = backbone_digest;
  }

 private:
  void pass(std::span<Bound> bound, metrics::Service service, Ran& ran);
  bool forward(std::span<Bound> bound, VLAFeature& features, std::string& error);
  struct PendingPrediction {
    Bound* bound;
    torch::Tensor actions;  // on the device, [n, chunk, action_dim]
  };
  void run_head(Bound& b, const VLAFeature& f, std::vector<PendingPrediction>& predictions);
  // A micro-batch's part of its step: accumulate, and on the last apply the update and answer.
  // False if the chain failed (answered) or finished; true if it has micro-batches to go.
  bool run_micro(Bound& b, const VLAFeature& f);
  std::vector<Work>* continuations_ = nullptr;  // during run(): Ran::continuations
  void answer_predictions(std::vector<PendingPrediction>& predictions);

  // Adapters (group_adapters.cpp). resolve_adapter sets b.adapter (false: b failed, answered).
  // adapter_rounds: a second training step of the same adapter in one group would run on features
  // its first step's update makes stale, so it goes in a later pass (round) of this turn, in order.
  bool resolve_adapter(Bound& b, SlotEntry* slot);
  static std::vector<std::vector<Bound>> adapter_rounds(std::vector<Bound>& bound);
  // Adapter training: every such member's loss reaches back into the shared adapted pass, so the
  // pass runs one backward for all of them (each tenant's gradients come from its own rows only:
  // docs/design/adapters.md), then each applies its own update and is answered.
  struct DeferredStep {
    Bound* bound;
    torch::Tensor loss;
  };
  void defer_step(Bound& b, const VLAFeature& f, std::vector<DeferredStep>& deferred);
  void backward_deferred(std::vector<DeferredStep>& deferred, metrics::Service service, Ran& ran);

  // The frozen-feature cache (group_cache.cpp). key_rows: b's rows' keys (none: not cached);
  // rows_to_run: how many of them the cache does not hold (a split decision, not a lookup);
  // look_up: the rows found (b.cache_plan when any). member_features: b's features, its found
  // rows with the pass's `computed` ones (its pass rows); the computed rows are kept in the cache.
  void key_rows(Bound& b);
  std::int64_t rows_to_run(const Bound& b) const;
  void look_up(Bound& b);
  VLAFeature member_features(Bound& b, const VLAFeature& computed);

  torch::Tensor on_device(const torch::Tensor& t) const { return upload(t, device_); }  // devices.hpp

  Backbone& backbone_;
  AdaptableBackbone* const adaptable_;  // backbone_, if it takes adapters (else null)
  const torch::Device device_;
  SlotRegistry& slots_;
  const CostModel cost_;
  const bool deterministic_;
  metrics::Accounting* accounting_;
  ModelStats& stats_;
  ExecutorProfile& profile_;
  std::mutex& stats_mu_;
  FeatureCache* cache_ = nullptr;
  daemon::ContentDigest backbone_digest_{};
};

}  // namespace nexus::model::detail
