// The Master's parts (master.cpp). Members are declared in the order they may be destroyed in
// reverse: lanes first (no new work), then jobs (cancelled, joined), then the services.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "daemon/master/master.hpp"
#include "daemon/master/tenant_lanes.hpp"

namespace nexus::daemon {

struct Master::Impl {
  Impl(const MasterConfig& config, Completion complete);

  // Request memory: false (nothing charged) if it would take the tenant over its bound.
  bool charge(std::uint64_t session, const std::string& tenant, std::uint64_t bytes);
  void release(std::uint64_t session, std::uint64_t bytes);

  void on_lane(const ServiceRequest& r, const std::function<void(std::vector<std::uint8_t>)>& answer);
  std::vector<std::uint8_t> on_job_request(const ServiceRequest& r);
  std::vector<std::uint8_t> rl_status(const ServiceRequest& r, bool stop);
  std::vector<std::uint8_t> job_status(const ServiceRequest& r, const wire::JobStatusRequest& q);

  const MasterConfig config;
  const Completion complete;
  HealthManager health;  // first: the roles below deregister from it when they go
  std::shared_ptr<metrics::Accounting> accounting;
  // Before the services: members go in reverse order, and a service that stops answers the
  // work it still holds ("nexusd is stopping"), which releases that work's bytes here. Declared
  // after them, this map was gone first: nexusd crashed at SIGTERM with work queued.
  std::mutex memory_mu;
  std::map<std::uint64_t, std::pair<std::string, std::uint64_t>> memory;  // GUARDED_BY(memory_mu): session -> tenant, bytes
  model::ModelService model;
  std::unique_ptr<env::EngineRegistry> engines;  // before envs: sessions on engines go first
  std::unique_ptr<env::RolloutAutoscaler> autoscaler;
  env::EnvService envs;
  env::DatasetStore datasets;
  JobRegistry jobs;
  TenantLanes lanes;
};

}  // namespace nexus::daemon
