// hostile_peer: a local user misusing nexusd's front door, for the fault tests.
//   hostile_peer hold SOCKET N SECONDS        open N connections, send nothing, hold them
//   hostile_peer flood-status SOCKET N SECONDS  pipeline N status requests on one connection, read nothing
//   hostile_peer stream SOCKET TENANT SECONDS   attach, then stream bytes into the control socket
//   hostile_peer doorbell SOCKET TENANT SECONDS attach, keep a dup of the daemon's doorbell,
//                                               detach, then keep ringing the dup
// Prints one JSON line: what it managed (connections opened, refused with Busy, ...).
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include <flatbuffers/flatbuffers.h>

#include "attachment.hpp"
#include "schema/control_frame.hpp"
#include "schema/doorbell.hpp"

namespace {

using namespace nexus;
using Clock = std::chrono::steady_clock;

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

// Whether the daemon refused a connection with a Busy frame within `wait` (it does so at once
// when it accepts; a loaded machine may accept late).
bool refused_busy(int fd, std::chrono::milliseconds wait) {
  std::vector<std::uint8_t> frame;
  std::vector<int> fds;
  if (schema::recv_frame(fd, wait, frame, fds) != schema::RecvStatus::Ok) return false;
  flatbuffers::Verifier v(frame.data(), frame.size());
  if (!v.VerifyBuffer<wire::ControlMessage>(nullptr)) return false;
  const auto* m = flatbuffers::GetRoot<wire::ControlMessage>(frame.data());
  return m->body_type() == wire::ControlBody::Error && m->body_as_Error()->code() == wire::ErrorCode::Busy;
}

int hold(const std::string& socket, int n, double seconds) {
  std::vector<int> fds;
  int busy = 0, failed = 0;
  for (int i = 0; i < n; ++i) {
    try {
      const int fd = detail::connect_control_socket(socket);
      if (refused_busy(fd, std::chrono::milliseconds(20))) {
        ++busy;
        ::close(fd);
      } else {
        fds.push_back(fd);
      }
    } catch (const std::exception&) {
      ++failed;  // the listen backlog is full: the kernel refuses before nexusd sees it
    }
  }
  // Connections whose Busy frame came after the 20 ms above (accepted late) were refused all the
  // same: look again, all of them within 2 s, before counting what was really held open.
  const auto settle = Clock::now() + std::chrono::seconds(2);
  std::erase_if(fds, [&](int fd) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(settle - Clock::now());
    if (!refused_busy(fd, std::max(left, std::chrono::milliseconds(0)))) return false;
    ++busy;
    ::close(fd);
    return true;
  });
  std::printf("{\"opened\":%zu,\"busy\":%d,\"failed\":%d}\n", fds.size(), busy, failed);
  std::fflush(stdout);
  sleep_s(seconds);
  for (int fd : fds) ::close(fd);
  return 0;
}

int flood_status(const std::string& socket, int n, double seconds) {
  const int fd = detail::connect_control_socket(socket);
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateControlMessage(fbb, wire::ControlBody::StatusRequest,
                                        wire::CreateStatusRequest(fbb, schema::kProtocolVersion).Union()));
  int sent = 0;
  for (; sent < n; ++sent)  // blocks once the daemon stops reading us: that is the point
    if (!schema::send_frame(fd, {fbb.GetBufferPointer(), fbb.GetSize()}, {}, std::chrono::milliseconds(200))) break;
  std::printf("{\"sent\":%d}\n", sent);
  std::fflush(stdout);
  sleep_s(seconds);
  ::close(fd);
  return 0;
}

int stream(const std::string& socket, const std::string& tenant, double seconds) {
  auto att = detail::attach_raw({.socket_path = socket, .tenant = tenant, .client_arena_bytes = 1 << 20,
                                 .output_arena_bytes = 1 << 16});
  std::vector<std::uint8_t> junk(64 * 1024, 0xab);
  std::uint64_t bytes = 0;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    const ssize_t n = ::send(att->socket, junk.data(), junk.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) bytes += static_cast<std::uint64_t>(n);
    else std::this_thread::yield();
  }
  std::printf("{\"streamed\":%llu}\n", static_cast<unsigned long long>(bytes));
  return 0;
}

int doorbell(const std::string& socket, const std::string& tenant, double seconds) {
  int kept;
  {
    auto att = detail::attach_raw({.socket_path = socket, .tenant = tenant, .client_arena_bytes = 1 << 20,
                                   .output_arena_bytes = 1 << 16});
    kept = ::dup(att->daemon_doorbell);
  }  // detached: socket, mapping and its own doorbell fds closed; the dup lives on
  std::printf("{\"kept\":%d}\n", kept >= 0);
  std::fflush(stdout);
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    schema::ring_doorbell(kept);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: hostile_peer hold|flood-status SOCKET N SECONDS | stream|doorbell SOCKET TENANT SECONDS\n");
    return 2;
  }
  const std::string mode = argv[1], socket = argv[2];
  try {
    if (mode == "hold") return hold(socket, std::stoi(argv[3]), std::stod(argv[4]));
    if (mode == "flood-status") return flood_status(socket, std::stoi(argv[3]), std::stod(argv[4]));
    if (mode == "stream") return stream(socket, argv[3], std::stod(argv[4]));
    if (mode == "doorbell") return doorbell(socket, argv[3], std::stod(argv[4]));
  } catch (const std::exception& e) {
    std::printf("{\"error\":\"%s\"}\n", e.what());
    return 1;
  }
  return 2;
}
