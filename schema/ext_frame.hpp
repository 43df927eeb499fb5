// External environments' wire: one ExtMessage (nexus.fbs) per control frame. Used by nexusd
// (daemon/env/external_session.cpp) and by simulator processes (examples/external_env.cpp).
#pragma once
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include <flatbuffers/flatbuffers.h>

#include "nexus/wire/nexus_generated.h"

namespace nexus::schema {

// The external-environment protocol this build speaks (nexus.fbs): 2 added request ids, the
// protocol handshake and truncated; 3 vectorised it (several sessions per connection, a reset or
// step names its sessions, one ExtObservations answers). Peers of another version are refused
// at open.
inline constexpr std::uint32_t kExtProtocol = 3;
// The rollout engines' registration protocol (EngineHello .. EngineDrain in nexus.fbs).
inline constexpr std::uint32_t kEngineProtocol = 1;

// Finishes `fbb` as an ExtMessage around `body`, numbered `id` (a reply: its request's id), and
// sends it. False if the peer is gone.
bool send_ext(int socket, flatbuffers::FlatBufferBuilder& fbb, wire::ExtBody type, flatbuffers::Offset<void> body,
              std::uint64_t id, std::span<const int> fds = {});

// Receives one ExtMessage within `timeout` into `buffer`, verified. nullptr and `why` set when
// the peer closed, timed out, or sent bytes that are not a valid ExtMessage with a body.
// Descriptors that came with the frame go to `fds` (close-on-exec; the caller owns them), or are
// closed when `fds` is null.
const wire::ExtMessage* recv_ext(int socket, std::chrono::milliseconds timeout, std::vector<std::uint8_t>& buffer,
                                 std::string& why, std::vector<int>* fds = nullptr);

}  // namespace nexus::schema
