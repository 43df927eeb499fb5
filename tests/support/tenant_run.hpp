// Runs a tenant program to completion: its exit code and the last line of its stdout as JSON
// (null if it is not JSON). Its stdout and stderr are kept under dir as <tag>.out and <tag>.err.
#pragma once
#include <nlohmann/json.hpp>

#include "processes.hpp"

namespace nexus::test {

inline std::pair<int, nlohmann::json> run_json(const std::vector<std::string>& argv, const TempDir& dir,
                                               const std::string& tag) {
  const pid_t p = spawn(argv, {.stdout_path = dir.path + "/" + tag + ".out", .stderr_path = dir.path + "/" + tag + ".err"});
  const int rc = wait_exit(p, std::chrono::seconds(300)).value_or(-1);
  return {rc, nlohmann::json::parse(last_line(dir.path + "/" + tag + ".out"), nullptr, /*allow_exceptions=*/false)};
}

}  // namespace nexus::test
