#include "sim/tasks.hpp"

namespace nexus::sim {

const std::vector<std::string>& task_names() {
  static const std::vector<std::string> names = {"reach", "push"};
  return names;
}

std::unique_ptr<Task> make_task(const std::string& name, const TaskOptions& options) {
  if (name == "reach") return make_reach(options);
  if (name == "push") return make_push(options);
  throw TaskError("unknown task '" + name + "' (reach, push)");
}

}  // namespace nexus::sim
