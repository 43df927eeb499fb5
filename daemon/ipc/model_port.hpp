// What the reactor needs of a model service, and nothing more: the reactor (daemon core) does
// not link LibTorch; nexusd plugs the model service (daemon/model) in through this interface.
//
// Thread safety: every member may be called from the reactor thread while the service's own
// threads run.
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "daemon/ipc/segment.hpp"
#include "daemon/sched/group_batcher.hpp"
#include "nexus/wire/nexus_generated.h"

namespace nexus::daemon {

// Work the daemon gives itself (an RL job's rollout step or update), defined by the model
// service; opaque here.
struct InternalWork;

struct ModelWork {
  std::uint64_t session_id = 0;
  std::string tenant;
  std::uint64_t request_id = 0;
  wire::Body type = wire::Body::NONE;
  std::vector<std::uint8_t> message;                 // verified Message bytes (a private copy)
  std::shared_ptr<const TenantSegment> segment;      // keeps the client arena mapped
  std::shared_ptr<const std::atomic<bool>> alive;    // false once the tenant detached
  sched::Clock::time_point arrival{};
  std::shared_ptr<InternalWork> internal;            // set for the daemon's own work: no message
  std::shared_ptr<const int> fd;                     // DatasetLoadRequest: the file (closed with the last copy)
};

struct ModelStats {
  std::uint64_t groups = 0;            // backbone forward passes
  std::uint64_t grouped_requests = 0;  // sft/predict requests served by them
  std::uint64_t samples = 0;
  double backbone_seconds = 0;
  double head_seconds = 0;
  std::uint64_t input_bytes_packed = 0;  // arena bytes copied into group batches
};

class ModelPort {
 public:
  virtual ~ModelPort() = default;
  // Takes ownership of the work; its reply (or typed error) comes back through the service's
  // completion callback, unless the tenant detached first.
  virtual void submit(ModelWork work) = 0;
  virtual void tenant_detached(const std::string& tenant) = 0;
  virtual ModelStats stats() const = 0;
  virtual std::string backbone_name() const = 0;
};

}  // namespace nexus::daemon
