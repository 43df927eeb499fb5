// Work sized by a tenant's data never runs on the reactor: tenants hashing their whole arenas
// (DigestRequest, 256 MiB each, eight in flight apiece) do not slow a neighbour's pings, and the
// systemd watchdog, pinged from its own thread while the reactor turns, is never missed. At
// c0d0e58 the reactor hashed them itself: the neighbour waited seconds and the watchdog lapsed.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <thread>

#include "nexus/client.hpp"
#include "processes.hpp"
#include "watchdog_listener.hpp"

using namespace nexus::test;

TEST_CASE("tenants digesting whole arenas slow neither a neighbour's pings nor the watchdog", "[fault][frontdoor]") {
  TempDir dir;
  WatchdogListener notify(dir.path + "/notify.sock");
  Daemon daemon({"--backbone", "none", "--log-level", "warn"}, nexusd_path(),
                {{"NOTIFY_SOCKET", notify.path()}, {"WATCHDOG_USEC", "2000000"}});
  std::atomic<bool> stop{false};
  std::atomic<int> digests{0};
  std::vector<std::thread> hashers;
  struct Join {  // however the measurement ends (a ping that timed out throws), the hashers stop
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    ~Join() {
      stop = true;
      for (auto& t : threads)
        if (t.joinable()) t.join();
    }
  } join{stop, hashers};
  for (int t = 0; t < 3; ++t)
    hashers.emplace_back([&, t] {
      auto c = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "hasher" + std::to_string(t),
                                      .client_arena_bytes = 256ull << 20, .timeout = std::chrono::seconds(120)});
      auto big = c->alloc(nexus::DType::UInt8, {(256ll << 20) - 4096});
      std::fill_n(big.raw().data(), 4096, static_cast<std::uint8_t>(t));
      try {
        while (!stop) {
          std::vector<nexus::Future<nexus::DigestResult>> inflight;
          for (int i = 0; i < 8; ++i) inflight.push_back(c->digest_async(big));
          for (auto& f : inflight)
            if (f.get().bytes == big.raw().size()) ++digests;
        }
      } catch (const nexus::Error&) {  // the daemon went away at the end of the test
      }
    });
  // Wait until the hashers keep the daemon busy, then measure the neighbour.
  REQUIRE(eventually([&] { return digests.load() >= 3; }, std::chrono::seconds(120)));
  auto neighbour = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "neighbour", .wait = nexus::WaitMode::Block});
  std::vector<double> ms;
  const std::vector<std::uint8_t> payload(64, 1);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(8);
  while (std::chrono::steady_clock::now() < until) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      neighbour->ping(payload);
    } catch (const nexus::Error& e) {  // no answer within the client's deadline: the worst case
      FAIL_CHECK("a neighbour's ping failed: " << e.what());
    }
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::sort(ms.begin(), ms.end());
  const double p99 = ms[static_cast<std::size_t>(0.99 * static_cast<double>(ms.size() - 1))];
  INFO("neighbour pings " << ms.size() << ", p99 " << p99 << " ms, max " << ms.back() << " ms; digests " << digests
                          << "; watchdog pings " << notify.pings() << ", longest gap " << notify.longest_gap_s() << " s");
  CHECK(p99 < 1000);
  CHECK(notify.pings() >= 4);
  CHECK(notify.longest_gap_s() < 2.0);  // WATCHDOG_USEC: systemd would have restarted nexusd
}
