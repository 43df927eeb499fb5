#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <thread>

#include "processes.hpp"

using namespace nexus::test;

TEST_CASE("clients get DaemonGone within their timeout when nexusd is SIGKILLed", "[fault]") {
  Daemon daemon;
  TempDir out;
  const std::vector<std::string> modes = {"spin", "block", "adaptive"};
  std::vector<pid_t> pids;
  for (const auto& mode : modes) {
    pids.push_back(spawn({ping_tenant_path(), "--socket", daemon.socket(), "--tenant", "victim-" + mode,
                          "--forever", "--wait", mode, "--timeout-ms", "3000"},
                         {.stdout_path = out.path + "/" + mode + ".json",
                          .stderr_path = out.path + "/" + mode + ".err"}));
  }
  REQUIRE(daemon.wait_tenants(modes.size(), std::chrono::seconds(10)));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  daemon.kill9();
  const auto killed_at = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < modes.size(); ++i) {
    INFO("mode " << modes[i]);
    const auto rc = wait_exit(pids[i], std::chrono::milliseconds(3000 + 2000));
    REQUIRE(rc.has_value());  // never a hang
    CHECK(*rc == 2);
    CHECK(std::chrono::steady_clock::now() - killed_at < std::chrono::milliseconds(3000 + 1000));
    const auto j = nlohmann::json::parse(read_file(out.path + "/" + modes[i] + ".json"));
    CHECK(j["error"] == "DaemonGone");
    CHECK_THAT(read_file(out.path + "/" + modes[i] + ".err"), Catch::Contains("DaemonGone"));
  }
}
