#include "dataset_command.hpp"

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "datasets/demo_file.hpp"
#include "datasets/normalizer.hpp"
#include "sim/task.hpp"

namespace nexus::ctl {

int record_dataset(const RecordOptions& o) {
  auto task = sim::make_task(o.task, {.image_size = o.image_size});
  datasets::DatasetMeta meta{.task = o.task,
                             .image_size = o.image_size,
                             .source_image_size = o.image_size,
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

int dataset_info(const std::string& path, const datasets::ReadOptions& options, bool json) {
  const auto f = datasets::read_demo_file(path, options);
  std::int64_t steps = 0, train_steps = 0, successes = 0, train = 0, valid = 0;
  for (const auto& e : f.episodes) {
    steps += e.steps;
    train_steps += e.train ? e.steps : 0;
    successes += e.success;
    train += e.train;
    valid += e.valid;
  }
  const auto& m = f.meta;
  const auto stats = train > 0 ? datasets::compute_normalizer(f) : datasets::Normalizer{};
  if (json) {
    nlohmann::json j = {{"task", m.task},
                        {"layout", m.layout},
                        {"views", m.views},
                        {"state_keys", m.state_keys},
                        {"image_size", m.image_size},
                        {"source_image_size", m.source_image_size},
                        {"state_dim", m.state_dim},
                        {"action_dim", m.action_dim},
                        {"demos", f.episodes.size()},
                        {"train_demos", train},
                        {"valid_demos", valid},
                        {"masks", m.has_masks},
                        {"steps", steps},
                        {"train_steps", train_steps},
                        {"successes", successes},
                        {"action_mean", stats.action.mean},
                        {"action_std", stats.action.std},
                        {"state_mean", stats.state.mean},
                        {"state_std", stats.state.std}};
    std::cout << j.dump() << "\n";
    return 0;
  }
  auto list = [](const std::vector<std::string>& v) {
    std::string s;
    for (const auto& k : v) s += (s.empty() ? "" : ",") + k;
    return s.empty() ? std::string("-") : s;
  };
  std::printf("%s: %s layout, task %s, %zu demos (%lld train, %lld valid), %lld steps, %lld successful\n",
              path.c_str(), m.layout.c_str(), m.task.c_str(), f.episodes.size(), static_cast<long long>(train),
              static_cast<long long>(valid), static_cast<long long>(steps), static_cast<long long>(successes));
  std::printf("  views %s (%lld px%s), state %lld [%s], action %lld\n", list(m.views).c_str(),
              static_cast<long long>(m.source_image_size),
              m.image_size != m.source_image_size ? (", resized to " + std::to_string(m.image_size)).c_str() : "",
              static_cast<long long>(m.state_dim), list(m.state_keys).c_str(), static_cast<long long>(m.action_dim));
  auto row = [](const char* what, const std::vector<float>& v) {
    std::printf("  %s", what);
    for (const float x : v) std::printf(" %.3g", x);
    std::printf("\n");
  };
  row("action mean", stats.action.mean);
  row("action std ", stats.action.std);
  return 0;
}

}  // namespace nexus::ctl
