#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "schema/control_frame.hpp"
#include "schema/protocol.hpp"

using namespace nexus::schema;

TEST_CASE("frames carry payload and file descriptors", "[frame]") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  int pipe_fds[2];
  REQUIRE(::pipe(pipe_fds) == 0);
  std::vector<std::uint8_t> payload = {1, 2, 3, 4, 5};
  const int send_fds[1] = {pipe_fds[1]};
  REQUIRE(send_frame(sv[0], payload, send_fds));
  std::vector<std::uint8_t> got;
  std::vector<int> fds;
  REQUIRE(recv_frame(sv[1], std::chrono::milliseconds(1000), got, fds) == RecvStatus::Ok);
  CHECK(got == payload);
  REQUIRE(fds.size() == 1);
  // The received fd is the pipe's write end: bytes written through it come out of the pipe.
  REQUIRE(::write(fds[0], "x", 1) == 1);
  char c = 0;
  REQUIRE(::read(pipe_fds[0], &c, 1) == 1);
  CHECK(c == 'x');
  CHECK((::fcntl(fds[0], F_GETFD) & FD_CLOEXEC) != 0);
  for (int fd : {sv[0], sv[1], pipe_fds[0], pipe_fds[1], fds[0]}) ::close(fd);
}

TEST_CASE("frame receive times out, reports close, refuses oversize", "[frame][hostile]") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  std::vector<std::uint8_t> got;
  std::vector<int> fds;
  CHECK(recv_frame(sv[1], std::chrono::milliseconds(20), got, fds) == RecvStatus::TimedOut);
  const std::uint32_t huge = kMaxControlFrameBytes + 1;
  REQUIRE(::write(sv[0], &huge, 4) == 4);
  CHECK(recv_frame(sv[1], std::chrono::milliseconds(200), got, fds) == RecvStatus::Malformed);
  ::close(sv[0]);
  CHECK(recv_frame(sv[1], std::chrono::milliseconds(200), got, fds) == RecvStatus::Closed);
  ::close(sv[1]);
}

TEST_CASE("accumulator assembles frames sent a byte at a time", "[frame][hostile]") {
  int sv[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, sv) == 0);
  FrameAccumulator acc;
  std::vector<std::uint8_t> frame;
  const std::uint32_t len = 3;
  const std::uint8_t bytes[7] = {static_cast<std::uint8_t>(len), 0, 0, 0, 9, 8, 7};
  for (int i = 0; i < 6; ++i) {
    REQUIRE(::write(sv[0], bytes + i, 1) == 1);
    CHECK(acc.feed(sv[1], frame) == FrameAccumulator::Result::NeedMore);
  }
  REQUIRE(::write(sv[0], bytes + 6, 1) == 1);
  REQUIRE(acc.feed(sv[1], frame) == FrameAccumulator::Result::Frame);
  CHECK(frame == std::vector<std::uint8_t>{9, 8, 7});
  const std::uint32_t huge = kMaxControlFrameBytes + 1;
  REQUIRE(::write(sv[0], &huge, 4) == 4);
  CHECK(acc.feed(sv[1], frame) == FrameAccumulator::Result::Malformed);
  ::close(sv[0]);
  ::close(sv[1]);
}
