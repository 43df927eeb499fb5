#include <catch2/catch.hpp>

#include <signal.h>

#include <filesystem>
#include <thread>
#include <nlohmann/json.hpp>

#include "nexus/status.hpp"
#include "processes.hpp"

using namespace nexus::test;

TEST_CASE("a tenant killed mid-stream is detected within 1 s and leaves nothing behind", "[fault]") {
  Daemon daemon({"--rollout-socket", "none"});  // so the control socket's is its only listener
  // Status queries' connections close asynchronously: compare fd totals once they settle.
  REQUIRE(eventually([&] { return count_fds(daemon.pid(), "socket:") == 1; }));  // the listener
  const std::size_t fds_idle = count_fds(daemon.pid());
  const std::size_t eventfds_idle = count_fds(daemon.pid(), "eventfd");  // the daemon's own
  const std::size_t epoll_idle = count_epoll_registrations(daemon.pid());   // listener, stop, completions
  auto fds_settle_at = [&](std::size_t n) { return eventually([&] { return count_fds(daemon.pid()) == n; }); };
  TempDir out;
  std::vector<pid_t> pids;
  for (int i = 0; i < 3; ++i) {
    const std::string name = "stream-" + std::to_string(i);
    pids.push_back(spawn({ping_tenant_path(), "--socket", daemon.socket(), "--tenant", name,
                          "--forever", "--window", "4", "--digest-every", "20"},
                         {.stdout_path = out.path + "/" + name + ".json",
                          .stderr_path = out.path + "/" + name + ".err"}));
  }
  REQUIRE(daemon.wait_tenants(3, std::chrono::seconds(10)));
  // Each attached tenant costs the daemon its mapping plus three fds (socket, two doorbells).
  CHECK(count_mappings(daemon.pid(), "memfd:nexus-tenant") == 3);
  CHECK(count_fds(daemon.pid(), "eventfd") == eventfds_idle + 6);
  CHECK(fds_settle_at(fds_idle + 9));
  CHECK(count_epoll_registrations(daemon.pid()) == epoll_idle + 6);  // each tenant's socket and doorbell
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // mid-stream

  ::kill(pids[1], SIGKILL);
  REQUIRE(wait_exit(pids[1], std::chrono::seconds(5)) == 128 + SIGKILL);
  const auto killed_at = std::chrono::steady_clock::now();
  REQUIRE(daemon.wait_tenants(2, std::chrono::seconds(1)));
  const auto detected_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::steady_clock::now() - killed_at).count();
  CHECK(detected_ms <= 1000);
  for (const auto& t : nexus::query_status(daemon.socket()).tenants) CHECK(t.name != "stream-1");
  CHECK(count_mappings(daemon.pid(), "memfd:nexus-tenant") == 2);
  CHECK(count_fds(daemon.pid(), "eventfd") == eventfds_idle + 4);
  CHECK(fds_settle_at(fds_idle + 6));
  CHECK(count_epoll_registrations(daemon.pid()) == epoll_idle + 4);  // the killed one's are gone

  // The survivors were never disturbed: stop them and read their reports.
  for (int i : {0, 2}) ::kill(pids[i], SIGTERM);
  for (int i : {0, 2}) {
    const std::string name = "stream-" + std::to_string(i);
    INFO(read_file(out.path + "/" + name + ".err"));
    REQUIRE(wait_exit(pids[i], std::chrono::seconds(10)) == 0);
    const auto j = nlohmann::json::parse(read_file(out.path + "/" + name + ".json"));
    CHECK(j["mismatched"] == 0);
    CHECK(j["round_trips"].get<std::uint64_t>() > 100);
    CHECK_FALSE(j.contains("error"));
  }
  REQUIRE(daemon.wait_tenants(0, std::chrono::seconds(2)));
  CHECK(count_mappings(daemon.pid(), "memfd:nexus-tenant") == 0);
  CHECK(count_fds(daemon.pid(), "eventfd") == eventfds_idle);
  CHECK(fds_settle_at(fds_idle));
  CHECK(count_epoll_registrations(daemon.pid()) == epoll_idle);
}
