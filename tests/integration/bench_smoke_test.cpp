#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "processes.hpp"

using namespace nexus::test;

TEST_CASE("nexus-bench ipc --json ends with one JSON object of its figures", "[integration][bench]") {
  TempDir out;
  const pid_t b = spawn({NEXUS_TEST_BENCH, "ipc", "--json", "-n", "2000", "--block-round-trips", "500"},
                        {.stdout_path = out.path + "/out", .stderr_path = out.path + "/err"});
  INFO(read_file(out.path + "/err"));
  REQUIRE(wait_exit(b, std::chrono::seconds(120)) == 0);
  const auto j = nlohmann::json::parse(last_line(out.path + "/out"));
  for (const char* key : {"spin_p50_us", "spin_p99_us", "block_p50_us", "uds_p50_us", "daemon_copy_bytes_per_mib"}) {
    INFO(key);
    REQUIRE(j.contains(key));
    CHECK(j[key].get<double>() > 0);
  }
  CHECK(j["daemon_tensor_copy_bytes_per_mib"] == 0);
  CHECK(j["digests_match"] == true);
}
