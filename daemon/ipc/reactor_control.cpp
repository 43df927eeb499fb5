// Control-socket requests: attach (creates the tenant's segment); status, metrics and job
// cancellation (reactor_status.cpp).
#include <unistd.h>

#include <flatbuffers/flatbuffers.h>

#include "daemon/ipc/decode/request_decoder.hpp"
#include "daemon/ipc/reactor.hpp"
#include "daemon/log/log.hpp"
#include "daemon/ipc/service_port.hpp"
#include "schema/doorbell.hpp"
#include "schema/protocol.hpp"
#include "schema/segment_layout.hpp"

namespace nexus::daemon {

void Reactor::refuse(Connection& c, bool attach_reply, wire::ErrorCode code,
                     const std::string& reason) {
  flatbuffers::FlatBufferBuilder fbb;
  auto err = wire::CreateError(fbb, code, fbb.CreateString(reason));
  flatbuffers::Offset<wire::ControlMessage> msg;
  if (attach_reply) {
    auto reply = wire::CreateAttachReply(fbb, schema::kProtocolVersion, 0, 0, err);
    msg = wire::CreateControlMessage(fbb, wire::ControlBody::AttachReply, reply.Union());
  } else {
    msg = wire::CreateControlMessage(fbb, wire::ControlBody::Error, err.Union());
  }
  fbb.Finish(msg);
  send_control(c, {fbb.GetBufferPointer(), fbb.GetSize()});
  NEXUS_LOG(info, "refused", "uid={} pid={} code={} reason=\"{}\"", c.peer.uid, c.peer.pid,
            wire::EnumNameErrorCode(code), reason);
}

bool Reactor::handle_control_frame(std::uint64_t id, Connection& c,
                                   std::span<const std::uint8_t> frame) {
  auto decoded = decode_control(frame);
  if (auto* err = std::get_if<DecodeError>(&decoded)) {
    refuse(c, false, err->code, err->reason);
    if (err->code == wire::ErrorCode::UnsupportedVersion) return true;  // may ask again
    close_connection(id);
    return false;
  }
  const auto& req = std::get<ControlRequest>(decoded);
  switch (req.type) {
    case wire::ControlBody::AttachRequest: return attach(id, c, *req.message->body_as_AttachRequest());
    case wire::ControlBody::MetricsRequest: send_metrics(c); break;
    case wire::ControlBody::CancelJobRequest: cancel_job(c, req.message->body_as_CancelJobRequest()->job()); break;
    case wire::ControlBody::DrainRequest: drain(c); break;
    case wire::ControlBody::ScaleRequest: scale(c, *req.message->body_as_ScaleRequest()); break;
    case wire::ControlBody::ReleaseTenantRequest: {
      const auto* t = req.message->body_as_ReleaseTenantRequest()->tenant();
      release_tenant(c, t ? t->str() : "");
      break;
    }
    default: send_status(c, req.message->body_as_StatusRequest()->usage_since_s()); break;
  }
  return true;
}

bool Reactor::attach(std::uint64_t id, Connection& c, const wire::AttachRequest& req) {
  auto reject = [&](wire::ErrorCode code, const std::string& reason) {
    refuse(c, true, code, reason);
    close_connection(id);
    return false;
  };
  if (req.protocol_version() != schema::kProtocolVersion)
    return reject(wire::ErrorCode::UnsupportedVersion,
                  "client speaks protocol " + std::to_string(req.protocol_version()) +
                      ", daemon speaks " + std::to_string(schema::kProtocolVersion));
  const std::string name = req.tenant() ? req.tenant()->str() : "";
  if (registry_.attached() >= config_.max_tenants)
    return reject(wire::ErrorCode::TooManyTenants,
                  "daemon serves at most " + std::to_string(config_.max_tenants) + " tenants");
  const std::uint64_t ring = schema::round_up_pow2(std::max<std::uint64_t>(req.ring_bytes(), 1));
  const auto layout =
      schema::SegmentLayout::compute(ring, req.client_arena_bytes(), req.output_arena_bytes());
  if (!layout || layout->total_bytes > config_.max_segment_bytes)
    return reject(wire::ErrorCode::SegmentTooLarge,
                  "rings of " + std::to_string(req.ring_bytes()) + " bytes (allowed " +
                      std::to_string(schema::kMinRingBytes) + ".." +
                      std::to_string(schema::kMaxRingBytes) + ") and arenas of " +
                      std::to_string(req.client_arena_bytes()) + "+" +
                      std::to_string(req.output_arena_bytes()) +
                      " bytes do not fit the per-tenant cap of " +
                      std::to_string(config_.max_segment_bytes) + " bytes");
  std::uint32_t of_this_user = 0;
  for (const auto& [sid, s] : sessions_) of_this_user += s->peer.uid == c.peer.uid;
  if (of_this_user >= config_.max_tenants_per_uid)
    return reject(wire::ErrorCode::QuotaExceeded, "Unix user " + std::to_string(c.peer.uid) + " has " +
                                                      std::to_string(of_this_user) + " tenants attached, the most " +
                                                      "one user may ([daemon] max_tenants_per_uid)");
  auto claim = registry_.claim(name, c.peer.uid);
  if (claim.code != wire::ErrorCode::None) return reject(claim.code, claim.reason);

  std::string error;
  std::shared_ptr<TenantSegment> segment = TenantSegment::create(*layout, claim.session_id, &error);
  const int daemon_db = schema::make_doorbell();
  const int client_db = schema::make_doorbell();
  if (!segment || daemon_db < 0 || client_db < 0) {
    registry_.release(name);
    if (daemon_db >= 0) ::close(daemon_db);
    if (client_db >= 0) ::close(client_db);
    return reject(wire::ErrorCode::Internal, "cannot create segment: " + error);
  }

  flatbuffers::FlatBufferBuilder fbb;
  auto reply = wire::CreateAttachReply(fbb, schema::kProtocolVersion, claim.session_id,
                                       layout->total_bytes);
  fbb.Finish(wire::CreateControlMessage(fbb, wire::ControlBody::AttachReply, reply.Union()));
  const int fds[3] = {segment->fd(), daemon_db, client_db};
  // Never waited for: a peer that does not read gets no tenant (the fds go with the frame).
  if (!c.out.empty() || !schema::send_frame(c.fd, {fbb.GetBufferPointer(), fbb.GetSize()}, fds, std::chrono::milliseconds(0))) {
    registry_.release(name);
    ::close(daemon_db);
    ::close(client_db);
    close_connection(id);
    return false;
  }
  segment->close_fd();  // the tenant holds its own fd now; our mapping keeps the memory

  const int sock = c.fd;
  const ucred peer = c.peer;
  connections_.erase(id);  // the socket now belongs to the session (same fd, same epoll entry)
  auto session = std::make_unique<TenantSession>(sock, peer, name, claim.session_id,
                                                 std::move(segment), daemon_db, client_db);
  session->regions = std::make_shared<RegionTable>(config_.max_segment_bytes);
  watch(sock, Tag::TenantSocket, id, false);
  watch(daemon_db, Tag::Doorbell, id, true);
  NEXUS_LOG(info, "attach", "tenant={} uid={} pid={} session={} segment_bytes={} ring_bytes={}",
            name, peer.uid, peer.pid, claim.session_id, layout->total_bytes, ring);
  session_ids_[claim.session_id] = id;
  sessions_.emplace(id, std::move(session));
  if (services_) services_->tenant_attached(name, peer.uid);
  return false;
}

}  // namespace nexus::daemon
