#include "daemon/env/placed_session.hpp"

#include <algorithm>
#include <cstring>

#include "daemon/env/builtin_session.hpp"

namespace nexus::env {
namespace {
bool same(const SessionSpec& a, const SessionSpec& b) {
  return a.image_size == b.image_size && a.state_dim == b.state_dim && a.action_dim == b.action_dim &&
         a.max_steps == b.max_steps;
}
}  // namespace

PlacedSession::PlacedSession(EngineRegistry& engines, std::string task, int image_size, int max_steps,
                             std::optional<uid_t> owner)
    : engines_(engines), task_(std::move(task)), image_size_(image_size), max_steps_(max_steps), owner_(owner) {
  // The spec is nexusd's own build of the task: an engine whose spec differs is never used.
  run_in_nexusd();
  spec_ = current_->spec();
  place();
  last_image_.assign(static_cast<std::size_t>(spec_.image_size) * spec_.image_size * 3, 0);
  last_state_.assign(static_cast<std::size_t>(spec_.state_dim), 0.f);
}

void PlacedSession::run_in_nexusd() {
  auto here = make_builtin_session(task_, image_size_, max_steps_);
  if (on_engine_ || !current_) engines_.count_in_nexusd(+1);
  current_ = std::move(here);
  on_engine_ = nullptr;
}

PlacedSession::~PlacedSession() {
  if (!on_engine_) engines_.count_in_nexusd(-1);
}

void PlacedSession::place() {
  if (on_engine_ && (lost_ || !on_engine_->usable())) run_in_nexusd();  // leaves the engine first
  auto better = engines_.place(task_, image_size_, max_steps_, owner_, on_engine_);
  if (!better) return;
  if (!same(better->spec(), spec_)) return better->distrust("its " + task_ + " is not nexusd's (another spec)");
  if (!on_engine_) engines_.count_in_nexusd(-1);
  on_engine_ = better.get();
  current_ = std::move(better);
}

void PlacedSession::reset(std::uint64_t seed) {
  place();
  lost_ = false;
  try {
    current_->reset(seed);
  } catch (const EngineLost&) {
    run_in_nexusd();  // lost between its placement and now: the episode starts here instead
    current_->reset(seed);
  }
  instruction_ = current_->instruction();
}

StepOutcome PlacedSession::step(std::span<const float> action) {
  if (lost_) throw BadInput("the episode ended (its rollout engine was lost): reset the session");
  try {
    return current_->step(action);
  } catch (const EngineLost& e) {
    lost_ = true;
    interruption_ = e.what();
    return {.reward = 0, .done = true, .success = false, .truncated = true};
  }
}

bool PlacedSession::begin_step(std::span<const float> action) {
  if (lost_ || !on_engine_) return false;  // step() refuses, or runs it here
  try {
    return on_engine_->begin_step(action);
  } catch (const EngineLost& e) {
    lost_in_flight_ = true;
    interruption_ = e.what();
    return true;
  }
}

StepOutcome PlacedSession::collect_step() {
  const StepOutcome cut{.reward = 0, .done = true, .success = false, .truncated = true};
  if (std::exchange(lost_in_flight_, false)) {
    lost_ = true;
    return cut;
  }
  try {
    return on_engine_->collect_step();
  } catch (const EngineLost& e) {
    lost_ = true;
    interruption_ = e.what();
    return cut;
  }
}

void PlacedSession::observe(std::uint8_t* rgb, float* state) {
  if (!lost_) {
    current_->observe(last_image_.data(), last_state_.data());
    instruction_ = current_->instruction();
  }
  std::memcpy(rgb, last_image_.data(), last_image_.size());
  std::copy(last_state_.begin(), last_state_.end(), state);
}

}  // namespace nexus::env
