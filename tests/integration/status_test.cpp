#include <catch2/catch.hpp>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "nexus/client.hpp"
#include "processes.hpp"
#include "schema/protocol.hpp"

using namespace nexus::test;

TEST_CASE("nexusctl status reports version, uptime and attached tenants", "[integration][status]") {
  Daemon daemon;
  TempDir out;
  auto client = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "status-probe"});
  std::vector<std::uint8_t> hello = {'h', 'i'};
  REQUIRE(client->ping(hello) == hello);

  const std::string json_path = out.path + "/status.json";
  const pid_t ctl = spawn({nexusctl_path(), "--socket", daemon.socket(), "status", "--json"},
                          {.stdout_path = json_path});
  REQUIRE(wait_exit(ctl, std::chrono::seconds(10)) == 0);
  const auto j = nlohmann::json::parse(read_file(json_path));
  CHECK(j["pid"] == daemon.pid());
  CHECK(j["protocol_version"] == nexus::schema::kProtocolVersion);
  CHECK(j["uptime_s"].get<double>() > 0);
  REQUIRE(j["tenants"].size() == 1);
  CHECK(j["tenants"][0]["name"] == "status-probe");
  CHECK(j["tenants"][0]["uid"] == ::getuid());
  CHECK(j["tenants"][0]["pid"] == ::getpid());
  CHECK(j["tenants"][0]["requests"] == 1);
  CHECK(j["tenants"][0]["segment_bytes"].get<std::uint64_t>() > 64ull << 20);

  const std::string text_path = out.path + "/status.txt";
  const pid_t ctl2 = spawn({nexusctl_path(), "--socket", daemon.socket(), "status"},
                           {.stdout_path = text_path});
  REQUIRE(wait_exit(ctl2, std::chrono::seconds(10)) == 0);
  CHECK_THAT(read_file(text_path), Catch::Contains("status-probe") && Catch::Contains("1 tenant(s)"));
}

TEST_CASE("nexusctl says clearly when no daemon answers", "[integration][status]") {
  TempDir out;
  const pid_t ctl = spawn({nexusctl_path(), "--socket", out.path + "/none.sock", "status"},
                          {.stderr_path = out.path + "/err"});
  CHECK(wait_exit(ctl, std::chrono::seconds(10)) == 1);
  CHECK_THAT(read_file(out.path + "/err"), Catch::Contains("ConnectFailed"));
}
