#include "schema/control_frame.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "schema/protocol.hpp"

namespace nexus::schema {
namespace {

constexpr int kMaxFds = 8;

bool wait_readable(int fd, std::chrono::steady_clock::time_point deadline) {
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() < 0) return false;
    pollfd p{fd, POLLIN, 0};
    const int r = ::poll(&p, 1, static_cast<int>(left.count()) + 1);
    if (r < 0 && errno == EINTR) continue;
    return r > 0;
  }
}

}  // namespace

bool send_frame(int socket, std::span<const std::uint8_t> payload, std::span<const int> fds,
                std::chrono::milliseconds wait) {
  if (payload.size() > kMaxControlFrameBytes || fds.size() > kMaxFds) return false;
  const std::uint32_t len = static_cast<std::uint32_t>(payload.size());
  iovec iov[2] = {{const_cast<std::uint32_t*>(&len), sizeof len},
                  {const_cast<std::uint8_t*>(payload.data()), payload.size()}};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)] = {};
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = 2;
  if (!fds.empty()) {
    msg.msg_control = control;
    msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
    std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  }
  std::size_t total = sizeof len + payload.size(), sent = 0;
  while (sent < total) {
    const ssize_t n = ::sendmsg(socket, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        pollfd p{socket, POLLOUT, 0};
        if (::poll(&p, 1, static_cast<int>(wait.count())) <= 0) return false;
        continue;
      }
      return false;
    }
    sent += static_cast<std::size_t>(n);
    msg.msg_control = nullptr;  // fds travel with the first byte only
    msg.msg_controllen = 0;
    // Advance the iovecs past what was sent.
    std::size_t skip = static_cast<std::size_t>(n);
    while (msg.msg_iovlen > 0 && skip >= msg.msg_iov[0].iov_len) {
      skip -= msg.msg_iov[0].iov_len;
      ++msg.msg_iov;
      --msg.msg_iovlen;
    }
    if (msg.msg_iovlen > 0) {
      msg.msg_iov[0].iov_base = static_cast<char*>(msg.msg_iov[0].iov_base) + skip;
      msg.msg_iov[0].iov_len -= skip;
    }
  }
  return true;
}

long recv_with_fds(int socket, std::span<std::uint8_t> buffer, int flags, std::vector<int>& fds, bool* truncated) {
  iovec iov{buffer.data(), buffer.size()};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxFds)];
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  const ssize_t n = ::recvmsg(socket, &msg, flags | MSG_CMSG_CLOEXEC);
  if (n < 0) return n;
  if (truncated && (msg.msg_flags & MSG_CTRUNC)) *truncated = true;
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (std::size_t i = 0; i < count; ++i) {
      int fd;
      std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
      fds.push_back(fd);
    }
  }
  return n;
}

RecvStatus recv_frame(int socket, std::chrono::milliseconds timeout,
                      std::vector<std::uint8_t>& payload, std::vector<int>& fds) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::uint8_t header[4];
  std::size_t got = 0;
  bool malformed = false;
  while (got < sizeof header) {
    if (!wait_readable(socket, deadline)) return RecvStatus::TimedOut;
    const long n = recv_with_fds(socket, {header + got, sizeof header - got}, 0, fds, &malformed);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return RecvStatus::Closed;
    got += static_cast<std::size_t>(n);
  }
  std::uint32_t len;
  std::memcpy(&len, header, sizeof len);
  if (malformed || len > kMaxControlFrameBytes) return RecvStatus::Malformed;
  payload.resize(len);
  got = 0;
  while (got < len) {
    if (!wait_readable(socket, deadline)) return RecvStatus::TimedOut;
    const ssize_t n = ::recv(socket, payload.data() + got, len - got, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) return RecvStatus::Closed;
    got += static_cast<std::size_t>(n);
  }
  return RecvStatus::Ok;
}

FrameAccumulator::Result FrameAccumulator::feed(int socket, std::vector<std::uint8_t>& frame) {
  auto take_frame = [&]() -> Result {
    if (buffer_.size() < 4) return Result::NeedMore;
    std::uint32_t len;
    std::memcpy(&len, buffer_.data(), sizeof len);
    if (len > kMaxControlFrameBytes) return Result::Malformed;
    if (buffer_.size() < 4 + static_cast<std::size_t>(len)) return Result::NeedMore;
    frame.assign(buffer_.begin() + 4, buffer_.begin() + 4 + len);
    buffer_.erase(buffer_.begin(), buffer_.begin() + 4 + len);
    return Result::Frame;
  };
  if (auto r = take_frame(); r != Result::NeedMore) return r;
  std::uint8_t chunk[4096];
  for (;;) {
    const ssize_t n = ::recv(socket, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Result::NeedMore;
      return Result::Closed;
    }
    if (n == 0) return Result::Closed;
    buffer_.insert(buffer_.end(), chunk, chunk + n);
    if (auto r = take_frame(); r != Result::NeedMore) return r;
    if (buffer_.size() > kMaxControlFrameBytes + 4) return Result::Malformed;
  }
}

}  // namespace nexus::schema
