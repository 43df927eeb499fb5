#include "sim/baselines.hpp"

#include <limits>
#include <vector>

#include "sim/placement.hpp"
#include "sim/task.hpp"

namespace nexus::sim {
namespace {

// The index of the unvisited ball nearest `from`, or -1 if every ball was visited.
int nearest_unvisited(Point from, const std::vector<Point>& balls, const std::vector<bool>& visited) {
  int best = -1;
  double best_d = std::numeric_limits<double>::infinity();
  for (std::size_t i = 0; i < balls.size(); ++i)
    if (!visited[i] && distance(from, balls[i]) < best_d) best = static_cast<int>(i), best_d = distance(from, balls[i]);
  return best;
}

}  // namespace

BaselineScore instruction_ignoring_reach(IgnoringPolicy policy, std::span<const std::uint64_t> seeds) {
  auto task = make_task("reach");
  BaselineScore score;
  for (const auto seed : seeds) {
    task->reset(seed);
    const auto balls = task->mocap_xy();
    std::vector<bool> visited(balls.size(), false);
    int aim = nearest_unvisited(task->fingertip(), balls, visited);
    while (!task->done()) {
      const Point tip = task->fingertip();
      // Reached and the episode goes on: not the named ball. The sweep moves on to the next.
      if (policy == IgnoringPolicy::Sweep && distance(tip, balls[static_cast<std::size_t>(aim)]) < Task::kSuccessRadius) {
        visited[static_cast<std::size_t>(aim)] = true;
        const int next = nearest_unvisited(tip, balls, visited);
        if (next >= 0) aim = next;
      }
      const auto [ax, ay] = steer_toward(tip, balls[static_cast<std::size_t>(aim)]);
      const float action[2] = {ax, ay};
      const auto r = task->step(action);
      score.mean_return += r.reward;
      if (r.done) score.success += r.success ? 1 : 0;
    }
  }
  if (!seeds.empty()) {
    score.success /= static_cast<double>(seeds.size());
    score.mean_return /= static_cast<double>(seeds.size());
  }
  return score;
}

}  // namespace nexus::sim
