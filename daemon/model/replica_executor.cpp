// A replica's executor lanes: each lane's role generations, the loop that takes one turn at a time
// from the queues it serves (inference first), a grouped turn's execution and accounting, and
// turns of their own.
#include <c10/core/DeviceGuard.h>
#include <malloc.h>
#include <torch/torch.h>

#include <cmath>
#include <exception>

#include "daemon/fault/fault_plan.hpp"
#include "daemon/model/replica.hpp"

namespace nexus::model::detail {

using metrics::Service;

namespace {
// nexusd keeps what its passes freed in glibc's arenas while it works (process_settings.cpp):
// the next pass needs as much again. Once the lanes have been idle for kTrimAfterIdle, that
// memory goes back to the system, once per quiet spell, so an idle daemon does not hold its
// busiest moment's pages (tested: resources_test.cpp).
void trim_when_quiet(sched::Clock::time_point now, sched::Clock::time_point last_turn_end,
                     sched::Clock::time_point& trimmed_after) {
  constexpr auto kTrimAfterIdle = std::chrono::seconds(5);
  if (now - last_turn_end < kTrimAfterIdle || last_turn_end == trimmed_after) return;
  ::malloc_trim(0);
  trimmed_after = last_turn_end;
}
}  // namespace

// One generation of the executor's role: a loop that throws reports it and leaves; the Health
// Manager starts the next generation (the queues and slots are as the last turn left them).
void Replica::run(Lane& lane, std::uint64_t generation) {
  // Until the next generation's first look at the queues, the lane reads as busy (a turn that
  // throws leaves it so: Unmark), and the lanes after it are woken: they do not leave work for a
  // thread that is not there.
  const auto down = [&] {
    { MutexLock lk(mu_); lane.busy = true; }
    cv_.notify_all();
  };
  try {
    serve(lane, generation);
  } catch (const std::exception& e) {
    if (!lane.role) throw;  // no manager: nothing would restart it
    down();
    lane.role->failed(std::string("executor: ") + e.what(), generation);
  } catch (...) {
    if (!lane.role) throw;
    down();
    lane.role->failed("executor: unknown exception", generation);
  }
}

// A lane: one turn at a time from the queues it serves, inference first (work_queues.hpp).
void Replica::serve(Lane& lane, std::uint64_t generation) {
  // Every tensor this thread makes without naming a device lands on the replica's device.
  c10::OptionalDeviceGuard device_guard;
  if (device_.is_cuda()) device_guard.reset_device(device_);
  // The cap: what a pass alone takes. Each pass sizes its own team (PassThreads::Scope in
  // execute) except in deterministic mode, which keeps this count for the daemon's life:
  // reductions split across threads the same way in every pass.
  torch::set_num_threads(pass_threads_.cap());
  (void)at::get_num_threads();  // LibTorch's per-thread first-use set-up now, not inside a pass (it resets the team)
  pass_threads_.release_pool(lane.index);  // this generation's thread holds no OpenMP pool yet
  if (config_.deterministic) at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  const sched::TrainingPolicy training{config_.batch, config_.group_window_s};
  auto next_evict = sched::Clock::now();
  sched::Clock::time_point trimmed_after{};  // the last turn's end when lane 0 last trimmed
  for (;;) {
    std::optional<WorkQueues::Turn> turn;
    bool release = false;  // give this thread's OpenMP pool back (pass_threads.hpp)
    // With several training lanes a training turn's tenants are marked running from its pick
    // (WorkQueues::next) until execute charges the turn; this guard unmarks them when the turn
    // throws instead: else they would never train again.
    // An inference turn's tenants are marked running from the pick until the turn ends (whatever
    // way): another lane's group does not wait for them meanwhile.
    // And the lane reads as busy from the pick until the turn ends.
    struct Unmark {
      Replica& replica;
      Lane& lane;
      std::vector<std::uint64_t> tenants, inference;
      ~Unmark() {
        if (!lane.busy && tenants.empty() && inference.empty()) return;  // busy: written by this thread only
        {
          MutexLock lk(replica.mu_);
          lane.busy = std::uncaught_exceptions() > 0;  // a lane going down never reads as idle
          const auto now = sched::Clock::now();
          replica.queues_.training_done(tenants, now, {});  // failed: not expected back
          replica.queues_.inference_done(inference);
          for (auto id : inference) replica.inference_pace_.answered(id, now);
        }
        // Another lane may take their work now (training, or inference held while they ran).
        if (!tenants.empty() || !inference.empty()) replica.cv_.notify_all();
      }
    } unmark{*this, lane, {}, {}};
    {
      MutexLock lk(mu_);
      if (stop_ || (lane.role && !lane.role->current(generation))) return;
      const bool work = queues_.has_work(lane.serves);
      if (work && daemon::fault::at(daemon::fault::Point::ExecutorTurn) == daemon::fault::Action::Throw)
        throw std::runtime_error("injected fault: the executor threw");
      std::chrono::microseconds wait = std::chrono::seconds(1);  // wakes for eviction at least
      if (work && !earlier_lane_idle(lane)) {
        const auto now = sched::Clock::now();
        const auto active = training_active(now);
        std::chrono::microseconds until{0};
        contended_ = active.size() > 1 || now - last_inference_ < kContendedWithin;
        const bool owed = busy_train_ < config_.min_training_share * (busy_train_ + busy_infer_);
        const auto due = lane.serves == WorkQueues::Serves::Training ? decltype(inference_expected(now)){}
                                                                      : inference_expected(now);  // training lanes form no groups
        turn = queues_.next(now, config_.batch, training, due, active, share_, owed, until, lane.serves);
        wait = std::min(wait, until);
        if (turn && !turn->inference && queues_.concurrent_training())
          for (const auto& w : turn->works) unmark.tenants.push_back(tenant_id(tenant_of(w)));
        if (turn && turn->inference)
          for (const auto& w : turn->works) unmark.inference.push_back(tenant_id(tenant_of(w)));
      }
      lane.busy = turn.has_value();
      if (turn && queues_.has_work(lane.serves)) cv_.notify_all();  // a later lane may take the rest now
      release = !turn && pass_threads_.release_asked(lane.index);   // another lane's pass wants the cores
      if (!turn && !release) cv_.wait_for(lk.native(), wait);
    }
    if (release) {
      pass_threads_.release_pool(lane.index);  // outside the lock: its workers exit and are joined
      continue;
    }
    if (turn) execute(lane, *turn, unmark.tenants);  // unmarks them with the turn's charge
    if (lane.index != 0) continue;  // the first lane keeps the registry's housekeeping
    if (const auto now = sched::Clock::now(); now >= next_evict) {
      registry_->evict_idle(now);
      next_evict = now + std::chrono::seconds(1);
      bool quiet = true;  // every lane of this replica idle: since the last turn's end
      sched::Clock::time_point last_end;
      {
        MutexLock lk(mu_);
        for (const auto& l : lanes_) quiet = quiet && !l->busy;
        last_end = last_turn_end_;
      }
      if (quiet) trim_when_quiet(now, last_end, trimmed_after);
    }
    const auto resident = registry_->resident(), evicted = registry_->evicted();
    std::lock_guard lk(stats_mu_);  // published here for stats()
    stats_.slots_resident = resident;
    stats_.slots_evicted = evicted;
  }
}

// Lanes that serve one queue take its turns in order: a later lane only while every earlier one
// runs a turn. Why: a pass alone then runs on the same lane each time, so only that lane's thread
// leads a wide OpenMP team (pass_threads.hpp), and libgomp's workers keep spinning between a
// pass's operators only while its threads, idle teams' included, are no more than the cores.
bool Replica::earlier_lane_idle(const Lane& lane) const {
  for (std::size_t i = 0; i < lane.index; ++i) {
    const Lane& earlier = *lanes_[i];
    if (!earlier.busy && (earlier.serves == lane.serves || earlier.serves == WorkQueues::Serves::Both)) return true;
  }
  return false;
}

void Replica::execute(Lane& lane, WorkQueues::Turn& turn, std::vector<std::uint64_t>& running) {
  // The slots this turn touches are its own until it ends (the other lane's turns wait for them).
  std::vector<std::string> tenants;
  for (const auto& w : turn.works) tenants.push_back(tenant_of(w));
  const auto asked = sched::Clock::now();
  const auto lease = registry_->lease(tenants);
  const double lease_s = std::chrono::duration<double>(sched::Clock::now() - asked).count();
  registry_->apply_releases(lease);  // a released name's old slot is gone before its new owner's turn
  const auto service = turn.inference ? Service::Inference : Service::Training;
  const auto& leader = tenant_of(turn.works.front());
  metrics::BusyScope busy(accounting_.get(), service, leader);
  if (accounting_)
    for (const auto& w : turn.works)
      accounting_->queue_wait(tenant_of(w), service,
                              std::chrono::duration<double, std::micro>(busy.started() - arrival_of(w)).count());
  GroupExecutor::Ran ran;
  const double optimizer0 = optimizer_seconds_this_thread();
  bool contended = false;  // as the turn started: another tenant was active (any turn: an RL
                           // update minibatch too, which longest_shared_training_turn_s missed)
  const bool batchable = is_batchable(turn.works.front());
  std::int64_t split = 0;
  {
    MutexLock lk(mu_);
    contended = contended_;
    if (batchable && !turn.inference) split = split_above(turn.works);
  }
  // Sized to the lanes running and the other lanes' OpenMP pools; a lane asked for its pool
  // gives it back when it next finds nothing to do (serve).
  const PassThreads::Scope team(pass_threads_, lane.index, lane.serves == WorkQueues::Serves::Training);
  if (team.asked_release()) {
    { MutexLock lk(mu_); }  // an asked lane between its look at the ledger and its wait hears this
    cv_.notify_all();
  }
  if (batchable) {
    ran = lane.executor->run(turn.works, service, split);
  } else {
    ran.charged = run_single(turn.works.front());
  }
  auto& charged = ran.charged;
  const auto end = sched::Clock::now();
  const double took = std::chrono::duration<double>(end - busy.started()).count();
  {
    std::lock_guard lk(stats_mu_);
    const double optimizer = optimizer_seconds_this_thread() - optimizer0;
    auto& profile = stats_.lanes[lane.index];
    profile.turns_s += took;
    profile.optimizer_s += optimizer;
    profile.lease_s += lease_s;  // before the turn began: not in `took`
    if (team.team() < pass_threads_.cap()) profile.narrow_s += took;
    // A group's heads' time (group_executor) includes its optimizer steps; a single turn (an RL
    // update minibatch, a slot operation) is a head's work throughout.
    profile.heads_s += (batchable ? 0.0 : took) - optimizer;
  }
  {
    // Each queue's recent share of the executor: exponentially decaying busy seconds
    // (a 5 s time constant), for the training floor.
    MutexLock lk(mu_);
    const double decay = std::exp(-std::chrono::duration<double>(end - last_turn_end_).count() / 5.0);
    busy_train_ *= decay, busy_infer_ *= decay;
    (turn.inference ? busy_infer_ : busy_train_) += took;
    last_turn_end_ = end;
    // What training passes cost here, for sizing micro-batches (split_above).
    if (!turn.inference && batchable && ran.samples > 0) turn_sizer_.observe(ran.samples, took);
    for (auto& c : ran.continuations) queues_.push_continuation(std::move(c));
  }
  if (!ran.continuations.empty()) cv_.notify_all();
  if (turn.inference) return;  // fair share is of training compute
  {
    std::lock_guard lk(stats_mu_);
    stats_.longest_training_turn_s = std::max(stats_.longest_training_turn_s, took);
    if (contended)
      stats_.longest_shared_training_turn_s = std::max(stats_.longest_shared_training_turn_s, took);
  }
  {
    MutexLock lk(mu_);
    for (const auto& [tenant, seconds] : charged) share_.charge(tenant_id(tenant), seconds);
    // Unmarked with the charge, under one lock: a step pushed in between would otherwise be
    // lifted to the charged virtual time of a tenant that still reads as running.
    queues_.training_done(running, end, end - busy.started());
    // A training lane is idle from here (it only loops back to pick), and says so with the
    // unmark: else a later training lane, woken below, found it still busy and took the
    // tenant's next step, already sent on the reply, on a cold OpenMP pool and arena (5-8% of a
    // lone tenant's turn time, measured). A lane that also serves inference keeps reading busy
    // until its housekeeping is done (serve), so the inference lanes after it are not held back.
    if (lane.serves == WorkQueues::Serves::Training) lane.busy = false;
  }
  if (!running.empty()) cv_.notify_all();  // another training lane may take their work now
  running.clear();
}

std::set<std::uint64_t> Replica::training_active(sched::Clock::time_point now) const {
  std::set<std::uint64_t> active;
  for (const auto& [id, at] : last_training_)
    if (now - at < std::chrono::seconds(2) && attached_ids_.count(id)) active.insert(id);
  // A tenant whose step has waited longer than that (behind a long turn), or whose turn has run
  // longer on another training lane, is active all the same: else the turn after (or beside) a
  // long one would run whole as if it were alone.
  std::set<std::uint64_t> waiting;
  queues_.training_tenants(waiting);
  for (auto id : waiting)
    if (attached_ids_.count(id)) active.insert(id);
  return active;
}

// Not every attached tenant (as before): one that only trains, or comes back later than the
// window (an RL job whose simulators step longer than T, one in its update), never joined the
// group, and every group beside it waited out T (sched/inference_pace.hpp).
std::map<std::uint64_t, sched::Clock::time_point> Replica::inference_expected(sched::Clock::time_point now) const {
  auto due = inference_pace_.expected(now, kContendedWithin);
  for (auto it = due.begin(); it != due.end();)  // (a loop: the analysis cannot see the lock in a lambda)
    it = attached_ids_.count(it->first) ? std::next(it) : due.erase(it);
  return due;
}

std::int64_t Replica::split_above(const std::vector<Work>& turn) const {
  std::set<std::uint64_t> in_turn;
  for (const auto& w : turn) in_turn.insert(tenant_id(tenant_of(w)));
  const auto budget = turn_budget(in_turn);
  return budget.seconds > 0 ? turn_sizer_.samples_within(budget.seconds, budget.least) : 0;
}

sched::TurnBudget Replica::turn_budget(const std::set<std::uint64_t>& in_turn) const {
  // Alone, a tenant's step stays whole: splitting costs each extra micro-batch a pass's fixed
  // part (measured: about 15% of a batch-128 tenant's rate) and there is nobody to interleave.
  if (config_.deterministic || config_.max_training_turn_s <= 0 || !contended_) return {};
  // Before any pass is measured, micro-batches of kLeastMicroBatch measure one, rather than a
  // whole first step running unbounded; smaller ones would be mostly fixed cost.
  constexpr std::int64_t kLeastMicroBatch = 8;
  // The turn's tenants count among the active ones: a light tenant's step grouped with a heavy
  // one's is cut as it would be beside it.
  std::set<std::uint64_t> active = training_active(sched::Clock::now());
  std::vector<double> turn_weights, active_weights;
  for (auto id : in_turn) {
    turn_weights.push_back(share_.weight(id));
    active.insert(id);
  }
  for (auto id : active) active_weights.push_back(share_.weight(id));
  return sched::weighted_turn({config_.max_training_turn_s, kLeastMicroBatch}, turn_weights, active_weights);
}

// A turn of its own: a slot operation, or an RL update minibatch.
std::map<std::string, double> Replica::run_single(Work& w) {
  std::map<std::string, double> charged;
  if (cancelled(w)) return charged;
  const auto& tenant = tenant_of(w);
  const auto t0 = sched::Clock::now();
  if (auto* s = std::get_if<SlotWork>(&w)) {
    std::string refused;
    auto* slot = registry_->find(tenant, &refused);
    if (!slot) {
      if (refused.empty()) fail(w, Fault::NotRegistered, "the tenant has no slot: register it first");
      else fail(w, Fault::OverQuota, refused);
      return charged;
    }
    try {
      const auto published = slot->trainer->latest_version();
      s->fn(*slot->trainer);
      // An RL job publishes after every update (not after each minibatch's slot work).
      if (slot->trainer->latest_version() != published) registry_->retain_versions(tenant);
      s->done.set_value();
    } catch (const std::exception& e) {
      fail(w, Fault::Internal, e.what());
    }
    const double seconds = std::chrono::duration<double>(sched::Clock::now() - t0).count();
    charged[tenant] = seconds;
    if (accounting_) accounting_->charge(tenant, Service::Training, seconds, 0, 1);
    return charged;
  }
  auto& r = std::get<TenantWork>(w).request;
  r.done(std::visit(
      [&](auto& o) -> Result {
        using T = std::decay_t<decltype(o)>;
        if constexpr (std::is_same_v<T, op::Register>) {
          auto result = registry_->register_tenant(tenant, r.uid, o);
          if (!std::holds_alternative<Failure>(result)) note_registered(tenant);
          return result;
        } else if constexpr (std::is_same_v<T, op::Load>) {
          auto result = registry_->load(tenant, r.uid, o.tag);
          if (!std::holds_alternative<Failure>(result)) note_registered(tenant);
          return result;
        } else if constexpr (std::is_same_v<T, op::Backbone>) {
          const auto& bb = backbone_->config();
          return BackboneInfo{bb.name, bb.image_size, bb.max_views, bb.max_tokens, bb.dim};
        } else if constexpr (std::is_same_v<T, op::Publish>) {
          return registry_->publish(tenant);
        } else if constexpr (std::is_same_v<T, op::Save>) {
          return registry_->save(tenant, r.uid, o.tag);
        } else if constexpr (std::is_same_v<T, op::Digest>) {
          return registry_->digest(tenant);
        } else {
          return Failure{Fault::Internal, "a batchable request went alone"};
        }
      },
      r.op));
  return charged;
}

}  // namespace nexus::model::detail
