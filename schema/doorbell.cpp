#include "schema/doorbell.hpp"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

namespace nexus::schema {

int make_doorbell() { return ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC); }

void ring_doorbell(int fd) {
  std::uint64_t one = 1;
  // EAGAIN means the counter is saturated, which is as rung as it gets.
  while (::write(fd, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

void drain_doorbell(int fd) {
  std::uint64_t v;
  while (::read(fd, &v, sizeof v) < 0 && errno == EINTR) {
  }
}

WaitResult wait_doorbell(int doorbell, int peer_socket, std::chrono::microseconds timeout) {
  pollfd fds[2] = {{doorbell, POLLIN, 0}, {peer_socket, POLLIN | POLLRDHUP, 0}};
  const nfds_t n = peer_socket >= 0 ? 2 : 1;
  // Round up so that a sub-millisecond timeout still blocks instead of spinning.
  const int ms = static_cast<int>((timeout.count() + 999) / 1000);
  for (;;) {
    const int r = ::poll(fds, n, ms);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return WaitResult::TimedOut;
    if (n == 2 && (fds[1].revents & (POLLHUP | POLLRDHUP | POLLERR | POLLIN))) {
      // The daemon sends nothing on the socket after attach, so readable means EOF.
      char c;
      const ssize_t got = ::recv(peer_socket, &c, 1, MSG_PEEK | MSG_DONTWAIT);
      if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return WaitResult::PeerGone;
    }
    if (fds[0].revents & POLLIN) {
      drain_doorbell(doorbell);
      return WaitResult::Rung;
    }
    return WaitResult::TimedOut;
  }
}

}  // namespace nexus::schema
