#include "attachment.hpp"

#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <flatbuffers/flatbuffers.h>

#include "schema/control_frame.hpp"

namespace nexus::detail {

Attachment::~Attachment() {
  if (base) ::munmap(base, layout.total_bytes);
  for (int fd : {socket, daemon_doorbell, client_doorbell})
    if (fd >= 0) ::close(fd);
}

Error error_from_wire(const wire::Error* e, const char* context) {
  if (e == nullptr) return Error(ErrorCode::BadMessage, std::string(context) + ": error without body");
  const auto code = static_cast<ErrorCode>(e->code());
  return Error(code, e->reason() ? e->reason()->str() : std::string(context));
}

int connect_control_socket(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path)
    throw Error(ErrorCode::ConnectFailed, "socket path too long: " + path);
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw Error(ErrorCode::ConnectFailed, std::string("socket: ") + std::strerror(errno));
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(ErrorCode::ConnectFailed,
                "no nexusd at " + path + " (" + std::strerror(err) + "); is the daemon running?");
  }
  return fd;
}

std::unique_ptr<Attachment> attach_raw(const AttachParams& p) {
  auto att = std::make_unique<Attachment>();
  att->socket = connect_control_socket(p.socket_path);

  flatbuffers::FlatBufferBuilder fbb;
  auto req = wire::CreateAttachRequest(fbb, p.protocol_version, fbb.CreateString(p.tenant),
                                       p.ring_bytes, p.client_arena_bytes, p.output_arena_bytes);
  fbb.Finish(wire::CreateControlMessage(fbb, wire::ControlBody::AttachRequest, req.Union()));
  if (!schema::send_frame(att->socket, {fbb.GetBufferPointer(), fbb.GetSize()}))
    throw Error(ErrorCode::DaemonGone, "daemon closed the socket during attach");

  std::vector<std::uint8_t> frame;
  std::vector<int> fds;
  const auto status = schema::recv_frame(att->socket, p.timeout, frame, fds);
  struct FdGuard {  // closes whatever fds arrived unless adopted below
    std::vector<int>& fds;
    ~FdGuard() {
      for (int fd : fds) ::close(fd);
    }
  } guard{fds};
  if (status == schema::RecvStatus::TimedOut)
    throw Error(ErrorCode::Timeout, "no attach reply within " + std::to_string(p.timeout.count()) + " ms");
  if (status != schema::RecvStatus::Ok)
    throw Error(ErrorCode::DaemonGone, "daemon closed the socket during attach");

  flatbuffers::Verifier verifier(frame.data(), frame.size());
  if (!verifier.VerifyBuffer<wire::ControlMessage>(nullptr))
    throw Error(ErrorCode::BadMessage, "attach reply failed verification");
  const auto* msg = flatbuffers::GetRoot<wire::ControlMessage>(frame.data());
  if (msg->body() == nullptr) throw Error(ErrorCode::BadMessage, "attach reply without a body");
  if (msg->body_type() == wire::ControlBody::Error)
    throw error_from_wire(msg->body_as_Error(), "attach refused");
  if (msg->body_type() != wire::ControlBody::AttachReply)
    throw Error(ErrorCode::WrongMessageType, "expected an AttachReply");
  const auto* reply = msg->body_as_AttachReply();
  if (reply->error() && reply->error()->code() != wire::ErrorCode::None)
    throw error_from_wire(reply->error(), "attach refused");
  if (fds.size() != 3)
    throw Error(ErrorCode::BadMessage, "attach reply carried " + std::to_string(fds.size()) + " fds, not 3");

  // Trust nothing the daemon wrote either: recompute the layout and compare.
  const std::uint64_t ring = schema::round_up_pow2(std::max<std::uint64_t>(p.ring_bytes, 1));
  const auto layout = schema::SegmentLayout::compute(ring, p.client_arena_bytes, p.output_arena_bytes);
  struct stat st{};
  if (!layout || ::fstat(fds[0], &st) != 0 || static_cast<std::uint64_t>(st.st_size) < layout->total_bytes ||
      reply->segment_bytes() != layout->total_bytes)
    throw Error(ErrorCode::BadMessage, "segment size differs from the requested layout");
  void* base = ::mmap(nullptr, layout->total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
  if (base == MAP_FAILED) throw Error(ErrorCode::Internal, std::string("mmap: ") + std::strerror(errno));
  att->base = static_cast<std::uint8_t*>(base);
  att->layout = *layout;
  schema::SegmentHeader header;
  std::memcpy(&header, att->base, sizeof header);
  if (!layout->matches(header))
    throw Error(ErrorCode::UnsupportedVersion, "segment header does not match this libnexus");
  att->session_id = reply->session_id();
  ::close(fds[0]);  // the mapping keeps the segment
  att->daemon_doorbell = fds[1];
  att->client_doorbell = fds[2];
  fds.clear();
  return att;
}

}  // namespace nexus::detail
