// Turns bytes copied out of a tenant's request ring into a verified request, or a typed error.
// This is the daemon's first contact with hostile input: everything here is bounds-checked
// against values the daemon holds (never the segment header), and nothing here can crash.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>

#include "daemon/ipc/decode/request_route.hpp"
#include "nexus/wire/nexus_generated.h"
#include "schema/tensor_ref.hpp"

namespace nexus::daemon {

// Caps on what one request may ask for, independent of ring size.
inline constexpr std::size_t kMaxPingPayload = 64 * 1024;

// What the daemon knows privately about the sender's segment.
struct RequestLimits {
  std::uint64_t client_arena_bytes = 0;
  std::uint64_t max_reply_payload = kMaxPingPayload;  // what fits in the response ring
};

struct DecodedRequest {
  std::uint64_t request_id = 0;
  wire::Body type = wire::Body::NONE;
  Route route = Route::Reactor;            // from the table of request kinds: who answers it
  const wire::Message* message = nullptr;  // points into the caller's buffer
  schema::TensorCheck input;               // DigestRequest: the checked input tensor
};

struct DecodeError {
  std::uint64_t request_id = 0;  // 0 when the message was too broken to name one
  wire::ErrorCode code = wire::ErrorCode::BadMessage;
  std::string reason;
};

using DecodeResult = std::variant<DecodedRequest, DecodeError>;

// `bytes` must stay alive and unchanged while the result is used (the caller's private copy).
// Verifies the message once, looks its type up in the table of request kinds (a type a client
// may not send is WrongMessageType) and runs that kind's checks.
DecodeResult decode_request(std::span<const std::uint8_t> bytes, const RequestLimits& limits);

// The route of a type a client may send; nullopt for any other (replies, NONE, unknown values).
std::optional<Route> route_of(wire::Body type);

// A frame from the control socket: an AttachRequest (version checked by the attach itself, whose
// refusal has its own reply type) or a StatusRequest of our protocol version.
struct ControlRequest {
  wire::ControlBody type = wire::ControlBody::NONE;
  const wire::ControlMessage* message = nullptr;  // points into the caller's buffer
};
std::variant<ControlRequest, DecodeError> decode_control(std::span<const std::uint8_t> frame);

}  // namespace nexus::daemon
