// The request rings: drain, decode, execute transport-level requests, reply.
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "daemon/ipc/decode/request_decoder.hpp"
#include "daemon/ipc/reactor.hpp"
#include "daemon/log/log.hpp"
#include "daemon/ipc/service_port.hpp"
#include "schema/control_frame.hpp"
#include "schema/doorbell.hpp"
#include "schema/protocol.hpp"

namespace nexus::daemon {
namespace {

// FNV-1a, 64-bit: a digest the client can recompute, read in place from the arena; `h` carries
// the state across pieces.
std::uint64_t fnv1a(const std::uint8_t* p, std::uint64_t n, std::uint64_t h) {
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
  for (int i = 0; i < kMaxPerRound && s.pending.empty() && s.in_flight < config_.max_in_flight; ++i) {
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
  if (req.route != Route::Reactor) {  // the services' (the table of request kinds says whose)
    int fd = -1;
    if (req.type == wire::Body::DatasetLoadRequest) {
      // Takes the newest descriptor the tenant sent and closes older ones (left by loads the
      // decoder refused). libnexus sends the descriptor and then this request, one load at a
      // time. The socket's readiness may not have been handled yet: read the socket first.
      collect_offered_fds(s);
      if (s.offered_fds.empty()) {
        push_reply(s, replies_.error(req.request_id, wire::ErrorCode::BadMessage,
                                     "send the dataset file's descriptor on the control socket first"));
        return;
      }
      fd = s.offered_fds.back();
      s.offered_fds.pop_back();
      for (int stale : s.offered_fds) ::close(stale);
      s.offered_fds.clear();
    }
    submit_service_request(s, req, message, fd);
    return;
  }
  switch (req.type) {  // the front door's own
    case wire::Body::PingRequest: {
      const auto* payload = req.message->body_as_PingRequest()->payload();
      push_reply(s, replies_.ping(req.request_id, payload ? std::span<const std::uint8_t>(
                                                                payload->data(), payload->size())
                                                          : std::span<const std::uint8_t>{}));
      return;
    }
    case wire::Body::OutputRelease: {  // no reply: the tenant took its large replies
      if (const auto* offsets = req.message->body_as_OutputRelease()->offsets())
        for (auto o : *offsets) s.output.release(o);
      return;
    }
    case wire::Body::DigestRequest:
      digest(s, req.request_id, req.input.offset, req.input.bytes);
      return;
    case wire::Body::RegisterRegionRequest:
      register_region(s, req.request_id, *req.message->body_as_RegisterRegionRequest());
      return;
    case wire::Body::UnregisterRegionRequest:
      unregister_region(s, req.request_id, req.message->body_as_UnregisterRegionRequest()->region());
      return;
    default:  // the table routes no other type here
      push_reply(s, replies_.error(req.request_id, wire::ErrorCode::Internal, "unhandled type"));
  }
}

void Reactor::push_reply(TenantSession& s, std::span<const std::uint8_t> reply) {
  if (reply.size() > s.responses.max_message()) return push_large_reply(s, reply);
  if (s.pending.empty()) {
    switch (s.responses.try_push(reply)) {
      case schema::PushStatus::Ok: return;
      case schema::PushStatus::Full: break;
      case schema::PushStatus::TooLarge:  // checked above
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

// A reply larger than the ring goes, whole, into the tenant's output arena; the ring carries an
// OutputReply naming where (nexus.fbs). If it fits neither, the request gets a typed error.
void Reactor::push_large_reply(TenantSession& s, std::span<const std::uint8_t> reply) {
  const std::uint64_t request_id = wire::GetMessage(reply.data())->request_id();  // our own bytes
  const auto offset = s.output.allocate(reply.size());
  if (!offset) {
    push_reply(s, replies_.error(request_id, wire::ErrorCode::MessageTooLarge,
                                 "a reply of " + std::to_string(reply.size()) + " bytes fits neither the response ring (" +
                                     std::to_string(s.responses.max_message()) + ") nor your output arena (" +
                                     std::to_string(s.output.free_bytes()) + " of " + std::to_string(s.output.size()) +
                                     " bytes free): attach with larger ones, or release earlier large replies"));
    return;
  }
  std::memcpy(s.segment->output_arena() + *offset, reply.data(), reply.size());
  flatbuffers::FlatBufferBuilder fbb(128);
  fbb.Finish(wire::CreateMessage(fbb, schema::kProtocolVersion, request_id, wire::Body::OutputReply,
                                 wire::CreateOutputReply(fbb, *offset, reply.size()).Union()));
  push_reply(s, {fbb.GetBufferPointer(), fbb.GetSize()});
}

void Reactor::flush_pending(TenantSession& s) {
  while (!s.pending.empty()) {
    const auto status = s.responses.try_push(s.pending.front());
    if (status == schema::PushStatus::Full) return;
    s.pending.pop_front();  // Ok, or undeliverable: either way it leaves the queue
  }
}

bool Reactor::collect_offered_fds(TenantSession& s) {
  // Bounded: a tenant streaming bytes faster than we discard them would otherwise hold the
  // reactor in this loop (it never sees EAGAIN) and stall every other tenant. What is left
  // keeps the socket readable, so it is read at the next turn.
  for (int reads = 0; reads < kReadsPerEvent; ++reads) {
    std::uint8_t bytes[4096];
    std::vector<int> fds;
    const long got = schema::recv_with_fds(s.socket, bytes, MSG_DONTWAIT, fds);
    for (int fd : fds) {
      if (s.offered_fds.size() < TenantSession::kMaxOfferedFds)
        s.offered_fds.push_back(fd);
      else
        ::close(fd);  // a tenant cannot make us hold descriptors without bound
    }
    if (got < 0) return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR;
    if (got == 0) return false;
  }
  return true;
}

void Reactor::submit_service_request(TenantSession& s, const DecodedRequest& req,
                                     std::span<const std::uint8_t> message, int fd) {
  const std::uint64_t request_id = req.request_id;
  // The work owns the descriptor from here: closed when the work is done with it, or dropped.
  auto held = fd >= 0 ? std::shared_ptr<const int>(new int(fd), [](const int* p) {
    ::close(*p);
    delete p;
  })
                      : nullptr;
  if (services_ == nullptr) {
    push_reply(s, replies_.error(request_id, wire::ErrorCode::Internal, "this nexusd runs without a model service"));
    return;
  }
  ServiceRequest w;
  w.session_id = s.session_id;
  w.tenant = s.name;
  w.uid = s.peer.uid;
  w.request_id = request_id;
  w.type = req.type;
  w.route = req.route;
  w.message.assign(message.begin(), message.end());
  w.regions = s.regions;
  w.segment = s.segment;
  w.alive = s.alive;
  w.arrival = sched::Clock::now();
  w.fd = std::move(held);
  ++s.in_flight;
  services_->submit(std::move(w));
}

// Up to the whole arena (a GiB) is hashed: on the IoPool, never here. The task holds the segment
// (mapped while it reads) and the tenant's liveness; it reads in place, so the tenant may race us
// on these bytes, which only changes its own digest. The reply comes back as a completion and
// counts in the tenant's requests in flight meanwhile.
void Reactor::digest(TenantSession& s, std::uint64_t request_id, std::uint64_t offset, std::uint64_t bytes) {
  ++s.in_flight;
  io_->post(s.session_id, [this, segment = s.segment, alive = s.alive, session = s.session_id, request_id, offset,
                           bytes] {
    if (!alive->load()) return;  // the tenant left while this waited
    constexpr std::uint64_t kStride = 64ull << 20;  // stop early if the tenant leaves mid-way
    const std::uint8_t* p = segment->client_arena() + offset;
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (std::uint64_t done = 0; done < bytes; done += kStride) {
      if (done > 0 && !alive->load()) return;
      h = fnv1a(p + done, std::min(kStride, bytes - done), h);
    }
    ReplyBuilder replies;
    const auto reply = replies.digest(request_id, h, bytes);
    post_completion(session, {reply.begin(), reply.end()});
  });
}

void Reactor::post_completion(std::uint64_t session_id, std::vector<std::uint8_t> reply) {
  {
    std::lock_guard lock(completions_mu_);
    completions_.emplace_back(session_id, std::move(reply));
  }
  completions_waiting_.store(true, std::memory_order_release);
  schema::ring_doorbell(completion_fd_);
}

void Reactor::drain_completions() {
  std::vector<std::pair<std::uint64_t, std::vector<std::uint8_t>>> done;
  {
    std::lock_guard lock(completions_mu_);
    done.swap(completions_);
    completions_waiting_.store(false, std::memory_order_relaxed);
  }
  for (auto& [session_id, reply] : done) {
    auto key = session_ids_.find(session_id);
    if (key == session_ids_.end()) continue;  // the tenant left; its work was cancelled
    TenantSession& s = *sessions_.at(key->second);
    if (s.in_flight > 0) --s.in_flight;
    push_reply(s, reply);
    if (s.responses.consumer_sleeping()) schema::ring_doorbell(s.client_doorbell);
  }
}

}  // namespace nexus::daemon
