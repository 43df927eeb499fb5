#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <sstream>

#include "processes.hpp"

using namespace nexus::test;

TEST_CASE("nexus-bench ipc --json ends with one JSON object of its figures", "[integration][bench]") {
  TempDir out;
  const pid_t b = spawn({NEXUS_TEST_BENCH, "ipc", "--json", "-n", "2000", "--block-round-trips", "500"},
                        {.stdout_path = out.path + "/out", .stderr_path = out.path + "/err"});
  INFO(read_file(out.path + "/err"));
  REQUIRE(wait_exit(b, std::chrono::seconds(120)) == 0);
  std::istringstream lines(read_file(out.path + "/out"));
  std::string line, last;
  while (std::getline(lines, line))
    if (!line.empty()) last = line;
  const auto j = nlohmann::json::parse(last);
  for (const char* key : {"spin_p50_us", "spin_p99_us", "block_p50_us", "uds_p50_us", "daemon_copy_bytes_per_mib"}) {
    INFO(key);
    REQUIRE(j.contains(key));
    CHECK(j[key].get<double>() > 0);
  }
  CHECK(j["daemon_tensor_copy_bytes_per_mib"] == 0);
  CHECK(j["digests_match"] == true);
}
