#include "nexus/status.hpp"

#include <unistd.h>

#include <flatbuffers/flatbuffers.h>

#include "attachment.hpp"
#include "schema/control_frame.hpp"

namespace nexus {

DaemonStatus query_status(const std::string& socket_path, std::chrono::milliseconds timeout) {
  const int fd = detail::connect_control_socket(socket_path);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  flatbuffers::FlatBufferBuilder fbb;
  auto req = wire::CreateStatusRequest(fbb, schema::kProtocolVersion);
  fbb.Finish(wire::CreateControlMessage(fbb, wire::ControlBody::StatusRequest, req.Union()));
  if (!schema::send_frame(fd, {fbb.GetBufferPointer(), fbb.GetSize()}))
    throw Error(ErrorCode::DaemonGone, "daemon closed the socket");
  std::vector<std::uint8_t> frame;
  std::vector<int> fds;
  const auto st = schema::recv_frame(fd, timeout, frame, fds);
  for (int f : fds) ::close(f);
  if (st == schema::RecvStatus::TimedOut) throw Error(ErrorCode::Timeout, "no status reply");
  if (st != schema::RecvStatus::Ok) throw Error(ErrorCode::DaemonGone, "daemon closed the socket");
  flatbuffers::Verifier v(frame.data(), frame.size());
  if (!v.VerifyBuffer<wire::ControlMessage>(nullptr))
    throw Error(ErrorCode::BadMessage, "status reply failed verification");
  const auto* msg = flatbuffers::GetRoot<wire::ControlMessage>(frame.data());
  if (msg->body() == nullptr) throw Error(ErrorCode::BadMessage, "status reply without a body");
  if (msg->body_type() == wire::ControlBody::Error) throw detail::error_from_wire(msg->body_as_Error(), "status");
  if (msg->body_type() != wire::ControlBody::StatusReply)
    throw Error(ErrorCode::WrongMessageType, "expected a StatusReply");
  const auto* r = msg->body_as_StatusReply();
  DaemonStatus s;
  s.daemon_version = r->daemon_version() ? r->daemon_version()->str() : "";
  s.protocol_version = r->protocol_version();
  s.pid = r->pid();
  s.uptime_s = r->uptime_s();
  s.message_bytes_copied = r->message_bytes_copied();
  s.tensor_bytes_copied = r->tensor_bytes_copied();
  s.backbone = r->backbone() ? r->backbone()->str() : "";
  s.model_groups = r->model_groups();
  s.model_requests = r->model_requests();
  s.model_samples = r->model_samples();
  if (r->tenants())
    for (const auto* t : *r->tenants())
      s.tenants.push_back(TenantStatus{t->name() ? t->name()->str() : "", t->uid(), t->pid(),
                                       t->session_id(), t->segment_bytes(), t->requests(),
                                       t->errors(), t->attached_s()});
  return s;
}

}  // namespace nexus
