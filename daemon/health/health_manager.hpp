// The Health Manager: every long-lived role (an environment worker, a job's loop, the model
// service's executor) registers, and heartbeats while it works. A role that reports a failure,
// or misses its heartbeat deadline, is restarted in place through the restart function it
// registered; nothing else stops. Restarts are counted and logged, and shown by nexusctl.
//
// A hung thread cannot be killed in C++: "restarted" means a fresh thread takes the role over
// and the hung one, if it ever wakes, finds its generation superseded and leaves without acting
// (each role's code checks Role::current() at its safe points).
//
// Thread safety: every member may be called from any thread. Restart functions run on the
// manager's own thread, never under its lock.
#pragma once
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace nexus::daemon {

class HealthManager;

// A role's handle: beat while working, report failure, tell whether this thread still holds it.
class Role {
 public:
  void beat();
  void failed(const std::string& reason);  // restart me
  // False once a restart handed the role to another thread (generation moved on).
  bool current(std::uint64_t generation) const { return generation_.load() == generation; }
  std::uint64_t generation() const { return generation_.load(); }
  const std::string& name() const { return name_; }

 private:
  friend class HealthManager;
  Role(HealthManager& m, std::string name, std::chrono::milliseconds deadline, std::function<void()> restart)
      : manager_(m), name_(std::move(name)), deadline_(deadline), restart_(std::move(restart)) {}
  HealthManager& manager_;
  const std::string name_;
  const std::chrono::milliseconds deadline_;  // 0: no heartbeat expected (failure reports only)
  const std::function<void()> restart_;
  std::atomic<std::int64_t> last_beat_ns_{0};
  std::atomic<std::uint64_t> generation_{1};
  std::atomic<bool> failed_{false};
  std::atomic<bool> paused_{false};  // idle by design (nothing to do): no heartbeat expected
  std::string reason_;               // GUARDED_BY(manager_.mu_)
  friend class RoleIdle;
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
};

class HealthManager {
 public:
  HealthManager();
  ~HealthManager();
  HealthManager(const HealthManager&) = delete;
  HealthManager& operator=(const HealthManager&) = delete;

  // `restart` is called (on the manager's thread) after a failure report or a missed deadline;
  // it must bring the role back (a new thread, a new loop) and return.
  std::shared_ptr<Role> add(const std::string& name, std::chrono::milliseconds deadline, std::function<void()> restart);
  void remove(const std::shared_ptr<Role>& role);
  std::vector<RoleStatus> roles() const;
  std::uint64_t restarts() const;

 private:
  friend class Role;
  void wake();
  void run();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<Role>> roles_;        // GUARDED_BY(mu_)
  std::map<std::string, RoleStatus> history_;       // GUARDED_BY(mu_): by role name
  bool stop_ = false;                               // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace nexus::daemon
