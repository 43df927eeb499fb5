// nexus-bench ipc: round-trip latency of a small message through nexusd's shm rings, with
// spinning and with blocking waits, against a Unix-domain-socket ping-pong between two
// processes measured in the same run; and the bytes the daemon copies per 1 MiB tensor input.
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "latency.hpp"
#include "nexus/client.hpp"
#include "processes.hpp"

namespace nexus::bench {

struct IpcOptions {
  int round_trips = 100000;
  int block_round_trips = 20000;
  bool json = false;
  std::string nexusd;
};

namespace {

using Clock = std::chrono::steady_clock;
constexpr std::size_t kPayload = 16;

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

Percentiles shm_round_trips(const std::string& socket, WaitMode mode, int n, const char* tenant) {
  ClientOptions o;
  o.socket_path = socket;
  o.tenant = tenant;
  o.wait = mode;
  o.client_arena_bytes = 1 << 20;
  o.output_arena_bytes = 0;
  auto client = Client::attach(o);
  std::vector<std::uint8_t> payload(kPayload, 0x5a);
  for (int i = 0; i < n / 10 + 100; ++i) client->ping(payload);  // warm caches and the daemon
  std::vector<double> samples;
  samples.reserve(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    const auto t0 = Clock::now();
    auto f = client->ping_async(payload);
    f.get();
    samples.push_back(us_since(t0));
  }
  return percentiles(std::move(samples));
}

// Two processes, blocking read/write of a message as large as a ping request on the wire.
Percentiles uds_round_trips(int n, std::size_t message_bytes) {
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0) return {};
  const pid_t child = ::fork();
  std::vector<std::uint8_t> buf(message_bytes, 0x5a);
  auto read_all = [&](int fd) {
    std::size_t got = 0;
    while (got < buf.size()) {
      const ssize_t r = ::read(fd, buf.data() + got, buf.size() - got);
      if (r <= 0) return false;
      got += static_cast<std::size_t>(r);
    }
    return true;
  };
  if (child == 0) {
    ::close(sv[0]);
    while (read_all(sv[1]))
      if (::write(sv[1], buf.data(), buf.size()) != static_cast<ssize_t>(buf.size())) break;
    ::_exit(0);
  }
  ::close(sv[1]);
  std::vector<double> samples;
  const int warm = n / 10 + 100;
  for (int i = 0; i < n + warm; ++i) {
    const auto t0 = Clock::now();
    if (::write(sv[0], buf.data(), buf.size()) != static_cast<ssize_t>(buf.size()) || !read_all(sv[0])) break;
    if (i >= warm) samples.push_back(us_since(t0));
  }
  ::close(sv[0]);
  ::waitpid(child, nullptr, 0);
  return percentiles(std::move(samples));
}

struct CopyFigures {
  double daemon_copy_bytes_per_mib = 0;   // everything the daemon copied out of the segment
  double daemon_tensor_bytes_per_mib = 0; // of that, tensor data
  double client_write_bytes_per_mib = 0;  // the client's writes of the tensor itself
  bool digests_match = false;
};

CopyFigures copy_figures(const std::string& socket) {
  ClientOptions o;
  o.socket_path = socket;
  o.tenant = "bench-copy";
  o.client_arena_bytes = 4 << 20;
  auto client = Client::attach(o);
  Tensor t = client->alloc(DType::UInt8, {1 << 20});
  std::uint64_t written = 0;
  auto raw = t.raw();
  for (std::size_t i = 0; i < raw.size(); ++i) raw[i] = static_cast<std::uint8_t>(i * 131 + 7);
  written += raw.size();  // written once, in place: no staging buffer exists to copy from
  const std::uint64_t expected = fnv1a(raw);
  constexpr int kRequests = 32;
  const auto before = query_status(socket);
  bool match = true;
  for (int i = 0; i < kRequests; ++i) match = match && client->digest(t).fnv1a == expected;
  const auto after = query_status(socket);
  CopyFigures f;
  f.daemon_tensor_bytes_per_mib = double(after.tensor_bytes_copied - before.tensor_bytes_copied) / kRequests;
  f.daemon_copy_bytes_per_mib = double(after.message_bytes_copied - before.message_bytes_copied) / kRequests +
                                f.daemon_tensor_bytes_per_mib;
  f.client_write_bytes_per_mib = double(written) / kRequests;
  f.digests_match = match;
  return f;
}

}  // namespace

int run_ipc(const IpcOptions& opt) {
  std::fprintf(stderr, "[ipc] spin: %d round trips through nexusd (both sides busy-poll)\n", opt.round_trips);
  Percentiles spin;
  CopyFigures copies;
  {
    test::Daemon d({"--spin-us", "2000000", "--log-level", "warn"}, opt.nexusd);
    spin = shm_round_trips(d.socket(), WaitMode::Spin, opt.round_trips, "bench-spin");
    std::fprintf(stderr, "[ipc] copies: 32 digests of a 1 MiB tensor written in place\n");
    copies = copy_figures(d.socket());
  }
  std::fprintf(stderr, "[ipc] block: %d round trips (both sides sleep on eventfds)\n", opt.block_round_trips);
  Percentiles block;
  {
    test::Daemon d({"--spin-us", "0", "--log-level", "warn"}, opt.nexusd);
    block = shm_round_trips(d.socket(), WaitMode::Block, opt.block_round_trips, "bench-block");
  }
  // The same bytes a ping request occupies in the ring (FlatBuffers message + length prefix).
  const std::size_t wire_bytes = 4 + 64;
  std::fprintf(stderr, "[ipc] uds: %d round trips over a Unix socket pair (blocking)\n", opt.block_round_trips);
  const Percentiles uds = uds_round_trips(opt.block_round_trips, wire_bytes);

  std::printf("%-26s %10s %10s %10s %9s\n", "round trip (16 B payload)", "p50 us", "p99 us", "mean us", "samples");
  auto row = [](const char* name, const Percentiles& p) {
    std::printf("%-26s %10.2f %10.2f %10.2f %9zu\n", name, p.p50_us, p.p99_us, p.mean_us, p.samples);
  };
  row("shm rings, spinning", spin);
  row("shm rings, blocking", block);
  row("unix socket, blocking", uds);
  std::printf("spin p50 / uds p50   = %.3f\n", spin.p50_us / uds.p50_us);
  std::printf("block p50 / uds p50  = %.3f\n", block.p50_us / uds.p50_us);
  std::printf("1 MiB tensor input: client writes %.0f B in place once; daemon copies %.1f B per request "
              "(%.1f B of tensor data; the rest is the request message); digests %s\n",
              copies.client_write_bytes_per_mib * 32, copies.daemon_copy_bytes_per_mib,
              copies.daemon_tensor_bytes_per_mib, copies.digests_match ? "match" : "DIFFER");
  if (opt.json) {
    nlohmann::json j = {
        {"spin_p50_us", spin.p50_us}, {"spin_p99_us", spin.p99_us},
        {"block_p50_us", block.p50_us}, {"block_p99_us", block.p99_us},
        {"uds_p50_us", uds.p50_us}, {"uds_p99_us", uds.p99_us},
        {"spin_over_uds_p50", spin.p50_us / uds.p50_us}, {"block_over_uds_p50", block.p50_us / uds.p50_us},
        {"daemon_copy_bytes_per_mib", copies.daemon_copy_bytes_per_mib},
        {"daemon_tensor_copy_bytes_per_mib", copies.daemon_tensor_bytes_per_mib},
        {"digests_match", copies.digests_match}};
    std::printf("%s\n", j.dump().c_str());
  }
  return copies.digests_match ? 0 : 1;
}

}  // namespace nexus::bench
