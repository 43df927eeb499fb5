// Where a verified request goes: the front door's one table of request kinds
// (request_decoder.cpp) gives every type a client may send one route, and the reactor and the
// Master dispatch on it instead of keeping their own lists of types.
#pragma once
#include <cstdint>

namespace nexus::daemon {

enum class Route : std::uint8_t {
  Reactor,  // answered by the front door itself: ping, digest, output release, regions
  Model,    // the model service (group-batched), straight from the Master
  Env,      // the Environment Service's sessions, on the tenant's lane
  Dataset,  // datasets: a load, a step the daemon samples, on the tenant's lane
  Job,      // jobs the daemon drives (SFT, evaluation, RL), on the tenant's lane
};

}  // namespace nexus::daemon
