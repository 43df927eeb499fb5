// External environments' wire: one ExtMessage (nexus.fbs) per control frame. Used by nexusd
// (daemon/env/external_session.cpp) and by simulator processes (examples/external_env.cpp).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <flatbuffers/flatbuffers.h>

#include "nexus/wire/nexus_generated.h"

namespace nexus::schema {

// Finishes `fbb` as an ExtMessage around `body` and sends it. False if the peer is gone.
bool send_ext(int socket, flatbuffers::FlatBufferBuilder& fbb, wire::ExtBody type, flatbuffers::Offset<void> body);

// Receives one ExtMessage within `timeout` into `buffer`, verified. nullptr and `why` set when
// the peer closed, timed out, or sent bytes that are not a valid ExtMessage with a body.
const wire::ExtMessage* recv_ext(int socket, std::chrono::milliseconds timeout, std::vector<std::uint8_t>& buffer,
                                 std::string& why);

}  // namespace nexus::schema
