// The one place where tests inject faults into nexusd. Production code names a point where a
// fault may be injected (fault::at(Point::X)) and says what it does with the answer; a test fills
// the process's plan (nexusd --inject-fault NAME, or install() in-process) with how many times
// each point fails and how. Nothing else in the daemon knows about tests.
//
// Cost when empty (every production run): one relaxed load of a null pointer per call, on paths
// that run once per turn or step, never per byte.
//
// Thread safety: at() from any thread. install() once, before the threads that ask start (the
// plan then lives as long as the process).
#pragma once
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace nexus::daemon::fault {

enum class Point : std::uint8_t {
  EnvWorker,      // an environment worker's loop, as it takes work: throws
  JobStep,        // an SFT job's loop, a couple of steps in: hangs past its heartbeat
  RlRollout,      // an RL job's rollout loop, a few steps in: throws, or hangs until taken over
  ExecutorTurn,   // a model executor's loop, with work queued: throws
  kCount,
};

enum class Action : std::uint8_t { None, Throw, Hang };

class Plan {
 public:
  // Queues `action` at `point`, `times` times, after what is queued there already: the point's
  // next calls answer them in order (a loop that throws, then its successor that hangs).
  void add(Point point, Action action, int times = 1);
  // Parses a --inject-fault name (env-worker-throw, job-hang, rl-rollout-throw, rl-rollout-hang,
  // executor-throw); false if there is no such fault.
  bool add(const std::string& name);
  static const std::vector<std::string>& names();
  // The next action planned at `point` (used up), or None.
  Action take(Point point);

 private:
  std::mutex mu_;
  std::deque<Action> queued_[static_cast<int>(Point::kCount)];  // GUARDED_BY(mu_)
};

namespace detail {
inline std::atomic<Plan*> g_plan{nullptr};
}

// Makes `plan` the process's plan (null: none). The previous one, if any, is kept alive: a
// thread may still be reading it.
void install(std::unique_ptr<Plan> plan);

// True when a plan is installed: lets a point skip working out whether it is due.
inline bool armed() { return detail::g_plan.load(std::memory_order_relaxed) != nullptr; }

inline Action at(Point point) {
  Plan* plan = detail::g_plan.load(std::memory_order_acquire);
  return plan == nullptr ? Action::None : plan->take(point);
}

}  // namespace nexus::daemon::fault
