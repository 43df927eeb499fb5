#include "daemon/env/engine_registry.hpp"
#include "daemon/env/rollout_engine.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "schema/ext_frame.hpp"

namespace nexus::env {

// ---- sessions on an engine ----

EngineRegistry::Session::Session(std::shared_ptr<Engine> engine, int fd, std::unique_ptr<EnvSession> inner)
    : engine_(std::move(engine)), fd_(fd), inner_(std::move(inner)) {}

EngineRegistry::Session::~Session() {
  {
    std::lock_guard lk(engine_->mu);  // before the close below: fail() never shuts a reused number
    engine_->session_fds.erase(fd_);
  }
  inner_.reset();
  --engine_->sessions;
}

template <class F>
auto EngineRegistry::Session::guarded(F&& f) {
  if (engine_->failed) {
    std::lock_guard lk(engine_->mu);
    throw EngineLost(engine_->label() + " failed: " + engine_->failure);
  }
  try {
    return f();
  } catch (const BadInput&) {
    throw;
  } catch (const std::exception& e) {
    engine_->fail(e.what(), true);
    throw EngineLost(engine_->label() + ": " + e.what());
  }
}

void EngineRegistry::Session::reset(std::uint64_t seed) {
  guarded([&] { inner_->reset(seed); });
}

StepOutcome EngineRegistry::Session::step(std::span<const float> action) {
  if (!begin_step(action)) throw std::logic_error("an engine's session steps in halves");
  return collect_step();
}

bool EngineRegistry::Session::begin_step(std::span<const float> action) {
  return guarded([&] { return inner_->begin_step(action); });
}

StepOutcome EngineRegistry::Session::collect_step() {
  auto r = guarded([&] { return inner_->collect_step(); });
  ++engine_->steps;
  engine_->last_busy_ns = std::chrono::steady_clock::now().time_since_epoch().count();
  return r;
}

std::string EngineRegistry::Session::placement() const { return engine_->name; }
bool EngineRegistry::Session::usable() const { return !engine_->failed && !engine_->draining; }
void EngineRegistry::Session::distrust(const std::string& why) { engine_->fail(why, false); }

// ---- placement ----

std::unique_ptr<EngineRegistry::Session> EngineRegistry::place(const std::string& task, int image_size, int max_steps,
                                                               std::optional<uid_t> owner, const Session* current) {
  const Engine* now = current && current->usable() ? &current->engine() : nullptr;
  std::shared_ptr<Engine> best;
  {
    MutexLock lk(mu_);
    // Own engines first, then the least full (sessions per capacity).
    const auto rank = [&](const Engine& e, int extra) {
      return std::pair{e.shared ? 1 : 0, double(e.sessions + extra) / e.capacity};
    };
    for (const auto& e : engines_) {
      if (e->failed || e->draining || e.get() == now || !e->serves(task) || e->sessions >= e->capacity) continue;
      if (!e->shared && (!owner || *owner != e->uid)) continue;
      if (!best || rank(*e, 0) < rank(*best, 0)) best = e;
    }
    // A move must leave the new engine, with this session, less full than the current one is.
    if (!best || (now && !(rank(*best, 1) < rank(*now, 0)))) return nullptr;
    ++best->sessions;  // reserved before the open: two opens never overfill it
  }
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) != 0) {
    --best->sessions;
    return nullptr;
  }
  bool sent = false;
  {
    std::lock_guard lk(best->mu);
    if (!best->failed && best->fd >= 0) {
      flatbuffers::FlatBufferBuilder fbb(64);
      const int theirs[1] = {pair[1]};
      sent = schema::send_ext(best->fd, fbb, wire::ExtBody::EngineAssign, wire::CreateEngineAssign(fbb, 0).Union(), 0,
                              theirs);
      if (sent) best->session_fds.insert(pair[0]);  // a hang during the open is cut by fail() too
    }
  }
  ::close(pair[1]);
  if (!sent) {
    ::close(pair[0]);
    --best->sessions;
    best->fail("its registration connection is gone", false);
    return nullptr;
  }
  try {
    auto inner = open_external_on(pair[0], best->label(), task, image_size, max_steps, 1, limits_.timeouts);
    return std::make_unique<Session>(best, pair[0], std::move(inner.front()));
  } catch (const std::exception& e) {
    {
      std::lock_guard lk(best->mu);
      best->session_fds.erase(pair[0]);
    }
    ::close(pair[0]);
    --best->sessions;
    // A task it claimed but refuses, or an open it fumbled: it is not to be trusted with more.
    best->fail(std::string("opening a session: ") + e.what(), true);
    return nullptr;
  }
}

std::vector<EngineView> EngineRegistry::engines() const {
  std::vector<EngineView> out;
  MutexLock lk(mu_);
  for (const auto& e : engines_)
    out.push_back({e->id, e->name, e->uid, e->shared, e->capacity, e->sessions.load(), e->steps.load(),
                   e->draining.load(), e->tasks,
                   std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(e->last_busy_ns.load()))});
  return out;
}

int EngineRegistry::live_engines() const {
  MutexLock lk(mu_);
  return static_cast<int>(std::count_if(engines_.begin(), engines_.end(), [](const auto& e) {
    return e->shared && !e->failed && !e->draining;
  }));
}

int EngineRegistry::drain_least_busy(int n) {
  std::vector<std::pair<int, std::uint64_t>> live;
  {
    MutexLock lk(mu_);
    for (const auto& e : engines_)
      if (e->shared && !e->failed && !e->draining) live.emplace_back(e->sessions.load(), e->id);
  }
  std::sort(live.begin(), live.end());
  int drained = 0;
  for (const auto& [sessions, id] : live)
    if (drained < n) drained += drain(id);
  return drained;
}

bool EngineRegistry::drain(std::uint64_t id) {
  MutexLock lk(mu_);
  for (const auto& e : engines_)
    if (e->id == id && !e->failed && !e->draining.exchange(true)) {
      e->drain_started = std::chrono::steady_clock::now();
      daemon::log_text(daemon::LogLevel::Info, "rollout_engine_draining",
                       "engine=" + e->name + " id=" + std::to_string(id) + " by=nexusd sessions=" +
                           std::to_string(e->sessions.load()));
      return true;
    }
  return false;
}

}  // namespace nexus::env
