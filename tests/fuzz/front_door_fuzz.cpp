// The front door: bytes a peer writes to the control socket before it is a tenant, read by the
// reactor's FrameAccumulator in the pieces the input chooses (over a real socketpair), and each
// whole frame decoded (decode_control) as attach, status, metrics, cancel, release or drain.
//   input: [n pieces: 1 byte][piece sizes: n bytes][the stream]
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz_inputs.hpp"
#include "schema/control_frame.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::size_t pieces = std::min<std::size_t>(data[0] % 8 + 1, size - 1);
  const std::uint8_t* sizes = data + 1;
  const std::uint8_t* stream = data + 1 + pieces;
  std::size_t left = size - 1 - pieces;
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) != 0) return 0;
  nexus::schema::FrameAccumulator frames;
  std::vector<std::uint8_t> frame;
  bool open = true;
  for (std::size_t p = 0; p <= pieces && open; ++p) {
    const std::size_t n = p < pieces ? std::min<std::size_t>(left, sizes[p] * 64u + 1) : left;
    if (n > 0 && ::send(sv[1], stream, n, MSG_NOSIGNAL) < 0) break;
    stream += n, left -= n;
    if (p == pieces) ::shutdown(sv[1], SHUT_WR);
    for (int k = 0; k < 64; ++k) {  // the frames this piece completed, as the reactor takes them
      const auto r = frames.feed(sv[0], frame);
      if (r == nexus::schema::FrameAccumulator::Result::Frame) {
        nexus::fuzz::control_frame(frame.data(), frame.size());
        continue;
      }
      open = r == nexus::schema::FrameAccumulator::Result::NeedMore;  // Closed, Malformed: the reactor closes it
      break;
    }
  }
  ::close(sv[0]);
  ::close(sv[1]);
  return 0;
}
