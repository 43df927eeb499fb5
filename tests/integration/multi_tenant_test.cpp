#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "processes.hpp"

using namespace nexus::test;

TEST_CASE("8 tenant processes, 100k round trips, every reply matched", "[integration]") {
  Daemon daemon;
  TempDir out;
  constexpr int kTenants = 8;
  constexpr int kEach = 12'500;  // 100k in total
  std::vector<pid_t> pids;
  for (int i = 0; i < kTenants; ++i) {
    const std::string name = "tenant-" + std::to_string(i);
    pids.push_back(spawn({ping_tenant_path(), "--socket", daemon.socket(), "--tenant", name,
                          "--count", std::to_string(kEach), "--window", std::to_string(1 + i % 8),
                          "--digest-every", "50", "--seed", std::to_string(i),
                          "--wait", i % 3 == 0 ? "block" : "adaptive", "--hold-ms", "3000"},
                         {.stdout_path = out.path + "/" + name + ".json",
                          .stderr_path = out.path + "/" + name + ".err"}));
  }
  // All eight are attached at once at some point (each holds its attachment 3 s at the end, so a
  // tenant that started late still overlaps the first on a loaded machine).
  CHECK(daemon.wait_tenants(kTenants, std::chrono::seconds(60)));
  std::uint64_t total = 0;
  for (int i = 0; i < kTenants; ++i) {
    const std::string name = "tenant-" + std::to_string(i);
    const auto rc = wait_exit(pids[i], std::chrono::seconds(120));
    INFO(name << " stderr: " << read_file(out.path + "/" + name + ".err"));
    REQUIRE(rc.has_value());
    CHECK(*rc == 0);
    const auto j = nlohmann::json::parse(read_file(out.path + "/" + name + ".json"));
    CHECK(j["mismatched"] == 0);
    CHECK(j["round_trips"] == kEach);
    total += j["round_trips"].get<std::uint64_t>();
  }
  CHECK(total == 100'000);
  CHECK(daemon.wait_tenants(0, std::chrono::seconds(5)));
}
