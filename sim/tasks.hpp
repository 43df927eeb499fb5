// The tasks' constructors (one file each), for make_task().
#pragma once
#include "sim/task.hpp"

namespace nexus::sim {
std::unique_ptr<Task> make_reach(const TaskOptions& options);
std::unique_ptr<Task> make_push(const TaskOptions& options);
}  // namespace nexus::sim
