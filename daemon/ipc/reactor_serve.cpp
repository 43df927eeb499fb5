// The request rings: drain, decode, execute transport-level requests, reply.
#include "daemon/ipc/decode/request_decoder.hpp"
#include "daemon/ipc/reactor.hpp"
#include "daemon/log/log.hpp"
#include "schema/doorbell.hpp"

namespace nexus::daemon {
namespace {

// FNV-1a, 64-bit: a digest the client can recompute, read in place from the arena.
std::uint64_t fnv1a(const std::uint8_t* p, std::uint64_t n) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::uint64_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace

bool Reactor::poll_rings() {
  bool worked = false;
  for (auto& [id, s] : sessions_) worked = serve(*s) || worked;
  return worked;
}

bool Reactor::serve(TenantSession& s) {
  bool worked = false;
  if (!s.pending.empty()) {
    flush_pending(s);
    if (!s.pending.empty()) return false;  // the tenant must drain its responses first
    worked = true;
  }
  const std::uint64_t max_message = s.responses.max_message();
  for (int i = 0; i < kMaxPerRound && s.pending.empty(); ++i) {
    const auto status = s.requests.try_pop(scratch_, max_message);
    if (status == schema::PopStatus::Empty) break;
    worked = true;
    switch (status) {
      case schema::PopStatus::Ok:
        message_bytes_copied_ += scratch_.size();
        handle_message(s, scratch_);
        break;
      case schema::PopStatus::BadLengthPrefix:
        ++s.errors;
        push_reply(s, replies_.error(0, wire::ErrorCode::BadLengthPrefix,
                                     "record length runs past the published bytes; "
                                     "the ring was resynchronised and unread bytes dropped"));
        break;
      case schema::PopStatus::RingCorrupt:
        ++s.errors;
        push_reply(s, replies_.error(0, wire::ErrorCode::RingCorrupt,
                                     "request ring indices are impossible; "
                                     "the ring was resynchronised and unread bytes dropped"));
        break;
      case schema::PopStatus::TooLarge:
        ++s.errors;
        push_reply(s, replies_.error(0, wire::ErrorCode::MessageTooLarge,
                                     "message larger than " + std::to_string(max_message) +
                                         " bytes skipped"));
        break;
      case schema::PopStatus::Empty: break;
    }
  }
  if (worked && (s.responses.consumer_sleeping() || s.requests.producer_sleeping()))
    schema::ring_doorbell(s.client_doorbell);
  return worked;
}

void Reactor::handle_message(TenantSession& s, std::span<const std::uint8_t> message) {
  RequestLimits limits;
  limits.client_arena_bytes = s.segment->layout().client_arena_bytes;
  limits.max_reply_payload = s.responses.max_message() > 256 ? s.responses.max_message() - 256 : 0;
  auto decoded = decode_request(message, limits);
  if (auto* err = std::get_if<DecodeError>(&decoded)) {
    ++s.errors;
    NEXUS_LOG(debug, "bad_request", "tenant={} request={} code={} reason=\"{}\"", s.name,
              err->request_id, wire::EnumNameErrorCode(err->code), err->reason);
    push_reply(s, replies_.error(err->request_id, err->code, err->reason));
    return;
  }
  const auto& req = std::get<DecodedRequest>(decoded);
  ++s.served;
  switch (req.type) {
    case wire::Body::PingRequest: {
      const auto* payload = req.message->body_as_PingRequest()->payload();
      push_reply(s, replies_.ping(req.request_id, payload ? std::span<const std::uint8_t>(
                                                                payload->data(), payload->size())
                                                          : std::span<const std::uint8_t>{}));
      return;
    }
    case wire::Body::DigestRequest: {
      // Read in place: the tenant may race us on these bytes, which only changes its own digest.
      const std::uint8_t* p = s.segment->client_arena() + req.input.offset;
      push_reply(s, replies_.digest(req.request_id, fnv1a(p, req.input.bytes), req.input.bytes));
      return;
    }
    default:  // decode_request admits only the types above
      push_reply(s, replies_.error(req.request_id, wire::ErrorCode::Internal, "unhandled type"));
  }
}

void Reactor::push_reply(TenantSession& s, std::span<const std::uint8_t> reply) {
  if (s.pending.empty()) {
    switch (s.responses.try_push(reply)) {
      case schema::PushStatus::Ok: return;
      case schema::PushStatus::Full: break;
      case schema::PushStatus::TooLarge:  // replies are bounded by RequestLimits; never expected
        NEXUS_LOG(error, "reply_too_large", "tenant={} bytes={}", s.name, reply.size());
        return;
      case schema::PushStatus::PeerCorrupt:  // the tenant wrote an impossible head index
        s.broken = true;
        any_broken_ = true;
        return;
    }
  }
  s.pending.emplace_back(reply.begin(), reply.end());
}

void Reactor::flush_pending(TenantSession& s) {
  while (!s.pending.empty()) {
    const auto status = s.responses.try_push(s.pending.front());
    if (status == schema::PushStatus::Full) return;
    s.pending.pop_front();  // Ok, or undeliverable: either way it leaves the queue
  }
}

}  // namespace nexus::daemon
