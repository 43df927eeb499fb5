// What the reactor hands to the services behind it, and asks of them, and nothing more: the
// reactor (daemon core) does not link LibTorch; nexusd plugs the Master (daemon/master) in
// through this interface.
//
// Thread safety: every member may be called from the reactor thread while the services' own
// threads run; replies come back through the Completion the Master was made with.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "daemon/ipc/decode/request_route.hpp"
#include "daemon/ipc/regions.hpp"
#include "daemon/ipc/segment.hpp"
#include "daemon/metrics/service_status.hpp"
#include "daemon/sched/group_batcher.hpp"
#include "nexus/wire/nexus_generated.h"

namespace nexus::daemon {

// A verified request for a service: a private copy of the message, and what keeps its inputs
// readable (the tenant's segment) and tells whether anyone still waits for the answer.
// Invariant: `message` passed decode_request (verified, its kind's checks held) and is never
// changed after; wire_message() reads it without verifying again.
struct ServiceRequest {
  std::uint64_t session_id = 0;
  std::string tenant;
  uid_t uid = 0;                                     // the tenant's Unix user (SO_PEERCRED)
  std::uint64_t request_id = 0;
  wire::Body type = wire::Body::NONE;
  Route route = Route::Reactor;                      // the table of request kinds' (request_decoder.cpp); a
                                                     // request left at Reactor reaches no service (Internal)
  std::vector<std::uint8_t> message;                 // verified Message bytes (a private copy)
  std::shared_ptr<const TenantSegment> segment;      // keeps the client arena mapped
  std::shared_ptr<const std::atomic<bool>> alive;    // false once the tenant detached
  sched::Clock::time_point arrival{};
  std::shared_ptr<const int> fd;                     // DatasetLoadRequest: the file (closed with the last copy)
  std::shared_ptr<const RegionTable> regions;        // the tenant's registered regions (TensorRef.region)

  const wire::Message* wire_message() const { return wire::GetMessage(message.data()); }
};

class ServicePort {
 public:
  virtual ~ServicePort() = default;
  // Takes ownership; the reply (or a typed error) comes back through the completion callback,
  // unless the tenant detached first.
  virtual void submit(ServiceRequest request) = 0;
  // `uid`: the tenant's Unix user (SO_PEERCRED), whose files its state comes back from.
  virtual void tenant_attached(const std::string& tenant, uid_t uid) = 0;
  virtual void tenant_detached(const std::string& tenant) = 0;
  // The tenant's name was unbound from its owner (it may go to another uid).
  virtual void tenant_released(const std::string& tenant) = 0;
  // For `nexusctl status/tenants/jobs/usage/top/metrics`: usage since the start, or over the
  // last `usage_since_s` seconds.
  virtual ServiceStatus status(std::optional<double> usage_since_s) const = 0;
  // Cancels a job for a requester (root or the job's owner); the job's state after, or why not.
  struct CancelResult {
    bool ok = false;
    wire::ErrorCode code = wire::ErrorCode::None;
    std::string state_or_reason;
  };
  virtual CancelResult cancel_job(std::uint64_t job, uid_t requester) = 0;
  // `nexusctl scale WHAT N` (the reactor checked the requester is root or nexusd's user).
  struct ScaleResult {
    bool ok = false;
    wire::ErrorCode code = wire::ErrorCode::None;
    int before = 0, after = 0;
    std::string message;  // what was done, or why not
  };
  virtual ScaleResult scale(const std::string& what, int count) {
    return {false, wire::ErrorCode::BadMessage, 0, 0, "this nexusd has nothing to scale"};
  }
};

}  // namespace nexus::daemon
