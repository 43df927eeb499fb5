// Tenants' Environment Service messages (EnvOpen/EnvStep/EnvClose) turned into EnvService calls
// and reply bytes. Observations are written into the tenant's own client arena, at the tensors
// the request names (bounds checked by the decoder, shapes checked here).
#pragma once
#include <cstdint>
#include <vector>

#include "daemon/env/env_service.hpp"
#include "daemon/ipc/model_port.hpp"

namespace nexus::env {

// Answers one request (any of the three types): the reply or a typed error, never throws.
// image_size: the resident backbone's, which observations are rendered at.
std::vector<std::uint8_t> handle_env_request(EnvService& envs, const daemon::ModelWork& work, int image_size);

}  // namespace nexus::env
