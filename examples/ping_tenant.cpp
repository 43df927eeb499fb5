// ping_tenant: attaches to nexusd, sends request/reply round trips with random payloads (and
// optionally in-place tensor digests), checks that every reply matches its request, and prints
// one JSON summary line. Exit status: 0 all matched, 2 an error (its code on stderr), 3 mismatch.
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <deque>
#include <random>
#include <thread>

#include <CLI/CLI.hpp>

#include "nexus/client.hpp"

namespace {
std::atomic<bool> g_stop{false};  // SIGTERM: finish what is in flight, report, exit
}

int main(int argc, char** argv) {
  CLI::App app{"ping_tenant: round trips through nexusd"};
  nexus::ClientOptions opt;
  std::uint64_t count = 1000;
  std::size_t max_payload = 256;
  std::size_t window = 8;
  std::uint64_t digest_every = 0;
  int hold_ms = 0;
  bool forever = false;
  std::string mode = "adaptive";
  long timeout_ms = 10000;
  std::uint64_t seed = 1;
  app.add_option("-s,--socket", opt.socket_path, "nexusd control socket");
  app.add_option("-t,--tenant", opt.tenant, "tenant name")->required();
  app.add_option("-n,--count", count, "round trips");
  app.add_option("--max-payload", max_payload, "largest random payload in bytes");
  app.add_option("--window", window, "requests in flight at once (asynchronous)");
  app.add_option("--digest-every", digest_every, "every Nth request is a 4 KiB tensor digest");
  app.add_option("--hold-ms", hold_ms, "stay attached this long after the last reply");
  app.add_flag("--forever", forever, "keep going until killed or the daemon goes away");
  app.add_option("--wait", mode, "adaptive, spin or block")->check(CLI::IsMember({"adaptive", "spin", "block"}));
  app.add_option("--timeout-ms", timeout_ms, "per-request deadline");
  app.add_option("--seed", seed, "payload RNG seed");
  CLI11_PARSE(app, argc, argv);
  opt.wait = mode == "spin" ? nexus::WaitMode::Spin
             : mode == "block" ? nexus::WaitMode::Block : nexus::WaitMode::Adaptive;
  opt.timeout = std::chrono::milliseconds(timeout_ms);
  opt.client_arena_bytes = 1 << 20;
  opt.output_arena_bytes = 0;

  std::signal(SIGTERM, [](int) { g_stop.store(true); });
  std::uint64_t done = 0, mismatched = 0;
  const auto start = std::chrono::steady_clock::now();
  try {
    auto client = nexus::Client::attach(opt);
    std::mt19937_64 rng(seed);
    nexus::Tensor tensor = client->alloc(nexus::DType::UInt8, {4096});
    struct InFlight {
      std::vector<std::uint8_t> sent;
      std::optional<nexus::Future<std::vector<std::uint8_t>>> ping;
      std::optional<nexus::Future<nexus::DigestResult>> digest;
      std::uint64_t expected_digest = 0;
    };
    std::deque<InFlight> inflight;
    std::uint64_t issued = 0;
    auto issue = [&] {
      InFlight f;
      if (digest_every && issued % digest_every == digest_every - 1) {
        for (auto& b : tensor.raw()) b = static_cast<std::uint8_t>(rng());
        f.expected_digest = nexus::fnv1a(tensor.raw());
        f.digest = client->digest_async(tensor);
      } else {
        f.sent.resize(rng() % (max_payload + 1));
        for (auto& b : f.sent) b = static_cast<std::uint8_t>(rng());
        f.ping = client->ping_async(f.sent);
      }
      inflight.push_back(std::move(f));
      ++issued;
    };
    while (forever ? !(g_stop.load() && inflight.empty()) : done < count) {
      // A digest reads the shared tensor in place: never rewrite it while one is in flight.
      const bool digest_in_flight = !inflight.empty() && inflight.back().digest.has_value();
      while (inflight.size() < window && (forever ? !g_stop.load() : issued < count) &&
             !digest_in_flight) {
        issue();
        if (inflight.back().digest) break;
      }
      if (inflight.empty()) continue;  // stopped between the checks above
      InFlight f = std::move(inflight.front());
      inflight.pop_front();
      if (f.ping) {
        if (f.ping->get() != f.sent) ++mismatched;
      } else if (f.digest->get().fnv1a != f.expected_digest) {
        ++mismatched;
      }
      ++done;
    }
    if (hold_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(hold_ms));
  } catch (const nexus::Error& e) {
    std::fprintf(stderr, "ping_tenant %s: %s\n", opt.tenant.c_str(), e.what());
    std::printf("{\"tenant\":\"%s\",\"round_trips\":%llu,\"mismatched\":%llu,\"error\":\"%s\"}\n",
                opt.tenant.c_str(), static_cast<unsigned long long>(done),
                static_cast<unsigned long long>(mismatched), nexus::error_code_name(e.code()));
    return 2;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("{\"tenant\":\"%s\",\"round_trips\":%llu,\"mismatched\":%llu,\"seconds\":%.3f}\n",
              opt.tenant.c_str(), static_cast<unsigned long long>(done),
              static_cast<unsigned long long>(mismatched), secs);
  return mismatched ? 3 : 0;
}
