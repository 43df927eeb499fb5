#include "schema/ext_frame.hpp"

#include <unistd.h>

#include "schema/control_frame.hpp"

namespace nexus::schema {

bool send_ext(int socket, flatbuffers::FlatBufferBuilder& fbb, wire::ExtBody type, flatbuffers::Offset<void> body,
              std::uint64_t id, std::span<const int> fds) {
  fbb.Finish(wire::CreateExtMessage(fbb, type, body, id));
  return send_frame(socket, {fbb.GetBufferPointer(), fbb.GetSize()}, fds);
}

const wire::ExtMessage* recv_ext(int socket, std::chrono::milliseconds timeout, std::vector<std::uint8_t>& buffer,
                                 std::string& why, std::vector<int>* passed) {
  std::vector<int> fds;
  const auto status = recv_frame(socket, timeout, buffer, fds);
  const auto drop = [&] {
    for (int fd : fds) ::close(fd);
    fds.clear();
  };
  if (!passed || status != RecvStatus::Ok) drop();
  switch (status) {
    case RecvStatus::Ok: break;
    case RecvStatus::Closed: why = "connection closed"; return nullptr;
    case RecvStatus::TimedOut: why = "no answer within " + std::to_string(timeout.count()) + " ms"; return nullptr;
    case RecvStatus::Malformed: why = "malformed frame"; return nullptr;
  }
  flatbuffers::Verifier verifier(buffer.data(), buffer.size());
  if (!verifier.VerifyBuffer<wire::ExtMessage>(nullptr)) {
    why = "bytes that are not an ExtMessage";
    drop();
    return nullptr;
  }
  const auto* msg = flatbuffers::GetRoot<wire::ExtMessage>(buffer.data());
  if (msg->body() == nullptr) {
    why = "a message without a body";
    drop();
    return nullptr;
  }
  if (passed) passed->insert(passed->end(), fds.begin(), fds.end());
  return msg;
}

}  // namespace nexus::schema
