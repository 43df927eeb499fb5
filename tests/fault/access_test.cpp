// Access control with real Unix users: the tests create two system users (they run as root in
// CI; elsewhere they need root and say so).
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "nexus/status.hpp"
#include "processes.hpp"

using namespace nexus::test;

TEST_CASE("another Unix user can neither attach as nor reach a tenant's segment", "[fault][access]") {
  const auto alice = ensure_test_user("nexus-test-alice");
  const auto mallory = ensure_test_user("nexus-test-mallory");
  if (!alice || !mallory) {
    FAIL("this test needs root to create users; run the suite as root (scripts/test.sh does via sudo)");
  }
  // Binaries where the test users can execute them (the build tree may sit in /root).
  TempDir bin;
  const std::string tenant = bin.path + "/ping_tenant", probe = bin.path + "/probe_access";
  std::filesystem::copy_file(ping_tenant_path(), tenant);
  std::filesystem::copy_file(probe_access_path(), probe);
  ::chmod(tenant.c_str(), 0755);
  ::chmod(probe.c_str(), 0755);

  Daemon daemon;
  const pid_t a = spawn({tenant, "--socket", daemon.socket(), "--tenant", "alice-policy", "--forever",
                         "--window", "2"},
                        {.stdout_path = bin.path + "/alice.json", .uid = alice->uid, .gid = alice->gid});
  REQUIRE(daemon.wait_tenants(1, std::chrono::seconds(10)));
  CHECK(nexus::query_status(daemon.socket()).tenants.at(0).uid == alice->uid);

  // Mallory asks for alice's tenant name: refused, typed.
  const pid_t m = spawn({tenant, "--socket", daemon.socket(), "--tenant", "alice-policy", "-n", "1"},
                        {.stdout_path = bin.path + "/mallory.json", .stderr_path = bin.path + "/mallory.err",
                         .uid = mallory->uid, .gid = mallory->gid});
  REQUIRE(wait_exit(m, std::chrono::seconds(10)) == 2);
  CHECK(nlohmann::json::parse(read_file(bin.path + "/mallory.json"))["error"] == "PermissionDenied");

  // Mallory probes every route to the segment: alice's and the daemon's fds, mapped files,
  // memory, and /dev/shm. None opens.
  const std::string pid_a = std::to_string(a), pid_d = std::to_string(daemon.pid());
  const pid_t probe_m = spawn({probe, pid_a, pid_d}, {.stdout_path = bin.path + "/probe_m.txt",
                                                      .uid = mallory->uid, .gid = mallory->gid});
  INFO(read_file(bin.path + "/probe_m.txt"));
  CHECK(wait_exit(probe_m, std::chrono::seconds(10)) == 0);
  // The probe itself works: the daemon's owner (root here) can open those fds.
  const pid_t probe_root = spawn({probe, pid_a, pid_d}, {.stdout_path = bin.path + "/probe_root.txt"});
  CHECK(wait_exit(probe_root, std::chrono::seconds(10)) == 1);

  ::kill(a, SIGTERM);
  REQUIRE(wait_exit(a, std::chrono::seconds(10)) == 0);
  // The name stays alice's after she detaches.
  const pid_t m2 = spawn({tenant, "--socket", daemon.socket(), "--tenant", "alice-policy", "-n", "1"},
                         {.stdout_path = bin.path + "/mallory2.json", .uid = mallory->uid, .gid = mallory->gid});
  REQUIRE(wait_exit(m2, std::chrono::seconds(10)) == 2);
  CHECK(nlohmann::json::parse(read_file(bin.path + "/mallory2.json"))["error"] == "PermissionDenied");
}

#ifdef NEXUS_TEST_SFT_DEMOS_TENANT  // builds with the model service only
TEST_CASE("a dataset its tenant's user may not read is refused, though nexusd could read it", "[fault][access]") {
  const auto mallory = ensure_test_user("nexus-test-mallory");
  if (!mallory) FAIL("this test needs root to create users; run the suite as root (scripts/test.sh does via sudo)");
  TempDir bin;
  const std::string tenant = bin.path + "/sft_demos_tenant";
  std::filesystem::copy_file(NEXUS_TEST_SFT_DEMOS_TENANT, tenant);
  ::chmod(tenant.c_str(), 0755);
  // A valid demonstration file, readable by its owner (root, like nexusd here) only.
  const std::string secret = bin.path + "/secret.hdf5";
  REQUIRE(wait_exit(spawn({nexusctl_path(), "dataset", "record", "--task", "reach", "--episodes", "2", "--out", secret},
                          {.stdout_path = bin.path + "/record.out"}),
                    std::chrono::seconds(60)) == 0);
  ::chmod(secret.c_str(), 0600);
  Daemon daemon({"--weights", tiny_weights_path(), "--state-dir", bin.path + "/state", "--log-level", "warn"});
  const pid_t m = spawn({tenant, "--socket", daemon.socket(), "--tenant", "mallory-sft", "--dataset", secret, "--steps", "1"},
                        {.stdout_path = bin.path + "/mallory.json", .stderr_path = bin.path + "/mallory.err",
                         .uid = mallory->uid, .gid = mallory->gid});
  REQUIRE(wait_exit(m, std::chrono::seconds(60)) == 2);
  INFO(read_file(bin.path + "/mallory.err"));
  CHECK(nlohmann::json::parse(read_file(bin.path + "/mallory.json"))["error"] == "PermissionDenied");
  CHECK(read_file(bin.path + "/mallory.err").find("secret.hdf5") != std::string::npos);
  // The same file, readable by its user: trains.
  const pid_t ok = spawn({tenant, "--socket", daemon.socket(), "--tenant", "root-sft", "--dataset", secret, "--steps", "2"},
                         {.stdout_path = bin.path + "/root.json", .stderr_path = bin.path + "/root.err"});
  REQUIRE(wait_exit(ok, std::chrono::seconds(60)) == 0);
  CHECK(nlohmann::json::parse(last_line(bin.path + "/root.json"))["steps"] == 2);
  CHECK(nexus::query_status(daemon.socket()).pid == daemon.pid());
}
#endif
