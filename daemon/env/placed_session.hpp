// A built-in task's session that runs wherever there is room: on a rollout engine (a process of
// its own, engine_registry.hpp) when one serves the task, in nexusd otherwise. It moves only
// between episodes, at a reset (seeded, so the episode is the same wherever it runs):
//   - off an engine that failed or is draining;
//   - from nexusd onto an engine that has room (an engine started now adds capacity to running
//     jobs within their sessions' next episode);
//   - onto an engine clearly less full than its own (balance after a new engine attaches).
// When its engine is lost mid-episode, the step that saw it ends the episode truncated (done,
// truncated, the last observation repeated, the reason in take_interruption()); the session
// itself is fine, and its next reset places it again.
#pragma once
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "daemon/env/engine_registry.hpp"

namespace nexus::env {

class PlacedSession final : public EnvSession {
 public:
  // Throws BadInput for an unknown task or bad options (as a built-in session would).
  PlacedSession(EngineRegistry& engines, std::string task, int image_size, int max_steps, std::optional<uid_t> owner);
  ~PlacedSession() override;

  const SessionSpec& spec() const override { return spec_; }
  void reset(std::uint64_t seed) override;
  StepOutcome step(std::span<const float> action) override;
  bool begin_step(std::span<const float> action) override;  // on an engine only
  StepOutcome collect_step() override;
  void observe(std::uint8_t* rgb, float* state) override;
  std::string instruction() const override { return instruction_; }
  std::string placement() const override { return on_engine_ ? on_engine_->placement() : std::string(); }
  std::string take_interruption() override { return std::exchange(interruption_, {}); }

 private:
  void place();           // onto a better engine if there is one, else where it is (or nexusd)
  void run_in_nexusd();

  EngineRegistry& engines_;
  const std::string task_;
  const int image_size_, max_steps_;
  const std::optional<uid_t> owner_;
  SessionSpec spec_;
  std::unique_ptr<EnvSession> current_;
  EngineRegistry::Session* on_engine_ = nullptr;  // current_, when it runs on an engine
  bool lost_ = false;                             // its engine was lost since the last reset
  bool lost_in_flight_ = false;                   // lost at begin_step: collect_step says so
  std::string interruption_;
  std::string instruction_;
  std::vector<std::uint8_t> last_image_;  // the last observation, repeated when the engine is lost
  std::vector<float> last_state_;
};

}  // namespace nexus::env
