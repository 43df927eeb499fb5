// The reactor's connections before they attach: accepting (bounded per uid and in all, with a
// reserve descriptor for EMFILE), the control frames in and out, and the handshake deadline.
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <flatbuffers/flatbuffers.h>

#include "daemon/ipc/reactor.hpp"
#include "daemon/log/log.hpp"

namespace nexus::daemon {

void Reactor::accept_all() {
  for (int accepted = 0; accepted < 64; ++accepted) {  // a flood of connections waits its turn too
    const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
      if (errno == EINTR) continue;
      if (errno == EMFILE || errno == ENFILE) {
        // Out of descriptors: the connection would stay in the backlog and the listener readable,
        // and the reactor would spin on it. Accept it with the descriptor kept in reserve and
        // close it at once (the peer sees the connection closed), then take the reserve back.
        const int why = errno;
        if (reserve_fd_ >= 0) {
          ::close(reserve_fd_);
          const int refused = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
          if (refused >= 0) ::close(refused);
          reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
        }
        if (std::chrono::steady_clock::now() - last_emfile_log_ > std::chrono::seconds(10)) {
          last_emfile_log_ = std::chrono::steady_clock::now();
          NEXUS_LOG(warn, "accept_refused", "reason=\"{}: out of file descriptors (LimitNOFILE)\"", std::strerror(why));
        }
        if (reserve_fd_ < 0) {  // no reserve to refuse with: stop listening for a moment
          unwatch(listen_fd_);
          listener_paused_until_ = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
          return;
        }
        continue;
      }
      if (errno != EAGAIN && errno != EWOULDBLOCK)
        NEXUS_LOG(warn, "accept_failed", "errno={}", std::strerror(errno));
      return;
    }
    ucred peer{};
    socklen_t len = sizeof peer;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) != 0) {
      ::close(fd);
      continue;
    }
    std::uint32_t of_uid = 0;
    for (const auto& [cid, c] : connections_) of_uid += c.peer.uid == peer.uid;
    const bool too_many = connections_.size() >= config_.max_pending_connections;
    if (too_many || of_uid >= config_.max_pending_per_uid) {
      // A typed refusal, sent without waiting (a fresh socket's buffer takes one small frame).
      flatbuffers::FlatBufferBuilder fbb(256);
      const std::string why = too_many ? "nexusd has " + std::to_string(connections_.size()) + " connections not yet attached"
                                       : "uid " + std::to_string(peer.uid) + " has " + std::to_string(of_uid) +
                                             " connections not yet attached ([daemon] max_pending_per_uid)";
      fbb.Finish(wire::CreateControlMessage(fbb, wire::ControlBody::Error,
                                            wire::CreateError(fbb, wire::ErrorCode::Busy, fbb.CreateString(why)).Union()));
      const std::uint32_t n = fbb.GetSize();
      std::vector<std::uint8_t> frame(sizeof n + n);
      std::memcpy(frame.data(), &n, sizeof n);
      std::memcpy(frame.data() + sizeof n, fbb.GetBufferPointer(), n);
      [[maybe_unused]] auto sent = ::send(fd, frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      ::close(fd);
      NEXUS_LOG(debug, "connection_refused", "uid={} reason=\"{}\"", peer.uid, why);
      continue;
    }
    const std::uint64_t id = next_id_++;
    connections_.emplace(id, Connection{id, fd, peer, std::chrono::steady_clock::now(), {}, {}, 0, 0, false});
    watch(fd, Tag::Connection, id, true);
  }
}

void Reactor::on_connection(std::uint64_t id, std::uint32_t events) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  Connection& c = it->second;
  if (!c.out.empty() || c.closing) {  // writable again, or gone
    if (!flush_out(c) || (c.closing && c.out.empty())) return close_connection(id);
    if (c.out.empty()) watch(c.fd, Tag::Connection, id, false);  // readable again
    return;
  }
  std::vector<std::uint8_t> frame;
  for (int n = 0; n < kFramesPerEvent; ++n) {
    switch (c.frames.feed(c.fd, frame)) {
      case schema::FrameAccumulator::Result::NeedMore:
        if (events & (EPOLLHUP | EPOLLERR)) close_connection(id);
        return;
      case schema::FrameAccumulator::Result::Closed:
        close_connection(id);
        return;
      case schema::FrameAccumulator::Result::Malformed:
        refuse(c, false, wire::ErrorCode::MessageTooLarge, "control frame too large");
        close_connection(id);
        return;
      case schema::FrameAccumulator::Result::Frame:
        // false: the connection was closed or became a tenant session.
        if (!handle_control_frame(id, c, frame)) return;
        if (c.closing) return close_connection(id);  // over its reply queue's cap
        if (!c.out.empty()) return;  // replies wait: read nothing more until they are taken
        break;
    }
  }
}

void Reactor::send_control(Connection& c, std::span<const std::uint8_t> payload) {
  const std::uint32_t n = static_cast<std::uint32_t>(payload.size());
  std::vector<std::uint8_t> frame(sizeof n + payload.size());
  std::memcpy(frame.data(), &n, sizeof n);
  std::memcpy(frame.data() + sizeof n, payload.data(), payload.size());
  const bool was_empty = c.out.empty();
  c.out_bytes += frame.size();
  c.out.push_back(std::move(frame));
  if (!flush_out(c)) {
    c.closing = true;  // over its cap or gone: closed at its next event
    c.out.clear();
  }
  if (was_empty && !c.out.empty()) watch(c.fd, Tag::Connection, c.id, false);  // now: writability
}

bool Reactor::flush_out(Connection& c) {
  while (!c.out.empty()) {
    const auto& f = c.out.front();
    const ssize_t n = ::send(c.fd, f.data() + c.out_sent, f.size() - c.out_sent, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      return false;
    }
    c.out_sent += static_cast<std::size_t>(n);
    if (c.out_sent < f.size()) continue;
    c.out_bytes -= f.size();
    c.out_sent = 0;
    c.out.pop_front();
  }
  return c.out_bytes <= kMaxQueuedReplyBytes;
}

void Reactor::expire_handshakes() {
  const auto now = std::chrono::steady_clock::now();
  std::vector<std::uint64_t> expired;
  for (const auto& [id, c] : connections_)
    if (now - c.accepted_at > config_.handshake_timeout) expired.push_back(id);
  for (auto id : expired) {
    NEXUS_LOG(debug, "handshake_timeout", "uid={}", connections_.at(id).peer.uid);
    close_connection(id);
  }
}

void Reactor::close_connection(std::uint64_t id) {
  auto it = connections_.find(id);
  if (it == connections_.end()) return;
  unwatch(it->second.fd);
  ::close(it->second.fd);
  connections_.erase(it);
}

}  // namespace nexus::daemon
