// One backbone replica and everything it serves (model service internals): its own copy of the
// frozen backbone on its device, the slots of the tenants placed on it, and its executor lanes
// that serve its two queues in turns:
//   Inference Queue  predict and RL acting: first at every turn, group-batched by T and B.
//   Training Queue   SFT steps, RL update minibatches, slot operations: picked by weighted fair
//                    share (sched/fair_share.hpp), SFT steps group-batched too.
// A turn is one group pass (or one slot operation): inference never waits behind a queue of
// training work, only behind the turn in progress. Lanes ([model] inference_lanes, training_lanes)
// run turns side by side, each queue's in order (earlier_lane_idle), except a tenant's own: a turn
// leases the slots it touches (SlotRegistry::lease). Replicas share nothing but the accounting and
// the state directory, so a tenant's requests must always reach the replica its slot is on
// (ModelService places tenants; model_service.cpp).
//
// Each lane is a Health Manager role (failure reports: a loop that throws is restarted on a new
// thread with back-off). A slow turn is not taken over: a second thread cannot take a lane's
// slots while the first may still be inside a pass; a turn's work is bounded by
// max_request_gflop instead.
//
// Thread safety: every public member may be called from any thread. The backbone is frozen: its
// forward runs on both lanes at once (no gradients reach its weights). A slot is touched only by
// the lane that leased it.
#pragma once
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "daemon/model/backbone.hpp"
#include "daemon/model/group_executor.hpp"
#include "daemon/model/model_service.hpp"
#include "daemon/model/pass_threads.hpp"
#include "daemon/model/precision.hpp"
#include "daemon/model/slot_registry.hpp"
#include "daemon/model/work.hpp"
#include "daemon/model/work_queues.hpp"
#include "daemon/sync/mutex.hpp"
#include "daemon/sched/inference_pace.hpp"
#include "daemon/sched/turn_sizer.hpp"

namespace nexus::model::detail {

class Replica {
 public:
  // Loads the backbone (throws std::runtime_error) and starts the executor lanes, roles of
  // `health` named after `role_name` (optional). `quotas`: per-user bounds, shared with the other replicas;
  // so is `cache`, the frozen-feature cache (null: off).
  Replica(const ModelConfig& config, torch::Device device, const std::string& role_name,
          std::shared_ptr<metrics::Accounting> accounting, daemon::HealthManager* health, UserQuotas& quotas,
          std::shared_ptr<FeatureCache> cache = nullptr);
  // Stops the executor (the turn in progress finishes); queued work fails with "nexusd is
  // stopping"; then every slot that changed is checkpointed (SlotRegistry::checkpoint_all).
  ~Replica();
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  void submit(Work w);
  void tenant_attached(const std::string& tenant, std::uint32_t uid);
  void tenant_detached(const std::string& tenant);
  void tenant_released(const std::string& tenant);
  void pin_version(const std::string& tenant, std::uint64_t version);
  void unpin_version(const std::string& tenant, std::uint64_t version);
  std::unique_ptr<PolicyPort> policy_port(const std::string& tenant);

  ModelStats stats() const;
  const BackboneConfig& backbone() const { return backbone_->config(); }
  const std::string& device() const { return device_name_; }

 private:
  class Policy;

  // A tenant with no training work for this long is idle: it comes back with no banked credit.
  static constexpr auto kIdleGrace = std::chrono::seconds(1);

  // An executor lane: one thread (generation after generation: a Health Manager role of its own)
  // serving one queue or both, with its own GroupExecutor.
  struct Lane {
    std::size_t index = 0;  // its profile: stats_.lanes[index]; lane 0 also evicts idle slots
    WorkQueues::Serves serves = WorkQueues::Serves::Both;
    std::unique_ptr<GroupExecutor> executor;  // this lane's thread only
    std::shared_ptr<daemon::Role> role;       // null without a manager
    std::thread thread;                       // GUARDED_BY(threads_mu_): the lane's thread now
    std::vector<std::thread> retired;         // GUARDED_BY(threads_mu_): generations that threw and left
    bool busy = false;  // GUARDED_BY(mu_): from its turn's pick to the turn's end
  };

  void start_lane(Lane& lane, const std::string& role_name);
  void run(Lane& lane, std::uint64_t generation);
  void serve(Lane& lane, std::uint64_t generation);
  bool earlier_lane_idle(const Lane& lane) const NEXUS_REQUIRES(mu_);  // replica_executor.cpp has why
  // `running`: the turn's tenants marked running (several training lanes), unmarked and
  // cleared with the turn's charge.
  void execute(Lane& lane, WorkQueues::Turn& turn, std::vector<std::uint64_t>& running);
  std::map<std::string, double> run_single(Work& w);
  // Samples a training turn of `turn`'s tenants may take within [model] max_training_turn_ms,
  // cut by their weight beside heavier active tenants (0: steps stay whole: no budget, or
  // deterministic mode, or nobody else active).
  std::int64_t split_above(const std::vector<Work>& turn) const NEXUS_REQUIRES(mu_);
  // The budget behind split_above for a turn of these tenants (seconds 0: whole steps); an RL
  // update sizes its adapted minibatch's parts from it (Policy::update_turn).
  sched::TurnBudget turn_budget(const std::set<std::uint64_t>& in_turn) const NEXUS_REQUIRES(mu_);
  // Tenants that trained within the last 2 s, or have training work waiting, and are still attached.
  std::set<std::uint64_t> training_active(sched::Clock::time_point now) const NEXUS_REQUIRES(mu_);
  // Attached tenants that asked for inference lately, each with when its next request is due.
  std::map<std::uint64_t, sched::Clock::time_point> inference_expected(sched::Clock::time_point now) const NEXUS_REQUIRES(mu_);
  void note_registered(const std::string& tenant);

  const ModelConfig config_;
  const torch::Device device_;
  const std::string device_name_;  // "cpu", "cuda:0"
  std::shared_ptr<metrics::Accounting> accounting_;
  daemon::HealthManager* const health_;
  std::unique_ptr<Backbone> backbone_;      // at precision_ (precision.hpp)
  Precision precision_ = Precision::Float32;  // what [model] precision computes on device_
  std::shared_ptr<FeatureCache> cache_;      // before executor_, which uses it
  std::unique_ptr<SlotRegistry> registry_;   // slots: leased by a lane's turn (pins: any)
  std::vector<std::unique_ptr<Lane>> lanes_;  // fixed once constructed

  // The queues' lock: held to queue, to pick a turn and to account for it, never across a pass.
  mutable Mutex mu_;
  std::condition_variable cv_;  // waits on mu_.native(); every lane waits on it: notify_all
  WorkQueues queues_ NEXUS_GUARDED_BY(mu_);
  sched::FairShare share_ NEXUS_GUARDED_BY(mu_);
  std::map<std::uint64_t, sched::Clock::time_point> last_training_ NEXUS_GUARDED_BY(mu_);
  std::set<std::uint64_t> attached_ids_ NEXUS_GUARDED_BY(mu_);  // attached now
  bool stop_ NEXUS_GUARDED_BY(mu_) = false;
  double busy_train_ NEXUS_GUARDED_BY(mu_) = 0, busy_infer_ NEXUS_GUARDED_BY(mu_) = 0;  // recent, decaying
  sched::TurnSizer turn_sizer_ NEXUS_GUARDED_BY(mu_);  // training passes' cost
  PassThreads pass_threads_;  // each pass's team, by the lanes running (pass_threads.hpp)
  // Another tenant trained, or anyone asked for inference, within kContendedWithin: a step too big
  // for one turn is split so that they are served between its micro-batches.
  static constexpr auto kContendedWithin = std::chrono::seconds(2);
  bool contended_ NEXUS_GUARDED_BY(mu_) = false;
  sched::Clock::time_point last_inference_ NEXUS_GUARDED_BY(mu_){};
  // When each tenant's next inference request is due (dropped as the tenant detaches).
  sched::InferencePace inference_pace_ NEXUS_GUARDED_BY(mu_);
  sched::Clock::time_point last_turn_end_ NEXUS_GUARDED_BY(mu_) = sched::Clock::now();

  mutable std::mutex stats_mu_;
  ModelStats stats_;  // GUARDED_BY(stats_mu_); stats_.lanes sized once, before the lanes start
  std::mutex threads_mu_;  // the lanes' threads
};

}  // namespace nexus::model::detail
