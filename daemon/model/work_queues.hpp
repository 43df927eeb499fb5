// The model service's two queues and the choice of the next executor turn:
//   Inference Queue  predict and act, in arrival order; a turn when sched::decide says flush
//                    (B samples, T waited, or every active tenant in the group).
//   Training Queue   everything else, in arrival order; a turn when sched::pick_training says so
//                    (the fair-share leader, alone or with a group). A step split into
//                    micro-batches (MicroWork) holds its tenant's other training work back.
// Inference goes first at every turn; while it waits for its group to fill, training may take
// a turn (so inference waits behind at most the turn in progress, never behind a queue). One
// exception keeps saturated inference from starving training: while training's share of the
// executor's recent time is below its floor (`training_owed`), a training turn goes first.
// That is for a lane that serves both queues; a replica's other lanes serve one (`Serves`).
// Several training lanes (`concurrent_training`): a training turn is marked running from its
// pick to `training_done`; a running tenant's other work waits (its turns never overlap, nor
// overtake each other), and a turn starts beside running ones only for a tenant that is not
// ahead of any of them in virtual time (weights hold: the tenant ahead waits, as it would for
// one lane; the one behind need not wait for a turn it is owed).
//
// Thread safety: none; the model service's queue lock guards every call.
#pragma once
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "daemon/model/work.hpp"
#include "daemon/sched/fair_share.hpp"

namespace nexus::model::detail {

std::uint64_t tenant_id(const std::string& tenant);  // the schedulers' name for a tenant

class WorkQueues {
 public:
  struct Turn {
    std::vector<Work> works;
    bool inference = false;
  };
  // Which queues an executor lane serves: both (one lane), or one (two lanes).
  enum class Serves { Both, Inference, Training };

  // Queues `w`. A tenant returning from idle (`returning`: no training work for a while) with
  // nothing queued is lifted in `share`: it banks no credit for the time away. (A closed-loop
  // tenant, between its reply and its next step, is not idle.)
  void push(Work w, sched::FairShare& share, bool returning);
  // The next micro-batch of a step already under way (GroupExecutor's continuations).
  void push_continuation(Work w) { training_.push_back(std::move(w)); }
  // The next turn, or nullopt and how long until the decision may change by itself.
  // inference_expected: the tenants that asked for inference lately, each with when its next
  // request is due (sched::InferencePace); an inference group waits (up to T) only for those due
  // within T of its oldest request. active_training: those that trained lately.
  // `serves`: the queues the asking lane serves (training_owed applies to Both only: a training
  // lane of its own needs no floor).
  std::optional<Turn> next(Clock::time_point now, const sched::BatchPolicy& batch, const sched::TrainingPolicy& training,
                           const std::map<std::uint64_t, Clock::time_point>& inference_expected,
                           const std::set<std::uint64_t>& active_training,
                           const sched::FairShare& share, bool training_owed, std::chrono::microseconds& wait,
                           Serves serves = Serves::Both);
  // Work of the queue(s) `serves` names is waiting.
  bool has_work(Serves serves) const {
    return serves == Serves::Both ? !empty() : serves == Serves::Inference ? !inference_.empty() : !training_.empty();
  }
  bool empty() const { return inference_.empty() && training_.empty(); }
  std::size_t inference_size() const { return inference_.size(); }
  std::size_t training_size() const { return training_.size(); }
  // Several training lanes take turns at once (set once, before any lane starts).
  void set_concurrent_training(bool on) { concurrent_training_ = on; }
  // The training turn of these tenants (tenant_id) has ended at `ended` after running `took`
  // (a failed turn: zero): their work may go again, and (several training lanes) each is
  // expected back until `ended` + T (sched::wait_for_expected) if the turn ran T at least.
  // Why that floor: a tenant behind that sends turns shorter than T (slot operations, failing
  // steps) would otherwise hold every free lane idle for T after each, charged for microseconds,
  // and the tenant ahead would run only once it caught up; with it, a lane waits at most as long
  // as the turn it waits after, and the tenant is charged that turn.
  void training_done(const std::vector<std::uint64_t>& tenants, Clock::time_point ended, Clock::duration took) {
    for (auto id : tenants) {
      running_training_.erase(id);
      if (concurrent_training_) turn_ended_[id] = {ended, took};
    }
  }
  bool training_running(std::uint64_t tenant) const { return running_training_.count(tenant) != 0; }
  // An inference turn next() gave has ended, or failed: each of its works' tenant, once per work.
  void inference_done(const std::vector<std::uint64_t>& tenants) {
    for (auto id : tenants)
      if (auto at = running_inference_.find(id); at != running_inference_.end()) running_inference_.erase(at);
  }
  bool concurrent_training() const { return concurrent_training_; }
  // The tenants with training work waiting or (several training lanes) running, added to `into`.
  void training_tenants(std::set<std::uint64_t>& into) const {
    for (const auto& w : training_) into.insert(tenant_id(tenant_of(w)));
    into.insert(running_training_.begin(), running_training_.end());
  }
  // Takes everything (the service is stopping: the caller fails it all).
  std::vector<Work> drain();

 private:
  static std::vector<Work> take(std::deque<Work>& q, const std::vector<std::size_t>& indices);
  std::deque<Work> inference_, training_;
  std::set<std::uint64_t> running_training_;  // tenants of the training turns under way
  struct TurnEnd {
    Clock::time_point ended;
    Clock::duration took;
  };
  // Several training lanes: each tenant's last turn, dropped by the first pick T after its end
  // (one entry per tenant that trained at most; a stale one is never waited for).
  std::map<std::uint64_t, TurnEnd> turn_ended_;
  std::multiset<std::uint64_t> running_inference_;  // of the inference turns under way, once per work
  bool concurrent_training_ = false;
};

}  // namespace nexus::model::detail
