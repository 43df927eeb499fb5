#include "dataset_command.hpp"

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "datasets/demo_file.hpp"
#include "sim/task.hpp"

namespace nexus::ctl {

int record_dataset(const RecordOptions& o) {
  auto task = sim::make_task(o.task, {.image_size = o.image_size});
  datasets::DatasetMeta meta{.task = o.task,
                             .image_size = o.image_size,
                             .state_dim = sim::Task::kStateDim,
                             .action_dim = sim::Task::kActionDim};
  std::vector<datasets::Episode> episodes;
  int attempted = 0, succeeded = 0;
  for (; static_cast<int>(episodes.size()) < o.episodes && attempted < 4 * o.episodes + 10; ++attempted) {
    task->reset(o.seed + static_cast<std::uint64_t>(attempted));
    datasets::Episode e;
    e.instruction = task->instruction();
    while (!task->done()) {
      const auto image = task->render();
      e.images.insert(e.images.end(), image.begin(), image.end());
      const auto p = task->proprio();
      e.proprio.insert(e.proprio.end(), p.begin(), p.end());
      const auto s = task->sim_state();
      e.sim_states.insert(e.sim_states.end(), s.begin(), s.end());
      meta.sim_state_dim = static_cast<std::int64_t>(s.size());
      const auto a = task->expert_action();
      e.actions.insert(e.actions.end(), a.begin(), a.end());
      const auto r = task->step(a);
      e.rewards.push_back(r.reward);
      e.dones.push_back(r.done);
      ++e.steps;
    }
    e.success = task->success();
    succeeded += e.success;
    if (e.success || o.keep_failures) episodes.push_back(std::move(e));
    if ((attempted + 1) % 10 == 0)
      std::fprintf(stderr, "\r[record %s] %d episodes, %zu kept, expert success %.0f%%", o.task.c_str(), attempted + 1,
                   episodes.size(), 100.0 * succeeded / (attempted + 1));
  }
  std::fprintf(stderr, "\n");
  datasets::write_demo_file(o.out, meta, episodes);
  std::int64_t steps = 0;
  for (const auto& e : episodes) steps += e.steps;
  std::printf("wrote %s: %zu %s demonstrations, %lld steps (expert success %d/%d)\n", o.out.c_str(), episodes.size(),
              o.task.c_str(), static_cast<long long>(steps), succeeded, attempted);
  return static_cast<int>(episodes.size()) == o.episodes ? 0 : 1;
}

int dataset_info(const std::string& path, bool json) {
  const auto f = datasets::read_demo_file(path);
  std::int64_t steps = 0, successes = 0;
  for (const auto& e : f.episodes) {
    steps += e.steps;
    successes += e.success;
  }
  if (json) {
    nlohmann::json j = {{"task", f.meta.task},           {"camera", f.meta.camera},
                        {"image_size", f.meta.image_size}, {"state_dim", f.meta.state_dim},
                        {"action_dim", f.meta.action_dim}, {"demos", f.episodes.size()},
                        {"steps", steps},                  {"successes", successes}};
    std::cout << j.dump() << "\n";
    return 0;
  }
  std::printf("%s: task %s, %zu demos, %lld steps, %lld successful; camera %s %lldx%lld, state %lld, action %lld\n",
              path.c_str(), f.meta.task.c_str(), f.episodes.size(), static_cast<long long>(steps),
              static_cast<long long>(successes), f.meta.camera.c_str(), static_cast<long long>(f.meta.image_size),
              static_cast<long long>(f.meta.image_size), static_cast<long long>(f.meta.state_dim),
              static_cast<long long>(f.meta.action_dim));
  return 0;
}

}  // namespace nexus::ctl
