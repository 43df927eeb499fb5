// The environment side of the Master's routing: a tenant's EnvOpen/EnvStep/EnvClose turned into
// Environment Service calls and reply bytes. Observations are written into the tenant's own
// client arena, at the tensors the request names (bounds checked by the decoder, shapes here).
#pragma once
#include <cstdint>
#include <vector>

#include "daemon/env/env_service.hpp"
#include "daemon/ipc/service_port.hpp"

namespace nexus::daemon {

// Answers one request (any of the three types): the reply or a typed error, never throws.
// image_size: the resident backbone's, which observations are rendered at.
std::vector<std::uint8_t> handle_env_request(env::EnvService& envs, const ServiceRequest& request, int image_size);

}  // namespace nexus::daemon
