#include "daemon/ipc/reactor.hpp"

#include <fcntl.h>
#include <sys/epoll.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <flatbuffers/flatbuffers.h>
#include <stdexcept>

#include "daemon/log/log.hpp"
#include "daemon/state/private_files.hpp"
#include "daemon/ipc/service_port.hpp"
#include "schema/doorbell.hpp"

namespace nexus::daemon {
namespace {

constexpr std::uint64_t kTagShift = 56;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace

namespace {
// The state directory is private to the daemon's user; tenant names' owners are kept in it.
std::filesystem::path bindings_file(const DaemonConfig& c) {
  ensure_private_dir(c.state_dir);
  return std::filesystem::path(c.state_dir) / "tenants.json";
}
}  // namespace

Reactor::Reactor(DaemonConfig config, int listen_fd, ServicePort* services)
    : config_(std::move(config)),
      listen_fd_(listen_fd),
      services_(services),
      registry_(bindings_file(config_), RegistryLimits{config_.max_names_per_uid, config_.max_names}),
      io_(std::make_unique<IoPool>(config_.io_workers)) {
  reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  epoll_ = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_ < 0) throw std::runtime_error(std::string("epoll_create1: ") + std::strerror(errno));
  stop_fd_ = schema::make_doorbell();
  if (stop_fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  completion_fd_ = schema::make_doorbell();
  if (completion_fd_ < 0) throw std::runtime_error(std::string("eventfd: ") + std::strerror(errno));
  watch(listen_fd_, Tag::Listener, 0, true);
  watch(stop_fd_, Tag::Stop, 0, true);
  watch(completion_fd_, Tag::Completion, 0, true);
}

Reactor::~Reactor() {
  io_.reset();  // its tasks hold segments and post completions: done before anything goes
  sessions_.clear();
  for (auto& [id, c] : connections_) ::close(c.fd);
  ::close(stop_fd_);
  ::close(completion_fd_);
  ::close(epoll_);
  if (reserve_fd_ >= 0) ::close(reserve_fd_);
}

void Reactor::watch(int fd, Tag tag, std::uint64_t id, bool add) {
  epoll_event ev{};
  const bool socket = tag == Tag::TenantSocket || tag == Tag::Connection;
  ev.events = EPOLLIN | (socket ? static_cast<std::uint32_t>(EPOLLRDHUP) : 0u);
  if (tag == Tag::Connection) {
    // A connection with replies waiting is watched for writability only: it gets no more
    // requests read until it reads its replies (its backpressure, nobody else's).
    auto it = connections_.find(id);
    if (it != connections_.end() && !it->second.out.empty()) ev.events = EPOLLOUT | EPOLLRDHUP;
  }
  ev.data.u64 = (static_cast<std::uint64_t>(tag) << kTagShift) | id;
  ::epoll_ctl(epoll_, add ? EPOLL_CTL_ADD : EPOLL_CTL_MOD, fd, &ev);
}

// An fd leaves the epoll set before it is closed: a registration lives as long as the open file
// description, which a peer holding a dup (of a doorbell eventfd, say) would otherwise keep
// alive, reporting readiness for an id that no longer exists, forever.
void Reactor::unwatch(int fd) { ::epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr); }

void Reactor::run() {
  sd_notify(0, "READY=1");
  NEXUS_LOG(info, "ready", "pid={} spin_us={} max_tenants={}", ::getpid(), config_.spin.count(),
            config_.max_tenants);
  auto last_work = std::chrono::steady_clock::now();
  std::uint32_t polls = 0;
  for (;;) {
    watchdog_.beat();
    bool worked = poll_rings();
    if (completions_waiting_.load(std::memory_order_acquire)) {
      drain_completions();
      worked = true;
    }
    if (any_broken_) {
      std::vector<std::uint64_t> broken;
      for (auto& [id, s] : sessions_)
        if (s->broken) broken.push_back(id);
      for (auto id : broken) detach(id, "tenant corrupted its response ring");
      any_broken_ = false;
    }
    const auto now = std::chrono::steady_clock::now();
    if (worked) last_work = now;
    // Control events are checked without blocking every few hundred polls while busy.
    if (worked || now - last_work < config_.spin) {
      if ((++polls & 255) == 0 && !handle_events(0)) break;
      if (!worked) cpu_relax();
      continue;
    }
    // Idle past the spin budget: announce that we sleep, re-check, then block.
    for (auto& [id, s] : sessions_) {
      s->requests.set_consumer_sleeping(true);
      if (!s->pending.empty()) s->responses.set_producer_sleeping(true);
    }
    bool raced = false;
    for (auto& [id, s] : sessions_) raced = raced || !s->requests.empty();
    raced = raced || completions_waiting_.load(std::memory_order_acquire);
    bool has_pending = false;
    for (auto& [id, s] : sessions_) has_pending = has_pending || !s->pending.empty();
    const bool keep_running = raced || handle_events(has_pending ? 1 : watchdog_.max_block_ms());
    for (auto& [id, s] : sessions_) {
      s->requests.set_consumer_sleeping(false);
      s->responses.set_producer_sleeping(false);
    }
    if (!keep_running) break;
    last_work = std::chrono::steady_clock::now();
  }
  sd_notify(0, "STOPPING=1");
  NEXUS_LOG(info, "stopping", "tenants={}", sessions_.size());
}

bool Reactor::handle_events(int timeout_ms) {
  epoll_event events[64];
  const int n = ::epoll_wait(epoll_, events, 64, timeout_ms);
  if (n < 0 && errno != EINTR) throw std::runtime_error(std::string("epoll_wait: ") + std::strerror(errno));
  bool keep_running = true;
  for (int i = 0; i < n; ++i) {
    const auto tag = static_cast<Tag>(events[i].data.u64 >> kTagShift);
    const std::uint64_t id = events[i].data.u64 & ((1ull << kTagShift) - 1);
    switch (tag) {
      case Tag::Listener: accept_all(); break;
      case Tag::Stop:
        schema::drain_doorbell(stop_fd_);
        NEXUS_LOG(info, "stop_requested", "");
        keep_running = false;
        break;
      case Tag::Connection: on_connection(id, events[i].events); break;
      case Tag::TenantSocket: {
        auto it = sessions_.find(id);
        if (it == sessions_.end()) break;
        // After attach a tenant sends only descriptors (datasets); anything else is discarded.
        if (!collect_offered_fds(*it->second) || (events[i].events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR)))
          detach(id, "socket closed");
        break;
      }
      case Tag::Completion:
        schema::drain_doorbell(completion_fd_);
        break;
      case Tag::Doorbell: {
        auto it = sessions_.find(id);
        if (it != sessions_.end()) schema::drain_doorbell(it->second->daemon_doorbell);
        break;
      }
    }
  }
  expire_handshakes();
  if (listener_paused_until_ != std::chrono::steady_clock::time_point{} &&
      std::chrono::steady_clock::now() >= listener_paused_until_) {
    listener_paused_until_ = {};
    if (reserve_fd_ < 0) reserve_fd_ = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    watch(listen_fd_, Tag::Listener, 0, true);
  }
  if (!config_.metrics_textfile.empty() && std::chrono::steady_clock::now() >= next_textfile_) write_metrics_textfile();
  return keep_running;
}

void Reactor::request_stop() const { schema::ring_doorbell(stop_fd_); }  // one write(2): signal-safe

void Reactor::detach(std::uint64_t id, const char* why) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  const TenantSession& s = *it->second;
  NEXUS_LOG(info, "detach", "tenant={} uid={} pid={} session={} served={} errors={} reason=\"{}\"",
            s.name, s.peer.uid, s.peer.pid, s.session_id, s.served, s.errors, why);
  registry_.release(s.name);
  io_->forget(s.session_id);
  if (services_) services_->tenant_detached(s.name);
  session_ids_.erase(s.session_id);
  unwatch(s.socket);
  unwatch(s.daemon_doorbell);
  sessions_.erase(it);  // unmaps the segment, closes socket and doorbells
}

}  // namespace nexus::daemon
