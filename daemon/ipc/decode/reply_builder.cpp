#include "daemon/ipc/decode/reply_builder.hpp"

#include "schema/protocol.hpp"

namespace nexus::daemon {

std::span<const std::uint8_t> ReplyBuilder::finish(std::uint64_t request_id, wire::Body type,
                                                   flatbuffers::Offset<void> body) {
  auto msg = wire::CreateMessage(fbb_, schema::kProtocolVersion, request_id, type, body);
  fbb_.Finish(msg);
  return {fbb_.GetBufferPointer(), fbb_.GetSize()};
}

std::span<const std::uint8_t> ReplyBuilder::error(std::uint64_t request_id, wire::ErrorCode code,
                                                  std::string_view reason) {
  fbb_.Clear();
  auto body = wire::CreateError(fbb_, code, fbb_.CreateString(reason.data(), reason.size()));
  return finish(request_id, wire::Body::Error, body.Union());
}

std::span<const std::uint8_t> ReplyBuilder::ping(std::uint64_t request_id,
                                                 std::span<const std::uint8_t> payload) {
  fbb_.Clear();
  auto body = wire::CreatePingReply(fbb_, fbb_.CreateVector(payload.data(), payload.size()));
  return finish(request_id, wire::Body::PingReply, body.Union());
}

std::span<const std::uint8_t> ReplyBuilder::digest(std::uint64_t request_id, std::uint64_t fnv1a,
                                                   std::uint64_t bytes) {
  fbb_.Clear();
  auto body = wire::CreateDigestReply(fbb_, fnv1a, bytes);
  return finish(request_id, wire::Body::DigestReply, body.Union());
}

}  // namespace nexus::daemon
