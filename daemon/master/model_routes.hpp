// The model side of the Master's routing: a tenant's verified wire request turned into a typed
// model request whose tensors point into the tenant's client arena (each reference checked
// against the arena's size, which the daemon holds privately), and back.
#pragma once
#include <functional>
#include <optional>
#include <string>

#include "daemon/ipc/service_port.hpp"
#include "daemon/model/model_service.hpp"

namespace nexus::daemon {

// The typed request for `r` (done: what to call with its result), or the reason it has none.
struct ModelRouteError {
  wire::ErrorCode code;
  std::string reason;
};
std::variant<model::Request, ModelRouteError> to_model_request(const ServiceRequest& r,
                                                               std::function<void(model::Result)> done);

// A host tensor over the bytes `ref` names: in the tenant's arena (which `r.segment` keeps
// mapped), or in a region it registered, whose holder is added to `regions_held` (null: regions
// are refused). Nullopt with the reason (and, if asked, its code) when the reference is bad.
std::optional<model::HostTensor> arena_tensor(const ServiceRequest& r, const wire::TensorRef* ref, std::string& why,
                                              std::vector<std::shared_ptr<void>>* regions_held = nullptr,
                                              wire::ErrorCode* code = nullptr);

}  // namespace nexus::daemon
