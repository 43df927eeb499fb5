// Framing on the control socket: [uint32 length][FlatBuffers ControlMessage], optionally with
// file descriptors (SCM_RIGHTS) attached to the frame's first byte.
#pragma once
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

namespace nexus::schema {

// Sends one whole frame (MSG_NOSIGNAL), waiting at most `wait` each time the socket is full
// (the daemon passes 0: it never waits on a peer). False on any error.
bool send_frame(int socket, std::span<const std::uint8_t> payload, std::span<const int> fds = {},
                std::chrono::milliseconds wait = std::chrono::milliseconds(1000));

enum class RecvStatus { Ok, Closed, TimedOut, Malformed };

// Receives one frame within `timeout`; fds that came with it are appended to `fds`
// (close-on-exec). Malformed: a length over kMaxControlFrameBytes or truncated fds.
RecvStatus recv_frame(int socket, std::chrono::milliseconds timeout,
                      std::vector<std::uint8_t>& payload, std::vector<int>& fds);

// One recvmsg(2) into `buffer` (flags as for recvmsg; MSG_CMSG_CLOEXEC is added): the
// descriptors that came with it (SCM_RIGHTS, up to 8 per call) are appended to `fds`, and
// `truncated` is set when the kernel dropped some (MSG_CTRUNC). Returns what recvmsg returned.
// Every receiver of passed descriptors uses it: the client's frames, the reactor's offered
// dataset files, the sandboxed dataset reader's result.
long recv_with_fds(int socket, std::span<std::uint8_t> buffer, int flags, std::vector<int>& fds, bool* truncated = nullptr);

// Non-blocking accumulation for the daemon's reactor: feed() reads what the socket has and
// returns complete frames one at a time. Fds sent by the peer are never accepted (plain recv
// without a control buffer makes the kernel discard them).
class FrameAccumulator {
 public:
  enum class Result { Frame, NeedMore, Closed, Malformed };
  Result feed(int socket, std::vector<std::uint8_t>& frame);

 private:
  std::vector<std::uint8_t> buffer_;
};

}  // namespace nexus::schema
