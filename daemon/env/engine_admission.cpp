// EngineRegistry's own thread (engine_registry.hpp): it accepts rollout engines on the rollout
// socket, reads their hellos and drains, and lets go of engines that left, failed or drained.
// Placement and the sessions are in engine_registry.cpp.
#include <fcntl.h>
#include <poll.h>

#include <chrono>

#include "daemon/env/rollout_engine.hpp"
#include "schema/ext_frame.hpp"
#include "schema/names.hpp"
#include "sim/task.hpp"

namespace nexus::env {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kReadWait = std::chrono::milliseconds(200);  // a frame that poll said is coming

bool send_to(int fd, flatbuffers::FlatBufferBuilder& fbb, wire::ExtBody type, flatbuffers::Offset<void> body) {
  return schema::send_ext(fd, fbb, type, body, 0);
}

}  // namespace

EngineRegistry::EngineRegistry(int listener, EngineLimits limits, uid_t daemon_uid)
    : limits_(limits), daemon_uid_(daemon_uid), listener_(listener) {
  if (listener_ < 0) return;
  if (::pipe2(wake_, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 for the rollout registry failed");
  thread_ = std::thread([this] { serve(); });
}

EngineRegistry::~EngineRegistry() {
  if (thread_.joinable()) {
    const char stop = 1;
    [[maybe_unused]] auto n = ::write(wake_[1], &stop, 1);
    thread_.join();
  }
  for (int fd : wake_)
    if (fd >= 0) ::close(fd);
  if (listener_ >= 0) ::close(listener_);
  std::lock_guard lk(mu_);
  for (auto& e : engines_) {
    std::lock_guard el(e->mu);
    if (e->fd >= 0) ::close(e->fd), e->fd = -1;
    if (e->pidfd >= 0) ::close(e->pidfd), e->pidfd = -1;
  }
}

// A new connection's hello: who it is (SO_PEERCRED), what it runs, how many sessions it takes.
void EngineRegistry::admit(int fd) {
  ucred peer{};
  socklen_t len = sizeof peer;
  std::vector<std::uint8_t> buffer;
  std::string why;
  const auto* m = ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0
                      ? schema::recv_ext(fd, kReadWait, buffer, why)
                      : nullptr;
  auto engine = std::make_shared<Engine>();
  std::string refusal;
  if (!m || m->body_type() != wire::ExtBody::EngineHello) {
    refusal = "the first message must be EngineHello";
  } else {
    const auto* h = m->body_as_EngineHello();
    engine->name = h->name() ? h->name()->str() : "";
    engine->uid = peer.uid;
    engine->shared = peer.uid == daemon_uid_ || peer.uid == 0;
    engine->capacity = std::min(h->capacity(), limits_.max_capacity);
    if (h->tasks())
      for (const auto* t : *h->tasks()) engine->tasks.push_back(t ? t->str() : "");
    const auto& known = sim::task_names();
    if (h->protocol() != schema::kEngineProtocol)
      refusal = "it speaks engine protocol " + std::to_string(h->protocol()) + ", nexusd speaks " +
                std::to_string(schema::kEngineProtocol);
    else if (!schema::valid_name(engine->name))
      refusal = std::string("its name must be ") + schema::kNameRule;
    else if (h->capacity() < 1)
      refusal = "its capacity must be at least 1 session";
    else if (engine->tasks.empty() || engine->tasks.size() > known.size() ||
             std::any_of(engine->tasks.begin(), engine->tasks.end(),
                         [&](const auto& t) { return std::find(known.begin(), known.end(), t) == known.end(); }))
      refusal = "its tasks must be built-in tasks of this nexusd (reach, push)";
  }
  {
    std::lock_guard lk(mu_);
    if (refusal.empty() && static_cast<int>(engines_.size()) >= limits_.max_engines)
      refusal = "nexusd has its " + std::to_string(limits_.max_engines) + " engines ([rollout] max_engines)";
    if (refusal.empty() && !engine->shared) {
      const auto mine = std::count_if(engines_.begin(), engines_.end(), [&](const auto& e) { return e->uid == peer.uid; });
      const auto private_ones = std::count_if(engines_.begin(), engines_.end(), [](const auto& e) { return !e->shared; });
      if (mine >= limits_.max_private_per_uid)
        refusal = "a user may attach " + std::to_string(limits_.max_private_per_uid) + " engines of their own";
      else if (private_ones >= limits_.max_engines / 2)
        refusal = "users' own engines may take half of nexusd's " + std::to_string(limits_.max_engines) + " at most";
    }
    if (refusal.empty()) engine->id = next_id_++;
  }
  flatbuffers::FlatBufferBuilder fbb(256);
  const bool welcomed =
      send_to(fd, fbb, wire::ExtBody::EngineWelcome,
              wire::CreateEngineWelcome(fbb, fbb.CreateString(refusal), engine->id, engine->shared).Union());
  if (!refusal.empty() || !welcomed) {
    daemon::log_text(daemon::LogLevel::Warn, "rollout_engine_refused",
                     "uid=" + std::to_string(peer.uid) + " reason=\"" + (refusal.empty() ? "it left" : refusal) + "\"");
    ::close(fd);
    return;
  }
  engine->fd = fd;
  engine->pidfd = engine->shared ? static_cast<int>(::syscall(SYS_pidfd_open, peer.pid, 0)) : -1;
  std::string tasks;
  for (const auto& t : engine->tasks) tasks += (tasks.empty() ? "" : ",") + t;
  daemon::log_text(daemon::LogLevel::Info, "rollout_engine_attached",
                   "engine=" + engine->name + " id=" + std::to_string(engine->id) + " uid=" + std::to_string(peer.uid) +
                       " shared=" + (engine->shared ? "true" : "false") + " capacity=" +
                       std::to_string(engine->capacity) + " tasks=" + tasks);
  std::lock_guard lk(mu_);
  engines_.push_back(std::move(engine));
}

bool EngineRegistry::read_registration(const std::shared_ptr<Engine>& e) {
  std::vector<std::uint8_t> buffer;
  std::string why;
  const auto* m = schema::recv_ext(e->fd, kReadWait, buffer, why);
  if (!m) {
    e->fail("it left (" + why + ")", why != "connection closed");
    return false;
  }
  if (m->body_type() != wire::ExtBody::EngineDrain) {
    e->fail("it sent something other than EngineDrain on its registration", true);
    return false;
  }
  if (!e->draining.exchange(true))
    daemon::log_text(daemon::LogLevel::Info, "rollout_engine_draining",
                     "engine=" + e->name + " id=" + std::to_string(e->id) + " sessions=" + std::to_string(e->sessions.load()));
  return true;
}

void EngineRegistry::serve() {
  struct Pending {
    int fd;
    Clock::time_point deadline;
    uid_t uid;
  };
  std::vector<Pending> pending;
  for (;;) {
    std::vector<std::shared_ptr<Engine>> engines;
    {
      std::lock_guard lk(mu_);
      engines = engines_;
    }
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
    for (const auto& p : pending) fds.push_back({p.fd, POLLIN, 0});
    for (const auto& e : engines) fds.push_back({e->fd, POLLIN, 0});  // only this thread changes fd
    ::poll(fds.data(), fds.size(), 200);
    if (fds[0].revents) return;
    if (fds[1].revents & POLLIN)
      for (int k = 0; k < 16; ++k) {
        const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) break;
        ucred peer{};
        socklen_t len = sizeof peer;
        const bool known = ::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &peer, &len) == 0;
        const auto theirs = std::count_if(pending.begin(), pending.end(), [&](const auto& p) { return p.uid == peer.uid; });
        // A crowd that says nothing is turned away (per user first), and engines that speak go on.
        if (!known || pending.size() >= 64 || theirs >= limits_.max_pending_per_uid) {
          ::close(fd);
          continue;
        }
        pending.push_back({fd, Clock::now() + limits_.hello_timeout, peer.uid});
      }
    const auto now = Clock::now();
    for (std::size_t i = 0; i < pending.size();) {
      const auto& pfd = fds[2 + i];
      if (pfd.fd == pending[i].fd && (pfd.revents & (POLLIN | POLLHUP | POLLERR))) {
        admit(pending[i].fd);
      } else if (now > pending[i].deadline) {
        ::close(pending[i].fd);  // connected and never spoke
      } else {
        ++i;
        continue;
      }
      pending.erase(pending.begin() + static_cast<long>(i));
      fds.erase(fds.begin() + 2 + static_cast<long>(i));
    }
    for (std::size_t k = 0; k < engines.size(); ++k) {
      const auto& e = engines[k];
      const auto& efd = fds[fds.size() - engines.size() + k];
      if (!e->failed && (efd.revents & (POLLIN | POLLHUP | POLLERR))) read_registration(e);
      // Drained: nothing of it is left here, so it may go; a failed one is let go at once.
      const bool drained = e->draining && e->sessions == 0 && !e->failed;
      if (!drained && !e->failed) continue;
      {
        std::lock_guard el(e->mu);
        if (drained) {
          flatbuffers::FlatBufferBuilder fbb(64);
          send_to(e->fd, fbb, wire::ExtBody::EngineDrain, wire::CreateEngineDrain(fbb).Union());
          daemon::log_text(daemon::LogLevel::Info, "rollout_engine_drained",
                           "engine=" + e->name + " id=" + std::to_string(e->id) + " steps=" + std::to_string(e->steps.load()));
        }
        ::close(e->fd);
        e->fd = -1;
        if (e->pidfd >= 0) ::close(e->pidfd), e->pidfd = -1;
      }
      std::lock_guard lk(mu_);
      std::erase(engines_, e);
    }
  }
}

}  // namespace nexus::env
