// Runs tenant programs to completion against a daemon, and compares what they report.
// Their stdout and stderr are kept under the given dir as <tag>.out/.json and <tag>.err.
#pragma once
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <map>

#include "processes.hpp"

namespace nexus::test {

// One tenant program's exit code (-1: still running after `limit`) and the last line of its
// stdout as JSON (null if not JSON).
inline std::pair<int, nlohmann::json> run_json(const std::vector<std::string>& argv, const TempDir& dir,
                                               const std::string& tag,
                                               std::chrono::seconds limit = std::chrono::seconds(300)) {
  const pid_t p = spawn(argv, {.stdout_path = dir.path + "/" + tag + ".out", .stderr_path = dir.path + "/" + tag + ".err"});
  const int rc = wait_exit(p, limit).value_or(-1);
  return {rc, nlohmann::json::parse(last_line(dir.path + "/" + tag + ".out"), nullptr, /*allow_exceptions=*/false)};
}

// The largest |a - b| / |a| between two tenants' reported loss trajectories ("losses"), which
// must be equally long.
inline double max_relative_difference(const nlohmann::json& a, const nlohmann::json& b) {
  const auto& la = a["losses"];
  const auto& lb = b["losses"];
  REQUIRE(la.size() == lb.size());
  double worst = 0;
  for (std::size_t i = 0; i < la.size(); ++i)
    worst = std::max(worst, std::abs(la[i].get<double>() - lb[i].get<double>()) / std::abs(la[i].get<double>()));
  return worst;
}

#ifdef NEXUS_TEST_SFT_TENANT
struct SftTenant {
  std::string name, head;
  std::uint64_t seed;
  std::vector<std::string> extra;
};

// Runs sft_tenant processes at once against `daemon`, `steps` steps each, with their loss
// trajectories; each one's JSON report by name. Every one must exit 0.
inline std::map<std::string, nlohmann::json> run_sft_tenants(const Daemon& daemon, const std::vector<SftTenant>& tenants,
                                                             int steps, const TempDir& out) {
  std::vector<pid_t> pids;
  for (const auto& t : tenants) {
    std::vector<std::string> argv = {NEXUS_TEST_SFT_TENANT, "--socket", daemon.socket(), "--tenant", t.name, "--head",
                                     t.head, "--seed", std::to_string(t.seed), "--steps", std::to_string(steps),
                                     "--report-every", "0", "--trajectory"};
    argv.insert(argv.end(), t.extra.begin(), t.extra.end());
    pids.push_back(spawn(argv, {.stdout_path = out.path + "/" + t.name + ".json", .stderr_path = out.path + "/" + t.name + ".err"}));
  }
  std::map<std::string, nlohmann::json> reports;
  for (std::size_t i = 0; i < tenants.size(); ++i) {
    const auto rc = wait_exit(pids[i], std::chrono::seconds(240));
    INFO(tenants[i].name << ": " << read_file(out.path + "/" + tenants[i].name + ".err"));
    REQUIRE(rc == 0);
    reports[tenants[i].name] = nlohmann::json::parse(read_file(out.path + "/" + tenants[i].name + ".json"));
  }
  return reports;
}
#endif

}  // namespace nexus::test
