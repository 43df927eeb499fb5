// Rollout engines: simulators in processes of their own (nexus-rollout) that attach to nexusd
// and step the sessions it places on them (nexus.fbs, EngineHello; docs/design/env-rl.md,
// Rollout engines). The registry accepts engines on the rollout socket, knows what each runs
// and how full it is, and opens sessions on them; PlacedSession decides where a session runs.
//
// Who may attach (SO_PEERCRED): an engine of nexusd's own user or root is shared (it serves
// every tenant); any other user's engine is private: it receives only that user's tenants'
// sessions, so a lab member's own simulator never sees another member's actions.
// Faults stay local: an engine that closes its registration, hangs past the step deadline or
// answers out of protocol is failed: every session on it is cut loose at once (their sockets
// shut down, so no exchange waits out its deadline), its sessions are truncated and move at
// their next reset, and a shared engine is killed (its systemd unit restarts it with backoff).
//
// Thread safety: every member may be called from any thread. One thread of its own accepts
// engines and reads their registrations.
#pragma once
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/env/external_session.hpp"
#include "daemon/sync/mutex.hpp"

namespace nexus::env {

struct EngineLimits {
  int max_engines = 16;          // attached at once
  // Another user's (private) engines: at most this many per user, and together at most half of
  // max_engines, so no user crowds out nexusd's own engines or another user's.
  int max_private_per_uid = 4;
  int max_pending_per_uid = 8;   // connections of one user that have not said their hello
  int max_capacity = 256;        // sessions one engine may take (its claim is cut to this)
  ExternalTimeouts timeouts;     // the open and each exchange, as for external environments
  std::chrono::milliseconds hello_timeout{5000};  // a connection that says nothing is closed
  // A draining engine whose sessions have not all moved off by then (sessions that never reset)
  // is let go: what is left on it ends truncated and moves.
  std::chrono::milliseconds drain_timeout{120000};
};

// One attached engine as status shows it.
struct EngineView {
  std::uint64_t id = 0;
  std::string name;
  uid_t uid = 0;
  bool shared = false;
  int capacity = 0, sessions = 0;
  std::uint64_t steps = 0;
  bool draining = false;
  std::vector<std::string> tasks;
  std::chrono::steady_clock::time_point last_busy;  // its last step (its attach, before any)
};

class EngineRegistry {
 public:
  struct Engine;

  // A session on one engine: protocol 3 over its own socket pair, one session per socket.
  class Session final : public EnvSession {
   public:
    Session(std::shared_ptr<Engine> engine, int fd, std::unique_ptr<EnvSession> inner);
    ~Session() override;
    const SessionSpec& spec() const override { return inner_->spec(); }
    void reset(std::uint64_t seed) override;
    StepOutcome step(std::span<const float> action) override;  // EngineLost when the engine fails
    bool begin_step(std::span<const float> action) override;
    StepOutcome collect_step() override;
    void observe(std::uint8_t* rgb, float* state) override { inner_->observe(rgb, state); }
    std::string instruction() const override { return inner_->instruction(); }
    std::string placement() const override;
    bool usable() const;  // its engine is neither failed nor draining
    void distrust(const std::string& why);  // fails its engine (not killed): nothing more goes to it
    const Engine& engine() const { return *engine_; }

   private:
    template <class F>
    auto guarded(F&& f);
    std::shared_ptr<Engine> engine_;
    int fd_;
    std::unique_ptr<EnvSession> inner_;
  };

  // `listener`: a listening Unix socket (nexusd binds it beside the control socket), owned from
  // here on; -1: no engines ever attach.
  EngineRegistry(int listener, EngineLimits limits, uid_t daemon_uid);
  ~EngineRegistry();
  EngineRegistry(const EngineRegistry&) = delete;
  EngineRegistry& operator=(const EngineRegistry&) = delete;

  // A session of `task` on an engine better than `current` (nullptr: the session runs in nexusd,
  // and any engine with room is better; a failed or draining engine is worse than any), or
  // nullptr when there is none. `owner`: the tenant's Unix user (its own engines come first;
  // without one, only shared engines). An engine that fails to open it is failed.
  std::unique_ptr<Session> place(const std::string& task, int image_size, int max_steps, std::optional<uid_t> owner,
                                 const Session* current);

  std::vector<EngineView> engines() const;
  // Marks an engine draining (the autoscaler's scale-down): nothing new goes to it, its sessions
  // move at their next reset, and it is released once none is left. False: no such engine.
  bool drain(std::uint64_t id);
  // Drains up to `n` shared engines, those with the fewest sessions first; returns how many.
  // (Another user's own engines are theirs to stop.)
  int drain_least_busy(int n);
  int live_engines() const;  // shared engines attached, neither failed nor draining

  // Built-in sessions running in nexusd while engines are attached: what more engines would take
  // (PlacedSession keeps the count).
  int sessions_in_nexusd() const { return in_nexusd_; }
  void count_in_nexusd(int delta) { in_nexusd_ += delta; }

 private:
  void serve();  // the registry's thread
  void admit(int fd, const std::vector<std::uint8_t>& hello, uid_t uid, int pidfd);
  void read_registration(const std::shared_ptr<Engine>& engine);  // an EngineDrain, or it failed
  bool release_if_done(const std::shared_ptr<Engine>& engine, std::chrono::steady_clock::time_point now);

  const EngineLimits limits_;
  const uid_t daemon_uid_;
  int listener_;
  int wake_[2] = {-1, -1};  // a pipe: the destructor stops the thread through it
  mutable Mutex mu_;
  std::vector<std::shared_ptr<Engine>> engines_ NEXUS_GUARDED_BY(mu_);
  std::uint64_t next_id_ NEXUS_GUARDED_BY(mu_) = 1;
  std::atomic<int> in_nexusd_{0};
  std::thread thread_;
};

}  // namespace nexus::env
