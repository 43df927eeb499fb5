// The rollout autoscaler: how many rollout engines nexusd wants, decided from what the registry
// sees, and acted on by running a spawn command ([rollout] spawn) or draining an engine.
// decide_scale() is pure (the clock is an input), so tests drive it with a fake clock, as
// sched::decide. Only engines it may stop are the autoscaler's own: named "auto-N" (the name
// the spawn command is given); engines started by hand or by their own units are left alone.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace nexus::env {

class EngineRegistry;

struct AutoscalePolicy {
  int min_engines = 0;
  int max_engines = 0;                            // 0: no autoscaling
  int sessions_per_engine = 16;                   // what one more engine is expected to take
  std::chrono::milliseconds idle_after{60000};    // an own engine idle this long is drained (above min)
  std::chrono::milliseconds cooldown{5000};       // between two decisions that act
  std::chrono::milliseconds start_grace{30000};   // a start not attached by then is counted failed
};

struct AutoscaleView {
  using Clock = std::chrono::steady_clock;
  struct Engine {
    std::uint64_t id = 0;
    bool own = false;       // started by nexusd (a shared engine named auto-N)
    bool shared = true;     // false: another user's own engine, which nexusd neither counts nor drains
    bool draining = false;
    int sessions = 0, capacity = 0;
    Clock::time_point last_busy;  // its last step (its attach, before any)
  };
  Clock::time_point now, last_action;
  std::vector<Engine> engines;  // attached now
  int starting = 0;             // started, not attached yet (within start_grace)
  int waiting_sessions = 0;     // sessions running in nexusd (they move at their next reset)
};

struct AutoscaleDecision {
  int start = 0;                      // engines to start
  std::vector<std::uint64_t> drain;   // engines to drain
  std::string reason;                 // for the log (empty: nothing to do)
};

AutoscaleDecision decide_scale(const AutoscalePolicy& policy, const AutoscaleView& view);

// The loop around it: once a second, a view from the registry, a decision, the action, a log
// line. Spawned processes are its children and are reaped here.
class RolloutAutoscaler {
 public:
  // `spawn`: argv of the command that starts one engine; "{socket}" and "{n}" in it are
  // replaced by the rollout socket and a counter (the engine is to be named auto-{n}).
  RolloutAutoscaler(EngineRegistry& engines, AutoscalePolicy policy, std::vector<std::string> spawn,
                    std::string socket);
  ~RolloutAutoscaler();

  struct Log {
    std::uint64_t starts = 0, drains = 0;
    std::string last;  // the last decision, and why
  };
  Log log() const;

  // `nexusctl scale rollout N`: starts `n` engines now (false: there is no spawn command).
  bool can_start() const { return !spawn_.empty() && !spawn_.front().empty(); }
  void start(int n, const std::string& why);
  int starting();  // started, not attached yet
  void record(const std::string& decision);  // for status

 private:
  void run();
  void start_one();  // mu_ held
  void forget_attached(AutoscaleView::Clock::time_point now);  // mu_ held: drops starts that attached

  EngineRegistry& engines_;
  const AutoscalePolicy policy_;
  const std::vector<std::string> spawn_;
  const std::string socket_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                                          // GUARDED_BY(mu_)
  Log log_;                                                    // GUARDED_BY(mu_)
  std::vector<pid_t> children_;                                // GUARDED_BY(mu_): reaped by the loop
  std::vector<std::pair<std::string, AutoscaleView::Clock::time_point>> starting_;  // GUARDED_BY(mu_)
  std::uint64_t next_n_ = 1;                                   // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace nexus::env
