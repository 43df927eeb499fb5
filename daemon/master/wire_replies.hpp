// Reply messages the Master sends, as bytes for the reactor to push: one place that turns typed
// results (model, environment, datasets, jobs) into wire replies, on whatever thread finished the
// work (each thread has its own builder).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <flatbuffers/flatbuffers.h>

#include "daemon/ipc/job_wire.hpp"
#include "daemon/model/model_service.hpp"
#include "nexus/wire/nexus_generated.h"

namespace nexus::daemon {

using Bytes = std::vector<std::uint8_t>;

Bytes error_reply(std::uint64_t request_id, wire::ErrorCode code, const std::string& reason);
// Finishes a reply body built in `fbb`.
Bytes finish_reply(flatbuffers::FlatBufferBuilder& fbb, std::uint64_t request_id, wire::Body type,
                   flatbuffers::Offset<void> body);

wire::ErrorCode wire_code(model::Fault fault);
Bytes model_reply(std::uint64_t request_id, const model::Result& result);

}  // namespace nexus::daemon
