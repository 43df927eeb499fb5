#include "daemon/model/replica.hpp"

#include <torch/torch.h>

#include "daemon/log/log_text.hpp"
#include "daemon/model/adapted_backbone.hpp"
#include "daemon/model/feature_cache.hpp"
#include "daemon/model/policy_port.hpp"
#include "daemon/model/torchscript_backbone.hpp"

namespace nexus::model::detail {

using daemon::log_text;
using daemon::LogLevel;

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
  void with_adapted_slot(const std::function<void(TenantSlot&, const AdaptedPooled&)>& fn) override {
    auto* adaptable = dynamic_cast<AdaptableBackbone*>(replica_.backbone_.get());
    if (!adaptable) throw std::runtime_error("this backbone takes no adapters");
    with_slot([&](TenantSlot& slot) {
      const LoraAdapterImpl* adapter = slot.adapter(0);
      if (!adapter) throw std::runtime_error("the tenant's head has no adapter");
      // A pass of this tenant's rows alone, on the lane running its turn: the frozen backbone is
      // read by every lane at once (adapted_backbone.hpp); only this slot's adapter records grads.
      const AdaptedPooled pass = [&](const torch::Tensor& images, const torch::Tensor& tokens, const torch::Tensor& mask) {
        AdapterBatch a;
        a.segments.push_back({0, images.size(0), adapter});
        const auto dev = slot.device();
        return adaptable->forward_adapted(images.to(dev), tokens.to(dev), mask.to(dev, torch::kBool), a, /*grad=*/true).pooled;
      };
      fn(slot, pass);
    });
  }
  sched::TurnBudget update_turn() const override {
    MutexLock lk(replica_.mu_);
    return replica_.turn_budget({tenant_id(tenant_)});
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
      health_(health),
      pass_threads_(PassThreads::cap_for(config.torch_threads), config.deterministic,
                    std::max(1, config.inference_lanes) + std::max(0, config.training_lanes)) {
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
  precision_ = configured_precision(config.precision, config.backbone, device_);
  backbone_ = with_precision(std::move(backbone_), precision_, device_);
  const auto& bc = backbone_->config();
  log_text(config.weights.empty() ? LogLevel::Warn : LogLevel::Info, "backbone",
           "name=" + bc.name + " device=" + device_name_ +
               " weights=" + (config.weights.empty() ? "none(seeded_init_not_pretrained)" : config.weights) +
               " dim=" + std::to_string(bc.dim) + " image_size=" + std::to_string(bc.image_size) +
               " precision=" + std::string(precision_name(precision_)) +
               " deterministic=" + (config.deterministic ? "true" : "false"));
  for (const auto& [tenant, p] : config.tenants) share_.configure(tenant_id(tenant), p.weight, p.priority);
  registry_ = std::make_unique<SlotRegistry>(config, bc, device_, quotas, dynamic_cast<AdaptableBackbone*>(backbone_.get()) != nullptr);
  // Deterministic mode keeps one lane: bitwise results need one fixed order of work.
  const auto inference_lanes = config.deterministic ? 1 : static_cast<std::size_t>(std::max(1, config.inference_lanes));
  const std::size_t training_lanes = config.deterministic ? 0 : static_cast<std::size_t>(std::max(0, config.training_lanes));
  const bool training_lane = training_lanes > 0;
  const std::size_t lanes = inference_lanes + training_lanes;
  {
    MutexLock lk(mu_);
    queues_.set_concurrent_training(training_lanes > 1);
  }
  stats_.lanes.resize(lanes);
  for (std::size_t i = 0; i < lanes; ++i) {
    auto lane = std::make_unique<Lane>();
    lane->index = i;
    using S = WorkQueues::Serves;
    lane->serves = i >= inference_lanes ? S::Training : i == 0 && !training_lane ? S::Both : S::Inference;
    stats_.lanes[i].serves = lane->serves == S::Both ? "both" : lane->serves == S::Inference ? "inference" : "training";
    lane->executor = std::make_unique<GroupExecutor>(GroupExecutorParts{
        .backbone = *backbone_,
        .device = device_,
        .slots = *registry_,
        .cost = make_cost_model(*backbone_, bc, config.max_request_gflop, builtin),
        .deterministic = config.deterministic,
        .accounting = accounting_.get(),
        .stats = stats_,
        .profile = stats_.lanes[i],
        .stats_mu = stats_mu_});
    lanes_.push_back(std::move(lane));
  }
  if (cache) {
    cache_ = std::move(cache);
    const auto digest = backbone_digest(*backbone_, config.backbone, config.weights, precision_name(precision_));
    for (auto& lane : lanes_) lane->executor->use_feature_cache(cache_.get(), digest);
    log_text(LogLevel::Info, "feature_cache",
             "device=" + device_name_ + " backbone_digest=" + daemon::to_hex(digest).substr(0, 16) +
                 " mib=" + std::to_string(cache_->config().bytes >> 20) + " mib_per_tenant=" +
                 std::to_string(cache_->config().bytes_per_tenant >> 20) + " disk_mib=" +
                 std::to_string(cache_->config().disk_bytes >> 20) + " shared=" + (cache_->config().shared ? "true" : "false"));
  }
  log_text(LogLevel::Info, "executor_lanes",
           "device=" + device_name_ + " inference=" + std::to_string(inference_lanes) +
               " training=" + (training_lane ? std::to_string(training_lanes) : "0(on_the_first)"));
  // Role names: lane 0 keeps the replica's (what `nexusctl status` has always called its
  // executor), then "<it>.inference1", ..., "<it>.training", "<it>.training2", ...
  for (std::size_t i = 0; i < lanes; ++i)
    start_lane(*lanes_[i], i == 0                ? role_name
                           : i == inference_lanes ? role_name + ".training"
                           : i > inference_lanes  ? role_name + ".training" + std::to_string(i - inference_lanes + 1)
                                                  : role_name + ".inference" + std::to_string(i));
}

void Replica::start_lane(Lane& lane, const std::string& role_name) {
  if (health_)
    lane.role = health_->add(role_name, std::chrono::milliseconds(0), [this, &lane] {
      std::lock_guard lk(threads_mu_);
      lane.retired.push_back(std::move(lane.thread));
      lane.thread = std::thread([this, &lane, g = lane.role->generation()] { run(lane, g); });
    });
  std::lock_guard lk(threads_mu_);
  lane.thread = std::thread([this, &lane] { run(lane, 1); });
}

Replica::~Replica() {
  for (auto& lane : lanes_)
    if (lane->role) health_->remove(lane->role);  // no restart from here on
  {
    MutexLock lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  {
    std::lock_guard lk(threads_mu_);
    for (auto& lane : lanes_) {
      lane->thread.join();
      for (auto& t : lane->retired) t.join();
    }
  }
  std::vector<Work> left;
  {
    MutexLock lk(mu_);
    left = queues_.drain();
  }
  for (auto& w : left)
    if (!cancelled(w)) fail(w, Fault::Internal, "nexusd is stopping");
  // The lanes have stopped (joined above): the slots are ours to write from this thread.
  const auto written = registry_->checkpoint_all();
  log_text(LogLevel::Info, "slots_checkpointed", "device=" + device_name_ + " slots=" + std::to_string(written));
}

void Replica::submit(Work w) {
  {
    MutexLock lk(mu_);
    bool returning = false;
    if (is_inference(w)) {
      last_inference_ = sched::Clock::now();
      inference_pace_.requested(tenant_id(tenant_of(w)), last_inference_);
    } else {
      const auto now = sched::Clock::now();
      auto [it, fresh] = last_training_.try_emplace(tenant_id(tenant_of(w)), now);
      returning = fresh || now - it->second > kIdleGrace;
      it->second = now;
    }
    queues_.push(std::move(w), share_, returning);
  }
  cv_.notify_all();  // whichever lane serves its queue
}

void Replica::tenant_attached(const std::string& tenant, std::uint32_t uid) {
  registry_->attached(tenant, uid);
  MutexLock lk(mu_);
  attached_ids_.insert(tenant_id(tenant));
}

void Replica::tenant_detached(const std::string& tenant) {
  registry_->detached(tenant);
  {
    MutexLock lk(mu_);
    attached_ids_.erase(tenant_id(tenant));
    inference_pace_.forget(tenant_id(tenant));
  }
  cv_.notify_all();  // a waiting group may now hold every active tenant
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
  MutexLock lk(mu_);
  s.inference_queued = queues_.inference_size();
  s.training_queued = queues_.training_size();
  return s;
}

// nexusctl tenants shows a registered tenant's adapter.
void Replica::note_registered(const std::string& tenant) {
  if (SlotEntry* e = registry_->find(tenant)) {
    const auto described = describe_adapter(e->trainer->head().spec().adapter);
    std::lock_guard lk(stats_mu_);
    if (described.empty()) stats_.adapters.erase(tenant);
    else stats_.adapters[tenant] = described;
  }
}

}  // namespace nexus::model::detail
