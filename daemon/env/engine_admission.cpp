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
  MutexLock lk(mu_);
  for (auto& e : engines_) {
    std::lock_guard el(e->mu);
    if (e->fd >= 0) ::close(e->fd), e->fd = -1;
    if (e->pidfd >= 0) ::close(e->pidfd), e->pidfd = -1;
  }
}

namespace {

// One complete frame as an ExtMessage (verified), or nullptr.
const wire::ExtMessage* as_message(const std::vector<std::uint8_t>& frame) {
  flatbuffers::Verifier verifier(frame.data(), frame.size());
  if (!verifier.VerifyBuffer<wire::ExtMessage>(nullptr)) return nullptr;
  const auto* m = flatbuffers::GetRoot<wire::ExtMessage>(frame.data());
  return m->body() ? m : nullptr;
}

}  // namespace

// A new connection's hello (a whole frame: sockets here are non-blocking and frames are
// accumulated, so a peer that sends half a hello holds up nobody): what it runs, how many
// sessions it takes; who it is came from SO_PEERCRED at accept.
void EngineRegistry::admit(int fd, const std::vector<std::uint8_t>& frame, uid_t uid, int pidfd) {
  const auto* m = as_message(frame);
  auto engine = std::make_shared<Engine>();
  std::string refusal;
  if (!m || m->body_type() != wire::ExtBody::EngineHello) {
    refusal = "the first message must be EngineHello";
  } else {
    const auto* h = m->body_as_EngineHello();
    engine->name = h->name() ? h->name()->str() : "";
    engine->uid = uid;
    engine->shared = uid == daemon_uid_ || uid == 0;
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
    MutexLock lk(mu_);
    if (refusal.empty() && static_cast<int>(engines_.size()) >= limits_.max_engines)
      refusal = "nexusd has its " + std::to_string(limits_.max_engines) + " engines ([rollout] max_engines)";
    if (refusal.empty() && !engine->shared) {
      const auto mine = std::count_if(engines_.begin(), engines_.end(), [&](const auto& e) { return e->uid == uid; });
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
                     "uid=" + std::to_string(uid) + " reason=\"" + (refusal.empty() ? "it left" : refusal) + "\"");
    ::close(fd);
    if (pidfd >= 0) ::close(pidfd);
    return;
  }
  engine->fd = fd;
  if (engine->shared)
    engine->pidfd = pidfd;  // taken at accept, from the connecting process
  else if (pidfd >= 0)
    ::close(pidfd);  // another user's process: never signalled
  std::string tasks;
  for (const auto& t : engine->tasks) tasks += (tasks.empty() ? "" : ",") + t;
  daemon::log_text(daemon::LogLevel::Info, "rollout_engine_attached",
                   "engine=" + engine->name + " id=" + std::to_string(engine->id) + " uid=" + std::to_string(uid) +
                       " shared=" + (engine->shared ? "true" : "false") + " capacity=" +
                       std::to_string(engine->capacity) + " tasks=" + tasks);
  MutexLock lk(mu_);
  engines_.push_back(std::move(engine));
}

void EngineRegistry::read_registration(const std::shared_ptr<Engine>& e) {
  std::vector<std::uint8_t> frame;
  for (;;) {
    const auto r = e->registration.feed(e->fd, frame);
    if (r == schema::FrameAccumulator::Result::NeedMore) return;
    if (r != schema::FrameAccumulator::Result::Frame) {
      e->fail(r == schema::FrameAccumulator::Result::Closed ? "it left (its registration closed)"
                                                             : "a malformed frame on its registration",
              r != schema::FrameAccumulator::Result::Closed);
      return;
    }
    const auto* m = as_message(frame);
    if (!m || m->body_type() != wire::ExtBody::EngineDrain) {
      e->fail("it sent something other than EngineDrain on its registration", true);
      return;
    }
    MutexLock lk(mu_);  // with place(): nothing is placed on it once this is set
    if (!e->draining.exchange(true)) {
      e->drain_started = std::chrono::steady_clock::now();
      daemon::log_text(daemon::LogLevel::Info, "rollout_engine_draining",
                       "engine=" + e->name + " id=" + std::to_string(e->id) + " sessions=" +
                           std::to_string(e->sessions.load()));
    }
  }
}

// Lets go of an engine that failed, or drained (no session left, or its drain ran out of time:
// then what is left is cut short, truncated). False: it stays.
bool EngineRegistry::release_if_done(const std::shared_ptr<Engine>& e, std::chrono::steady_clock::time_point now) {
  bool drained = false, overdue = false;
  {
    MutexLock lk(mu_);  // with place(): a session reserved before this check keeps it
    if (!e->failed && e->draining) {
      if (e->drain_started == std::chrono::steady_clock::time_point{}) e->drain_started = now;  // drained by nexusd
      drained = e->sessions == 0;
      overdue = !drained && now - e->drain_started > limits_.drain_timeout;
    }
    if (!drained && !overdue && !e->failed) return false;
    std::erase(engines_, e);
  }
  if (overdue) e->fail("its drain ran out of time: its sessions were cut short", false);
  std::lock_guard el(e->mu);
  if (drained || overdue) {
    flatbuffers::FlatBufferBuilder fbb(64);
    send_to(e->fd, fbb, wire::ExtBody::EngineDrain, wire::CreateEngineDrain(fbb).Union());
    daemon::log_text(daemon::LogLevel::Info, "rollout_engine_drained",
                     "engine=" + e->name + " id=" + std::to_string(e->id) + " steps=" + std::to_string(e->steps.load()));
  }
  if (e->fd >= 0) ::close(e->fd), e->fd = -1;
  if (e->pidfd >= 0) ::close(e->pidfd), e->pidfd = -1;
  return true;
}

void EngineRegistry::serve() {
  struct Pending {
    int fd;
    Clock::time_point deadline;
    uid_t uid;
    int pidfd;
    schema::FrameAccumulator frames;
  };
  std::vector<Pending> pending;
  const auto drop = [](Pending& p) {
    ::close(p.fd);
    if (p.pidfd >= 0) ::close(p.pidfd);
  };
  for (;;) {
    std::vector<std::shared_ptr<Engine>> engines;
    {
      MutexLock lk(mu_);
      engines = engines_;
    }
    // Polled: the wake pipe, the listener, the pending connections, then the engines (only this
    // thread changes an engine's fd).
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
    for (const auto& p : pending) fds.push_back({p.fd, POLLIN, 0});
    for (const auto& e : engines) fds.push_back({e->fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 200);
    if (fds[0].revents) {
      for (auto& p : pending) drop(p);
      return;
    }
    const auto now = Clock::now();
    // Pending connections polled above: a whole hello admits (or refuses) one; silence past the
    // deadline, a close or garbage drops it.
    std::vector<Pending> kept;
    for (std::size_t i = 0; i < pending.size(); ++i) {
      auto& p = pending[i];
      if (fds[2 + i].revents & (POLLIN | POLLHUP | POLLERR)) {
        std::vector<std::uint8_t> frame;
        const auto r = p.frames.feed(p.fd, frame);
        if (r == schema::FrameAccumulator::Result::Frame) {
          admit(p.fd, frame, p.uid, p.pidfd);
          continue;
        }
        if (r != schema::FrameAccumulator::Result::NeedMore) {
          drop(p);
          continue;
        }
      }
      if (now > p.deadline) {
        drop(p);  // connected and never finished its hello
        continue;
      }
      kept.push_back(std::move(p));
    }
    pending = std::move(kept);
    for (std::size_t k = 0; k < engines.size(); ++k) {
      const auto& e = engines[k];
      if (!e->failed && (fds[2 + (fds.size() - 2 - engines.size()) + k].revents & (POLLIN | POLLHUP | POLLERR)))
        read_registration(e);
      release_if_done(e, now);
    }
    if (fds[1].revents & POLLIN)
      for (int k = 0; k < 16; ++k) {
        const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
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
        // The process that connected, now: signalled only if it turns out a shared engine that fails.
        const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, peer.pid, 0));
        pending.push_back({fd, now + limits_.hello_timeout, peer.uid, pidfd, {}});
      }
  }
}

}  // namespace nexus::env
