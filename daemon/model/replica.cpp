#include "daemon/model/replica.hpp"

#include <c10/core/DeviceGuard.h>
#include <torch/torch.h>

#include <cmath>

#include "daemon/fault/fault_plan.hpp"
#include "daemon/log/log_text.hpp"
#include "daemon/model/adapted_backbone.hpp"
#include "daemon/model/feature_cache.hpp"
#include "daemon/model/policy_port.hpp"
#include "daemon/model/torchscript_backbone.hpp"

namespace nexus::model::detail {

using daemon::log_text;
using daemon::LogLevel;
using metrics::Service;

// An RL job's view of its tenant's replica: its rollout steps go on the Inference Queue and its
// update minibatches on the Training Queue, like any tenant's requests.
class Replica::Policy final : public PolicyPort {
 public:
  Policy(Replica& replica, std::string tenant) : replica_(replica), tenant_(std::move(tenant)) {}
  Acted act(const torch::Tensor& images, const torch::Tensor& tokens, const torch::Tensor& mask,
            const torch::Tensor& state) override {
    ActWork w;
    w.tenant = tenant_, w.images = images, w.tokens = tokens, w.mask = mask, w.state = state;
    auto done = w.done.get_future();
    replica_.submit(std::move(w));
    return done.get();
  }
  void with_slot(const std::function<void(TenantSlot&)>& fn) override {
    SlotWork w;
    w.tenant = tenant_, w.fn = fn;
    auto done = w.done.get_future();
    replica_.submit(std::move(w));
    done.get();
  }
  void keep_version(std::uint64_t version) override { replica_.registry_->keep(tenant_, version); }
  std::int64_t image_size() const override { return replica_.backbone().image_size; }
  std::int64_t max_tokens() const override { return replica_.backbone().max_tokens; }
  std::int64_t feature_dim() const override { return replica_.backbone().dim; }

 private:
  Replica& replica_;
  std::string tenant_;
};

Replica::Replica(const ModelConfig& config, torch::Device device, const std::string& role_name,
                 std::shared_ptr<metrics::Accounting> accounting, daemon::HealthManager* health, UserQuotas& quotas,
                 std::shared_ptr<FeatureCache> cache)
    : config_(config),
      device_(device),
      device_name_(device.str()),
      accounting_(std::move(accounting)),
      health_(health) {
  const bool builtin = config.backbone != "torchscript" && config.backbone != "aoti";
  if (config.backbone == "torchscript") {
    if (config.weights.empty()) throw std::runtime_error("--backbone torchscript needs --weights FILE.pt");
    backbone_ = load_torchscript_backbone(config.weights, device_);
  } else if (config.backbone == "aoti") {
    if (config.weights.empty()) throw std::runtime_error("--backbone aoti needs --weights FILE.pt2");
    backbone_ = load_aoti_backbone(config.weights, device_);
  } else {
    auto bc = named_backbone(config.backbone);
    if (!bc) throw std::runtime_error("unknown backbone '" + config.backbone + "' (tiny, small, torchscript, aoti)");
    backbone_ = make_adaptable_backbone(*bc, config.weights, device_);
  }
  const auto& bc = backbone_->config();
  log_text(config.weights.empty() ? LogLevel::Warn : LogLevel::Info, "backbone",
           "name=" + bc.name + " device=" + device_name_ +
               " weights=" + (config.weights.empty() ? "none(seeded_init_not_pretrained)" : config.weights) +
               " dim=" + std::to_string(bc.dim) + " image_size=" + std::to_string(bc.image_size) +
               " deterministic=" + (config.deterministic ? "true" : "false"));
  for (const auto& [tenant, p] : config.tenants) share_.configure(tenant_id(tenant), p.weight, p.priority);
  registry_ = std::make_unique<SlotRegistry>(config, bc, device_, quotas, dynamic_cast<AdaptableBackbone*>(backbone_.get()) != nullptr);
  executor_ = std::make_unique<GroupExecutor>(*backbone_, device_, *registry_,
                                              make_cost_model(*backbone_, bc, config.max_request_gflop, builtin),
                                              config.deterministic, accounting_.get(), stats_, stats_mu_);
  if (cache) {
    cache_ = std::move(cache);
    const auto digest = backbone_digest(*backbone_, config.backbone, config.weights);
    executor_->use_feature_cache(cache_.get(), digest);
    log_text(LogLevel::Info, "feature_cache",
             "device=" + device_name_ + " backbone_digest=" + daemon::to_hex(digest).substr(0, 16) +
                 " mib=" + std::to_string(cache_->config().bytes >> 20) + " mib_per_tenant=" +
                 std::to_string(cache_->config().bytes_per_tenant >> 20) + " disk_mib=" +
                 std::to_string(cache_->config().disk_bytes >> 20) + " shared=" + (cache_->config().shared ? "true" : "false"));
  }
  if (health_)
    role_ = health_->add(role_name, std::chrono::milliseconds(0), [this] {
      std::lock_guard lk(threads_mu_);
      retired_.push_back(std::move(thread_));
      thread_ = std::thread([this, g = role_->generation()] { run(g); });
    });
  std::lock_guard lk(threads_mu_);
  thread_ = std::thread([this] { run(1); });
}

Replica::~Replica() {
  if (role_) health_->remove(role_);  // no restart from here on
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  {
    std::lock_guard lk(threads_mu_);
    thread_.join();
    for (auto& t : retired_) t.join();
  }
  std::vector<Work> left;
  {
    std::lock_guard lk(mu_);
    left = queues_.drain();
  }
  for (auto& w : left)
    if (!cancelled(w)) fail(w, Fault::Internal, "nexusd is stopping");
  // The executor has stopped (joined above): the slots are ours to write from this thread.
  const auto written = registry_->checkpoint_all();
  log_text(LogLevel::Info, "slots_checkpointed", "device=" + device_name_ + " slots=" + std::to_string(written));
}

void Replica::submit(Work w) {
  {
    std::lock_guard lk(mu_);
    bool returning = false;
    if (is_inference(w)) {
      last_inference_ = sched::Clock::now();
    } else {
      const auto now = sched::Clock::now();
      auto [it, fresh] = last_training_.try_emplace(tenant_id(tenant_of(w)), now);
      returning = fresh || now - it->second > kIdleGrace;
      it->second = now;
    }
    queues_.push(std::move(w), share_, returning);
  }
  cv_.notify_one();
}

void Replica::tenant_attached(const std::string& tenant, std::uint32_t uid) {
  registry_->attached(tenant, uid);
  std::lock_guard lk(mu_);
  attached_names_.insert(tenant);
  attached_ids_.insert(tenant_id(tenant));
}

void Replica::tenant_detached(const std::string& tenant) {
  registry_->detached(tenant);
  {
    std::lock_guard lk(mu_);
    attached_names_.erase(tenant);
    attached_ids_.erase(tenant_id(tenant));
    attached_.erase(tenant);
  }
  cv_.notify_one();  // a waiting group may now hold every active tenant
}

void Replica::tenant_released(const std::string& tenant) { registry_->released(tenant); }
void Replica::pin_version(const std::string& tenant, std::uint64_t version) { registry_->pin(tenant, version); }
void Replica::unpin_version(const std::string& tenant, std::uint64_t version) { registry_->unpin(tenant, version); }

std::unique_ptr<PolicyPort> Replica::policy_port(const std::string& tenant) {
  return std::make_unique<Policy>(*this, tenant);
}

ModelStats Replica::stats() const {
  ModelStats s;
  {
    std::lock_guard lk(stats_mu_);
    s = stats_;
  }
  std::lock_guard lk(mu_);
  s.inference_queued = queues_.inference_size();
  s.training_queued = queues_.training_size();
  return s;
}

// One generation of the executor's role: a loop that throws reports it and leaves; the Health
// Manager starts the next generation (the queues and slots are as the last turn left them).
void Replica::run(std::uint64_t generation) {
  try {
    serve(generation);
  } catch (const std::exception& e) {
    if (!role_) throw;  // no manager: nothing would restart it
    role_->failed(std::string("executor: ") + e.what(), generation);
  } catch (...) {
    if (!role_) throw;
    role_->failed("executor: unknown exception", generation);
  }
}

// The executor: one turn at a time, inference first (work_queues.hpp).
void Replica::serve(std::uint64_t generation) {
  // Every tensor this thread makes without naming a device lands on the replica's device.
  c10::OptionalDeviceGuard device_guard;
  if (device_.is_cuda()) device_guard.reset_device(device_);
  // A fixed thread count for the daemon's life: reductions split across threads the same way
  // in every pass (deterministic mode relies on it).
  torch::set_num_threads(config_.torch_threads > 0 ? config_.torch_threads
                                                   : static_cast<int>(std::thread::hardware_concurrency()));
  if (config_.deterministic) at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  const sched::TrainingPolicy training{config_.batch, config_.group_window_s};
  auto next_evict = sched::Clock::now();
  for (;;) {
    std::optional<WorkQueues::Turn> turn;
    {
      std::unique_lock lk(mu_);
      if (stop_ || (role_ && !role_->current(generation))) return;
      if (!queues_.empty() && daemon::fault::at(daemon::fault::Point::ExecutorTurn) == daemon::fault::Action::Throw)
        throw std::runtime_error("injected fault: the executor threw");
      std::chrono::microseconds wait = std::chrono::seconds(1);  // wakes for eviction at least
      if (!queues_.empty()) {
        const auto now = sched::Clock::now();
        std::set<std::uint64_t> training_active;
        for (const auto& [id, at] : last_training_)
          if (now - at < std::chrono::seconds(2) && attached_ids_.count(id)) training_active.insert(id);
        std::chrono::microseconds until{0};
        contended_ = training_active.size() > 1 || now - last_inference_ < kContendedWithin;
        const bool owed = busy_train_ < config_.min_training_share * (busy_train_ + busy_infer_);
        turn = queues_.next(now, config_.batch, training, attached_.size(), training_active, share_, owed, until);
        wait = std::min(wait, until);
      }
      if (!turn) cv_.wait_for(lk, wait);
    }
    if (turn) execute(*turn);
    if (const auto now = sched::Clock::now(); now >= next_evict) {
      registry_->evict_idle(now);
      next_evict = now + std::chrono::seconds(1);
    }
    std::lock_guard lk(stats_mu_);  // the registry is the executor's: published here for stats()
    stats_.slots_resident = registry_->resident();
    stats_.slots_evicted = registry_->evicted();
  }
}

void Replica::execute(WorkQueues::Turn& turn) {
  registry_->apply_releases();  // a released name's old slot is gone before its new owner's turn
  const auto service = turn.inference ? Service::Inference : Service::Training;
  const auto& leader = tenant_of(turn.works.front());
  metrics::BusyScope busy(accounting_.get(), service, leader);
  if (accounting_)
    for (const auto& w : turn.works)
      accounting_->queue_wait(tenant_of(w), service,
                              std::chrono::duration<double, std::micro>(busy.started() - arrival_of(w)).count());
  GroupExecutor::Ran ran;
  const double optimizer0 = optimizer_seconds_this_thread();
  bool contended = false;  // as the turn started: another tenant was active
  const bool batchable = is_batchable(turn.works.front());
  if (batchable) {
    std::int64_t split = 0;
    {
      std::lock_guard lk(mu_);
      contended = contended_;
      split = turn.inference ? 0 : split_above();
    }
    ran = executor_->run(turn.works, service, split);
  } else {
    ran.charged = run_single(turn.works.front());
  }
  auto& charged = ran.charged;
  const auto end = sched::Clock::now();
  const double took = std::chrono::duration<double>(end - busy.started()).count();
  {
    std::lock_guard lk(stats_mu_);
    const double optimizer = optimizer_seconds_this_thread() - optimizer0;
    stats_.profile.turns_s += took;
    stats_.profile.optimizer_s += optimizer;
    // A group's heads' time (group_executor) includes its optimizer steps; a single turn (an RL
    // update minibatch, a slot operation) is a head's work throughout.
    stats_.profile.heads_s += (batchable ? 0.0 : took) - optimizer;
  }
  {
    // Each queue's recent share of the executor: exponentially decaying busy seconds
    // (a 5 s time constant), for the training floor.
    std::lock_guard lk(mu_);
    const double decay = std::exp(-std::chrono::duration<double>(end - last_turn_end_).count() / 5.0);
    busy_train_ *= decay, busy_infer_ *= decay;
    (turn.inference ? busy_infer_ : busy_train_) += took;
    last_turn_end_ = end;
    // What training passes cost here, for sizing micro-batches (split_above).
    if (!turn.inference && batchable && ran.samples > 0) turn_sizer_.observe(ran.samples, took);
    for (auto& c : ran.continuations) queues_.push_continuation(std::move(c));
  }
  if (!ran.continuations.empty()) cv_.notify_one();
  if (turn.inference) return;  // fair share is of training compute
  {
    std::lock_guard lk(stats_mu_);
    stats_.longest_training_turn_s = std::max(stats_.longest_training_turn_s, took);
    if (contended)
      stats_.longest_shared_training_turn_s = std::max(stats_.longest_shared_training_turn_s, took);
  }
  std::lock_guard lk(mu_);
  for (const auto& [tenant, seconds] : charged) share_.charge(tenant_id(tenant), seconds);
}

std::int64_t Replica::split_above() const {
  // Alone, a tenant's step stays whole: splitting costs each extra micro-batch a pass's fixed
  // part (measured: about 15% of a batch-128 tenant's rate) and there is nobody to interleave.
  if (config_.deterministic || config_.max_training_turn_s <= 0 || !contended_) return 0;
  // Before any pass is measured, micro-batches of kLeastMicroBatch measure one, rather than a
  // whole first step running unbounded; smaller ones would be mostly fixed cost.
  constexpr std::int64_t kLeastMicroBatch = 8;
  return turn_sizer_.samples_within(config_.max_training_turn_s, kLeastMicroBatch);
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

// A registered, attached tenant is waited for when inference groups form. Its adapter goes in
// the status (nexusctl tenants).
void Replica::note_registered(const std::string& tenant) {
  if (SlotEntry* e = registry_->find(tenant)) {
    const auto described = describe_adapter(e->trainer->head().spec().adapter);
    std::lock_guard lk(stats_mu_);
    if (described.empty()) stats_.adapters.erase(tenant);
    else stats_.adapters[tenant] = described;
  }
  std::lock_guard lk(mu_);
  if (attached_names_.count(tenant)) attached_.insert(tenant);
}

}  // namespace nexus::model::detail
