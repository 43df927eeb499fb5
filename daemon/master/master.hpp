// The Master: the only part of nexusd that knows every service. The reactor hands it verified
// requests; it routes each by kind, top-down:
//   model requests        -> the model service (typed; answered from its executor)
//   environment requests  -> the Environment Service     } on the tenant's own lane
//   dataset requests      -> the dataset store (+ model)  } (master/tenant_lanes.hpp), so a
//   job requests          -> the job registry             } slow call holds up its tenant only
// and owns the jobs and the accounting. Every request's memory is charged to the tenant that
// sent it (a bound per tenant, typed QuotaExceeded beyond it).
//
// Thread safety: the ServicePort members from the reactor thread; replies go out through the
// Completion from the executor, lanes and job threads (it must only queue).
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "daemon/env/dataset_store.hpp"
#include "daemon/env/engine_registry.hpp"
#include "daemon/env/env_service.hpp"
#include "daemon/env/external_session.hpp"
#include "daemon/env/rollout_autoscaler.hpp"
#include "daemon/ipc/service_port.hpp"
#include "daemon/jobs/job_registry.hpp"
#include "daemon/model/model_service.hpp"

namespace nexus::daemon {

struct MasterConfig {
  model::ModelConfig model;
  env::EnvLimits env;
  std::map<std::string, std::string> external_envs;  // name -> socket of its simulator process
  env::ExternalTimeouts external_timeouts;
  int rollout_listener = -1;  // where rollout engines attach (owned by the Master; -1: none)
  std::string rollout_socket;  // its path, for the autoscaler's spawn command
  env::EngineLimits engines;
  env::AutoscalePolicy autoscale;            // max_engines 0: off
  std::vector<std::string> autoscale_spawn;  // argv that starts one engine
  env::DatasetLimits datasets;
  JobLimits jobs;
  std::uint64_t request_bytes_per_tenant = 64ull << 20;  // queued requests' memory, per tenant
  bool record_timeline = false;                          // keep busy intervals (nexus-bench workload)
};

class Master final : public ServicePort {
 public:
  using Completion = std::function<void(std::uint64_t session_id, std::vector<std::uint8_t> reply)>;

  // Loads the backbone (throws std::runtime_error) and starts the services.
  Master(const MasterConfig& config, Completion complete);
  ~Master() override;
  Master(const Master&) = delete;
  Master& operator=(const Master&) = delete;

  void submit(ServiceRequest request) override;
  void tenant_attached(const std::string& tenant, uid_t uid) override;
  void tenant_detached(const std::string& tenant) override;
  void tenant_released(const std::string& tenant) override;
  ServiceStatus status(std::optional<double> usage_since_s) const override;
  CancelResult cancel_job(std::uint64_t job, uid_t requester) override;
  ScaleResult scale(const std::string& what, int count) override;

  // Busy intervals per service and tenant since the start (with record_timeline).
  std::vector<metrics::Interval> timeline() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace nexus::daemon
