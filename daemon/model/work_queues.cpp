#include "daemon/model/work_queues.hpp"

#include <algorithm>
#include <functional>

namespace nexus::model::detail {

std::uint64_t tenant_id(const std::string& tenant) { return std::hash<std::string>{}(tenant); }

void WorkQueues::push(Work w, sched::FairShare& share, bool returning) {
  if (is_inference(w)) {
    inference_.push_back(std::move(w));
    return;
  }
  if (returning) {
    const auto id = tenant_id(tenant_of(w));
    std::set<std::uint64_t> backlogged;
    for (const auto& q : training_) backlogged.insert(tenant_id(tenant_of(q)));
    // With several training lanes a tenant being served is not queued but has work all the same.
    if (concurrent_training_) backlogged.insert(running_training_.begin(), running_training_.end());
    if (!backlogged.count(id)) share.backlogged(id, backlogged);
  }
  training_.push_back(std::move(w));
}

std::vector<Work> WorkQueues::take(std::deque<Work>& q, const std::vector<std::size_t>& indices) {
  std::vector<Work> out;  // in the order given (a group's riders come after its members)
  out.reserve(indices.size());
  for (auto i : indices) out.push_back(std::move(q[i]));
  auto erase = indices;  // from the back, so earlier positions stay valid
  std::sort(erase.begin(), erase.end(), std::greater<>());
  for (auto i : erase) q.erase(q.begin() + static_cast<long>(i));
  return out;
}

std::optional<WorkQueues::Turn> WorkQueues::next(Clock::time_point now, const sched::BatchPolicy& batch,
                                                 const sched::TrainingPolicy& training,
                                                 const std::map<std::uint64_t, Clock::time_point>& inference_expected,
                                                 const std::set<std::uint64_t>& active_training,
                                                 const sched::FairShare& share, bool training_owed,
                                                 std::chrono::microseconds& wait, Serves serves) {
  wait = std::chrono::microseconds::max();
  if (serves != Serves::Both) training_owed = false;
  const bool serves_inference = serves != Serves::Training, serves_training = serves != Serves::Inference;
  auto training_turn = [&]() -> std::optional<Turn> {
    // A tenant in the middle of a step split into micro-batches (a MicroWork queued) has only
    // that step's next micro-batch eligible: its other training work would touch the slot whose
    // gradients the step is accumulating.
    std::set<std::uint64_t> chained;
    for (const auto& w : training_)
      if (std::holds_alternative<MicroWork>(w)) chained.insert(tenant_id(tenant_of(w)));
    std::vector<sched::TrainingRequest> views;
    std::vector<std::size_t> position;  // views[i] is training_[position[i]]
    views.reserve(training_.size());
    for (std::size_t i = 0; i < training_.size(); ++i) {
      const auto& w = training_[i];
      const auto id = tenant_id(tenant_of(w));
      if (chained.count(id) && !std::holds_alternative<MicroWork>(w)) continue;
      // Its turn is under way on another training lane, or it may not start beside those that are.
      if (concurrent_training_ &&
          (running_training_.count(id) ||
           !sched::may_start_beside(id, running_training_, share.shares(), training.group_window_s)))
        continue;
      const bool continuation = std::holds_alternative<MicroWork>(w);
      views.push_back({id, key_of(w), samples_of(w), is_batchable(w), arrival_of(w), continuation});
      position.push_back(i);
    }
    if (views.empty()) return std::nullopt;
    // With several training lanes, a turn never waits for a tenant that is away (between its
    // steps) to come or join: when it comes another lane serves it; except one still active
    // (attached) that ended a turn of T or more less than T ago and is behind (rule 1c,
    // fair_share.hpp; why the floor: training_done). (One lane waits up to T for any active
    // tenant behind, so a closed loop is not passed over: pick_training's rule 1b.)
    if (concurrent_training_) {
      std::set<std::uint64_t> queued_or_running;
      training_tenants(queued_or_running);
      std::map<std::uint64_t, Clock::time_point> expected;
      for (auto it = turn_ended_.begin(); it != turn_ended_.end();) {
        const auto until = it->second.ended + training.batch.max_wait;
        if (until <= now) {
          it = turn_ended_.erase(it);
          continue;
        }
        if (!queued_or_running.count(it->first) && active_training.count(it->first) &&
            it->second.took >= training.batch.max_wait)
          expected[it->first] = until;
        ++it;
      }
      if (const auto w = sched::wait_for_expected(views, share.shares(), expected, now, training.group_window_s);
          w.count() > 0) {
        wait = std::min(wait, w);
        return std::nullopt;
      }
    }
    static const std::set<std::uint64_t> kNone;
    const auto d = sched::pick_training(views, share.shares(), concurrent_training_ ? kNone : active_training, now, training);
    if (!d.take.empty()) {
      std::vector<std::size_t> take_at;
      for (auto i : d.take) take_at.push_back(position[i]);
      Turn turn{take(training_, take_at), false};
      if (concurrent_training_)  // (one lane never picks while its own turn runs)
        for (const auto& w : turn.works) running_training_.insert(tenant_id(tenant_of(w)));
      return turn;
    }
    wait = std::min(wait, d.wait);
    return std::nullopt;
  };
  if (training_owed && !training_.empty())
    if (auto t = training_turn()) return t;
  if (serves_inference && !inference_.empty()) {
    // A tenant whose request is in another lane's pass cannot join this group until that pass
    // answers it: waiting for it would hold the group for the whole batch window. Its next
    // requests stay queued until that turn ends: the turn leases its slot, so a lane that took
    // one would sit on the lease. Why it matters: a lane answers its turn's tenants before the
    // turn ends, and a closed-loop tenant's next request often comes in between; a later lane
    // took it (up to a quarter of a lone tenant's turn time) and ran it on a cold OpenMP pool
    // once the lease came. Held, it goes to the lane that just answered. (Not held while the
    // tenant's training turn runs: holding an RL job's act through its update minibatch took it
    // out of the group it would have joined, and on the CPU a pass costs far more than its
    // share of rows; three workload runs read 0.94, 0.68 and 0.58 of the ceiling, results.md.)
    std::set<std::uint64_t> elsewhere(running_inference_.begin(), running_inference_.end());
    std::vector<sched::PendingRequest> views;
    std::vector<std::size_t> position;  // views[i] is inference_[position[i]]
    for (std::size_t i = 0; i < inference_.size(); ++i) {
      const auto& w = inference_[i];
      const auto id = tenant_id(tenant_of(w));
      if (elsewhere.count(id)) continue;
      views.push_back({key_of(w), samples_of(w), id, true, arrival_of(w)});
      position.push_back(i);
    }
    sched::Decision d{{}, std::chrono::microseconds::max()};  // all held: woken as those turns end
    if (!views.empty()) {
      // Who the group may hold: the tenants queued here, and those due before its window ends
      // but not overdue by more than T (paused: an RL job's update); not one whose request is in
      // another lane's pass either: it cannot send another before that pass answers.
      std::set<std::uint64_t> could_join;
      for (const auto& v : views) could_join.insert(v.tenant);
      const auto window_ends = views.front().arrival + batch.max_wait;
      for (const auto& [id, due] : inference_expected)
        if (!elsewhere.count(id) && due <= window_ends && now - due <= batch.max_wait) could_join.insert(id);
      d = sched::decide(views, now, batch, could_join.size());
    }
    if (!d.take.empty()) {
      std::vector<std::size_t> take_at;
      for (auto i : d.take) take_at.push_back(position[i]);
      Turn turn{take(inference_, take_at), true};
      for (const auto& w : turn.works) running_inference_.insert(tenant_id(tenant_of(w)));
      return turn;
    }
    wait = std::min(wait, d.wait);  // an owed training turn's wait (above) may be the sooner
  }
  if (serves_training && !training_owed && !training_.empty()) return training_turn();
  return std::nullopt;
}

std::vector<Work> WorkQueues::drain() {
  std::vector<Work> out;
  for (auto* q : {&inference_, &training_})
    for (auto& w : *q) out.push_back(std::move(w));
  inference_.clear();
  training_.clear();
  return out;
}

}  // namespace nexus::model::detail
