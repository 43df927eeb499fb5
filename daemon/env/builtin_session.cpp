#include "daemon/env/builtin_session.hpp"

#include <algorithm>

#include "sim/task.hpp"

namespace nexus::env {
namespace {

class BuiltinSession final : public EnvSession {
 public:
  explicit BuiltinSession(std::unique_ptr<sim::Task> task) : task_(std::move(task)) {
    spec_ = {task_->image_size(), sim::Task::kStateDim, sim::Task::kActionDim, task_->max_steps()};
  }
  const SessionSpec& spec() const override { return spec_; }
  void reset(std::uint64_t seed) override { task_->reset(seed); }
  StepOutcome step(std::span<const float> action) override {
    try {
      const auto r = task_->step(action);
      return {r.reward, r.done, r.success, r.truncated};
    } catch (const sim::TaskError& e) {
      throw BadInput(e.what());
    }
  }
  void observe(std::uint8_t* rgb, float* state) override {
    task_->render(rgb);
    const auto p = task_->proprio();
    std::copy(p.begin(), p.end(), state);
  }
  std::string instruction() const override { return task_->instruction(); }

 private:
  std::unique_ptr<sim::Task> task_;
  SessionSpec spec_;
};

}  // namespace

std::unique_ptr<EnvSession> make_builtin_session(const std::string& task, int image_size, int max_steps) {
  try {
    return std::make_unique<BuiltinSession>(sim::make_task(task, {.image_size = image_size, .max_steps = max_steps}));
  } catch (const sim::TaskError& e) {
    throw BadInput(e.what());
  }
}

std::vector<std::unique_ptr<EnvSession>> make_builtin_sessions(const std::string& task, int image_size, int max_steps,
                                                               int count) {
  std::vector<std::unique_ptr<EnvSession>> sessions;
  for (int i = 0; i < count; ++i) sessions.push_back(make_builtin_session(task, image_size, max_steps));
  return sessions;
}

}  // namespace nexus::env
