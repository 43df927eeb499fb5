// The two ways one lab member could stop nexusd for everyone, at once: a flood of job starts
// (1500: at c0d0e58 each job got its own thread, 1517 in all, and a failed thread creation
// terminated the daemon) and tenants hashing their whole arenas (at c0d0e58 on the reactor, which
// stalled everyone and let the watchdog lapse). Now: jobs beyond the bounds get LimitExceeded and
// queued jobs hold no thread; digests run beside the reactor; a neighbour's pings keep their p99
// under a second, and the systemd watchdog (real sd_notify datagrams) is never missed.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <thread>

#include "nexus/client.hpp"
#include "nexus/status.hpp"
#include "processes.hpp"
#include "tenant_run.hpp"
#include "watchdog_listener.hpp"

using namespace nexus::test;

TEST_CASE("a job flood and whole-arena digests together: bounded, and a neighbour is still served",
          "[integration][model][overload]") {
  TempDir dir;
  const std::string demos = dir.path + "/reach.hdf5";
  REQUIRE(run_json({nexusctl_path(), "dataset", "record", "--task", "reach", "--episodes", "2", "--out", demos}, dir,
                   "record").first == 0);
  // One running job per tenant, so the flood's jobs queue (the default bounds otherwise).
  std::ofstream(dir.path + "/nexusd.toml") << "[jobs]\nmax_running_per_tenant = 1\n";
  WatchdogListener notify(dir.path + "/notify.sock");
  Daemon daemon({"--config", dir.path + "/nexusd.toml", "--weights", tiny_weights_path(), "--log-level", "warn"},
                nexusd_path(), {{"NOTIFY_SOCKET", notify.path()}, {"WATCHDOG_USEC", "2000000"}});
  const long threads_before = process_status_field(daemon.pid(), "Threads");

  std::atomic<bool> stop{false};
  std::atomic<int> digests{0};
  std::vector<std::thread> hashers;
  for (int t = 0; t < 2; ++t)
    hashers.emplace_back([&, t] {
      auto c = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "hasher" + std::to_string(t),
                                      .client_arena_bytes = 256ull << 20, .timeout = std::chrono::seconds(120)});
      auto big = c->alloc(nexus::DType::UInt8, {(256ll << 20) - 4096});
      while (!stop) {
        std::vector<nexus::Future<nexus::DigestResult>> inflight;
        for (int i = 0; i < 8; ++i) inflight.push_back(c->digest_async(big));
        for (auto& f : inflight) f.get(), ++digests;
      }
    });

  int started = 0, limited = 0, other = 0;
  long threads_most = 0;
  std::string limit_reason;
  std::thread flood([&] {
    auto c = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "flooder", .timeout = std::chrono::seconds(60)});
    c->register_tenant({.head = {.kind = "mlp_chunk", .state_dim = 4, .action_dim = 2, .chunk = 1}});
    c->dataset_load("demos", demos);
    for (int i = 0; i < 1500; ++i) {
      try {
        c->job_start({.kind = "sft", .dataset = "demos", .steps = 100000, .batch = 1, .chunk = 1});
        ++started;
      } catch (const nexus::Error& e) {
        if (e.code() == nexus::ErrorCode::LimitExceeded) ++limited, limit_reason = e.what();
        else ++other;
      }
      if (i % 100 == 0) threads_most = std::max(threads_most, process_status_field(daemon.pid(), "Threads"));
    }
    threads_most = std::max(threads_most, process_status_field(daemon.pid(), "Threads"));
  });

  auto neighbour = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "neighbour", .wait = nexus::WaitMode::Block});
  std::vector<double> ms;
  const std::vector<std::uint8_t> payload(64, 1);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    const auto t0 = std::chrono::steady_clock::now();
    neighbour->ping(payload);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  flood.join();
  stop = true;
  for (auto& h : hashers) h.join();

  std::sort(ms.begin(), ms.end());
  const double p99 = ms[static_cast<std::size_t>(0.99 * static_cast<double>(ms.size() - 1))];
  INFO("jobs started " << started << ", LimitExceeded " << limited << ", other errors " << other << "; threads "
                       << threads_before << " -> at most " << threads_most << "; digests " << digests
                       << "; neighbour p99 " << p99 << " ms of " << ms.size() << "; watchdog pings " << notify.pings()
                       << ", longest gap " << notify.longest_gap_s() << " s; " << limit_reason);
  CHECK(started == 32);  // [jobs] max_per_tenant: queued and running together
  CHECK(limited == 1500 - 32);
  CHECK(other == 0);
  CHECK_THAT(limit_reason, Catch::Contains("max_per_tenant"));
  CHECK(threads_most - threads_before < 40);  // queued jobs hold no thread
  CHECK(digests > 0);
  CHECK(p99 < 1000);
  CHECK(notify.longest_gap_s() < 2.0);
  CHECK(nexus::query_status(daemon.socket()).pid == daemon.pid());  // still the same nexusd
}
