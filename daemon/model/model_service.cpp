// The model service's front: devices to replicas, tenants to replicas. Each request goes to the
// replica its tenant is placed on (daemon/model/replica.hpp does the serving).
#include "daemon/model/model_service.hpp"

#include <torch/torch.h>

#include "daemon/log/log_text.hpp"
#include "daemon/model/devices.hpp"
#include "daemon/model/feature_cache.hpp"
#include "daemon/model/policy_port.hpp"
#include "daemon/model/replica.hpp"
#include "daemon/model/reproducible_math.hpp"

namespace nexus::model {

ModelService::ModelService(const ModelConfig& config, std::shared_ptr<metrics::Accounting> accounting,
                           daemon::HealthManager* health)
    : quotas_(config.state_dir, config.users) {
  // One OpenMP thread here: a team it led would outlive loading and throttle every lane's (gpu.md).
  torch::set_num_threads(1);
  // Before any tensor math: MKL reads its branch once, at its first call.
  if (config.deterministic)
    daemon::log_text(daemon::LogLevel::Info, "deterministic",
                     at::hasMKL() ? "mkl_cbwr=" + pin_math_library_branch()
                                  : std::string("blas=not_mkl (no code branch to pin: OpenBLAS and others choose theirs)"));
  // A device that cannot run here is refused now, with the reason: better than a daemon that
  // starts and then fails every tenant's first step.
  const auto devices = resolve_devices(config.devices);
  std::string names;
  for (const auto& d : devices) names += (names.empty() ? "" : ",") + d.str();
  daemon::log_text(daemon::LogLevel::Info, "devices",
                   "replicas=" + names + (config.devices.empty() ? " (default: every visible CUDA device, else the CPU)" : ""));
  for (const auto& [tenant, p] : config.tenants) {
    if (p.replica < 0) continue;
    if (static_cast<std::size_t>(p.replica) >= devices.size())
      throw std::runtime_error("tenants." + tenant + ".replica = " + std::to_string(p.replica) + ": there are only " +
                               std::to_string(devices.size()) + " device(s) in model.devices");
    pinned_[tenant] = p.replica;
  }
  if (config.feature_cache.bytes > 0) {
    auto fc = config.feature_cache;
    if (fc.dir.empty()) fc.dir = config.state_dir + "/feature-cache";
    feature_cache_ = std::make_shared<FeatureCache>(std::move(fc));
  }
  for (std::size_t i = 0; i < devices.size(); ++i)
    replicas_.push_back(std::make_unique<detail::Replica>(
        config, devices[i], devices.size() == 1 ? "executor" : "executor." + std::to_string(i), accounting, health,
        quotas_, feature_cache_));
}

ModelService::~ModelService() = default;

detail::Replica& ModelService::replica_for(const std::string& tenant) {
  std::lock_guard lk(placement_mu_);
  if (auto it = placement_.find(tenant); it != placement_.end()) return *replicas_[it->second];
  std::size_t chosen = 0;
  if (auto pin = pinned_.find(tenant); pin != pinned_.end()) {
    chosen = static_cast<std::size_t>(pin->second);
  } else {
    std::vector<std::size_t> load(replicas_.size(), 0);
    for (const auto& [name, r] : placement_) ++load[r];
    for (std::size_t i = 1; i < load.size(); ++i)
      if (load[i] < load[chosen]) chosen = i;  // ties: the lowest index
  }
  placement_[tenant] = chosen;
  return *replicas_[chosen];
}

void ModelService::submit(Request request) {
  auto& replica = replica_for(request.tenant);
  replica.submit(detail::TenantWork{std::move(request)});
}

void ModelService::tenant_attached(const std::string& tenant, std::uint32_t uid) {
  replica_for(tenant).tenant_attached(tenant, uid);
}
void ModelService::tenant_detached(const std::string& tenant) { replica_for(tenant).tenant_detached(tenant); }

void ModelService::tenant_released(const std::string& tenant) {
  replica_for(tenant).tenant_released(tenant);
  std::lock_guard lk(placement_mu_);
  placement_.erase(tenant);  // the name's next owner is placed afresh
}

void ModelService::pin_version(const std::string& tenant, std::uint64_t version) {
  replica_for(tenant).pin_version(tenant, version);
}
void ModelService::unpin_version(const std::string& tenant, std::uint64_t version) {
  replica_for(tenant).unpin_version(tenant, version);
}

std::unique_ptr<PolicyPort> ModelService::policy_port(const std::string& tenant) {
  return replica_for(tenant).policy_port(tenant);
}

ModelStats ModelService::stats() const {
  ModelStats total;
  std::vector<std::size_t> placed(replicas_.size(), 0);
  {
    std::lock_guard lk(placement_mu_);
    for (const auto& [name, r] : placement_) ++placed[r];
  }
  for (std::size_t i = 0; i < replicas_.size(); ++i) {
    const auto s = replicas_[i]->stats();
    total.groups += s.groups, total.grouped_requests += s.grouped_requests, total.samples += s.samples;
    total.backbone_seconds += s.backbone_seconds, total.head_seconds += s.head_seconds;
    total.input_bytes_packed += s.input_bytes_packed, total.rerun_groups += s.rerun_groups;
    total.split_steps += s.split_steps;
    total.adapters.insert(s.adapters.begin(), s.adapters.end());
    total.slots_resident += s.slots_resident, total.slots_evicted += s.slots_evicted;
    total.inference_queued += s.inference_queued, total.training_queued += s.training_queued;
    total.longest_training_turn_s = std::max(total.longest_training_turn_s, s.longest_training_turn_s);
    total.longest_shared_training_turn_s =
        std::max(total.longest_shared_training_turn_s, s.longest_shared_training_turn_s);
    total.replicas.push_back({replicas_[i]->device(), placed[i], s.groups, s.samples, s.lanes});
  }
  if (feature_cache_) total.feature_cache = feature_cache_->stats();
  return total;
}

std::vector<UserUsage> ModelService::user_usage() const { return quotas_.usage(); }

const BackboneConfig& ModelService::backbone() const { return replicas_.front()->backbone(); }

}  // namespace nexus::model
