#include "daemon/fault/fault_plan.hpp"

#include <map>

namespace nexus::daemon::fault {
namespace {

const std::map<std::string, std::pair<Point, Action>>& by_name() {
  static const std::map<std::string, std::pair<Point, Action>> m = {
      {"env-worker-throw", {Point::EnvWorker, Action::Throw}},
      {"job-hang", {Point::JobStep, Action::Hang}},
      {"rl-rollout-throw", {Point::RlRollout, Action::Throw}},
      {"rl-rollout-hang", {Point::RlRollout, Action::Hang}},
      {"executor-throw", {Point::ExecutorTurn, Action::Throw}},
  };
  return m;
}

}  // namespace

void Plan::add(Point point, Action action, int times) {
  std::lock_guard lk(mu_);
  for (int i = 0; i < times; ++i) queued_[static_cast<int>(point)].push_back(action);
}

bool Plan::add(const std::string& name) {
  auto it = by_name().find(name);
  if (it == by_name().end()) return false;
  add(it->second.first, it->second.second);
  return true;
}

const std::vector<std::string>& Plan::names() {
  static const std::vector<std::string> n = [] {
    std::vector<std::string> out;
    for (const auto& [name, what] : by_name()) out.push_back(name);
    return out;
  }();
  return n;
}

Action Plan::take(Point point) {
  std::lock_guard lk(mu_);
  auto& q = queued_[static_cast<int>(point)];
  if (q.empty()) return Action::None;
  const Action a = q.front();
  q.pop_front();
  return a;
}

void install(std::unique_ptr<Plan> plan) {
  // Never freed: a thread that loaded the old pointer may still call take() on it.
  static std::mutex mu;
  static std::vector<std::unique_ptr<Plan>> kept;
  std::lock_guard lk(mu);
  detail::g_plan.store(plan.get(), std::memory_order_release);
  if (plan) kept.push_back(std::move(plan));
}

}  // namespace nexus::daemon::fault
