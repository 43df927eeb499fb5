// The Health Manager: every long-lived role (an environment worker, a job's loop, an RL job's
// rollout and update loops, the model service's executor) registers, and heartbeats while it
// works. A role that reports a failure, or misses its heartbeat deadline, is restarted in place
// through the restart function it registered; nothing else stops. Restarts back off (the first
// after `backoff`, each next one twice as late, up to `max_backoff`); a role restarted
// `max_restarts` times within `window` is given up: marked failed with its last error (its
// give-up function tells its owner, e.g. the job fails with that reason) and never restarted
// again. Restarts and failures are counted and logged, and shown by nexusctl status.
//
// The reactor is not a role: it cannot be taken over in place (it owns every connection), so
// systemd's watchdog is its supervisor (it sends WATCHDOG=1 only while it turns).
//
// A hung thread cannot be killed in C++: "restarted" means a fresh thread takes the role over
// and the hung one, if it ever wakes, finds its generation superseded and leaves without acting
// (each role's code checks Role::current() at its safe points).
//
// Thread safety: every member may be called from any thread. Restart and give-up functions run
// on the manager's own thread, never under its lock; they must not call remove(). remove()
// waits for a restart of that role in progress, so after it returns the role's functions are
// never called again.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace nexus::daemon {

class HealthManager;

// How hard the manager tries before it gives a role up.
struct RestartPolicy {
  int max_restarts = 5;                             // within `window`; the next failure gives up
  std::chrono::milliseconds window{600000};
  std::chrono::milliseconds backoff{100};           // before the first restart; doubles each time
  std::chrono::milliseconds max_backoff{10000};
};

// A role's handle: beat while working, report failure, tell whether this thread still holds it.
class Role {
 public:
  void beat();
  // Restart me. With the holder's generation, a report from a superseded holder is ignored.
  void failed(const std::string& reason, std::uint64_t generation = 0);
  // False once a restart handed the role to another thread (generation moved on).
  bool current(std::uint64_t generation) const { return generation_.load() == generation; }
  std::uint64_t generation() const { return generation_.load(); }
  const std::string& name() const { return name_; }

 private:
  friend class HealthManager;
  friend class RoleIdle;
  using Clock = std::chrono::steady_clock;
  Role(HealthManager& m, std::string name, std::chrono::milliseconds deadline, std::function<void()> restart,
       std::function<void(const std::string&)> give_up)
      : manager_(m), name_(std::move(name)), deadline_(deadline), restart_(std::move(restart)),
        give_up_(std::move(give_up)) {}
  HealthManager& manager_;
  const std::string name_;
  const std::chrono::milliseconds deadline_;  // 0: no heartbeat expected (failure reports only)
  const std::function<void()> restart_;
  const std::function<void(const std::string&)> give_up_;
  std::atomic<std::int64_t> last_beat_ns_{0};
  std::atomic<std::uint64_t> generation_{1};
  std::atomic<bool> failed_{false};
  std::atomic<bool> paused_{false};  // idle by design (nothing to do): no heartbeat expected
  std::string reason_;                         // GUARDED_BY(manager_.mu_)
  std::deque<Clock::time_point> restarted_at_; // GUARDED_BY(manager_.mu_): within the window
  std::optional<Clock::time_point> restart_due_;  // GUARDED_BY(manager_.mu_): backing off
  bool given_up_ = false;                      // GUARDED_BY(manager_.mu_)
};

// While alive, the role is idle by design (waiting for work): its heartbeat is not expected.
class RoleIdle {
 public:
  explicit RoleIdle(Role* r) : r_(r) {
    if (r_) r_->paused_ = true;
  }
  ~RoleIdle() {
    if (r_) r_->beat(), r_->paused_ = false;
  }
  RoleIdle(const RoleIdle&) = delete;
  RoleIdle& operator=(const RoleIdle&) = delete;

 private:
  Role* r_;
};

struct RoleStatus {
  std::string name;
  std::uint64_t restarts = 0;
  std::string last_reason;
  bool failed = false;  // given up: not restarted any more
};

class HealthManager {
 public:
  explicit HealthManager(RestartPolicy policy = {});
  ~HealthManager();
  HealthManager(const HealthManager&) = delete;
  HealthManager& operator=(const HealthManager&) = delete;

  // `restart` is called (on the manager's thread) after a failure report or a missed deadline;
  // it must bring the role back (a new thread, a new loop) and return. `give_up` (optional) is
  // called once, with the last reason, when the role is given up.
  std::shared_ptr<Role> add(const std::string& name, std::chrono::milliseconds deadline, std::function<void()> restart,
                            std::function<void(const std::string&)> give_up = {});
  void remove(const std::shared_ptr<Role>& role);
  std::vector<RoleStatus> roles() const;
  std::uint64_t restarts() const;

 private:
  friend class Role;
  void wake();
  void run();
  // Holds mu_: what to do about a role that failed or went silent (now, later, or give up).
  void schedule(Role& r, const std::string& why, Role::Clock::time_point now,
                std::vector<std::pair<std::shared_ptr<Role>, std::string>>& given_up);
  const RestartPolicy policy_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Role>> roles_;        // GUARDED_BY(mu_)
  std::map<std::string, RoleStatus> history_;       // GUARDED_BY(mu_): by role name
  const Role* calling_ = nullptr;                   // GUARDED_BY(mu_): whose function runs now
  bool stop_ = false;                               // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace nexus::daemon
