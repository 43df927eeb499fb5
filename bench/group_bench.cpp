// nexus-bench group: for tenants x local batch, the throughput of shared backbone passes when the
// daemon groups the tenants' requests vs when it runs them one by one (B = 1), and the same two
// in-process with no IPC as the ceiling, on the daemon's device (--device) at its precision
// (--precision); the backbone's achieved FLOP/s against a GEMM at that precision measured in the
// same run; a batch-1 request's latency (p50, p99) against the pass alone; on a GPU, NVML's
// utilization while the widest cells run; the daemon's RSS with 8 tenants attached against 1;
// with --replicas N, a daemon with N replicas against one. Every cell is repeated (--repeats):
// medians and spreads, so two runs can be compared.
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <barrier>
#include <memory>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <nlohmann/json.hpp>
#include <thread>

#include "gpu_utilization.hpp"
#include "group.hpp"
#include "latency.hpp"
#include "nexus/client.hpp"
#include "processes.hpp"

namespace nexus::bench {
namespace {

using Clock = std::chrono::steady_clock;

struct TenantRig {
  std::unique_ptr<Client> client;
  Tensor images, tokens, mask;
};

TenantRig make_tenant(const std::string& socket, const std::string& name, int batch) {
  TenantRig r;
  r.client = Client::attach({.socket_path = socket, .tenant = name, .client_arena_bytes = 8 << 20,
                             .timeout = std::chrono::seconds(120)});
  const auto bb = r.client->register_tenant({.head = {.kind = "mlp_chunk", .hidden = 32}});
  r.images = r.client->alloc(DType::UInt8, {batch, 1, bb.image_size, bb.image_size, 3});
  r.tokens = r.client->alloc(DType::Int32, {batch, bb.max_tokens});
  r.mask = r.client->alloc(DType::UInt8, {batch, bb.max_tokens});
  for (std::size_t i = 0; i < r.images.bytes(); ++i) r.images.raw()[i] = static_cast<std::uint8_t>(i * 37);
  for (int i = 0; i < batch; ++i) tokenize("pick up the red block", r.tokens, r.mask, i);
  return r;
}

// Samples per second of `tenants` clients each sending `rounds` predicts of `batch` samples, or,
// with `seconds` > 0, as many as they can in that long (then `on_start` runs as they start).
double daemon_throughput(const std::string& socket, const std::string& tag, int tenants, int batch, int rounds,
                         double seconds = 0, const std::function<void()>& on_start = {}) {
  std::vector<TenantRig> rigs;
  for (int i = 0; i < tenants; ++i)
    rigs.push_back(make_tenant(socket, tag + "-" + std::to_string(tenants) + "x" + std::to_string(batch) + "-" +
                                           std::to_string(i), batch));
  for (auto& r : rigs) r.client->predict({&r.images, &r.tokens, &r.mask});  // warm-up
  std::barrier start(tenants + 1);
  std::atomic<std::int64_t> requests{0};
  Clock::time_point deadline;
  std::vector<std::thread> threads;
  for (auto& r : rigs)
    threads.emplace_back([&] {
      start.arrive_and_wait();
      for (int k = 0; seconds > 0 ? Clock::now() < deadline : k < rounds; ++k) {
        r.client->predict({&r.images, &r.tokens, &r.mask});
        ++requests;
      }
    });
  const auto t0 = Clock::now();
  deadline = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  if (on_start) on_start();
  start.arrive_and_wait();
  for (auto& t : threads) t.join();
  return double(requests) * batch / std::chrono::duration<double>(Clock::now() - t0).count();
}

// One tenant's batch-1 predicts, one at a time: each request's round trip (microseconds).
Percentiles daemon_latency(const std::string& socket, int requests) {
  auto rig = make_tenant(socket, "latency", 1);
  for (int i = 0; i < 10; ++i) rig.client->predict({&rig.images, &rig.tokens, &rig.mask});  // warm-up
  std::vector<double> us;
  for (int i = 0; i < requests; ++i) {
    const auto t0 = Clock::now();
    rig.client->predict({&rig.images, &rig.tokens, &rig.mask});
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return percentiles(us);
}

double rss_mib(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stod(line.substr(6)) / 1024.0;
  return 0;
}

}  // namespace

// A cell's figure over its repeats: the median, and the spread as (max - min) / median.
struct Figure {
  double median = 0, spread = 0;
};

Figure summarize(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  const double median = n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  return {median, median > 0 ? (v.back() - v.front()) / median : 0};
}

int run_group(const GroupOptions& options) {
  // Files go where the user says (--out, --csv, --png), never into the working directory.
  GroupOptions o = options;
  o.device = resolve_device(o.device);
  const bool gpu = o.device.rfind("cuda", 0) == 0;
  if (o.rounds == 0) o.rounds = gpu ? 64 : 4;  // a GPU serves a cell's 4 rounds in milliseconds: too few to time
  const bool needs_dir = o.csv.empty() || o.png.empty();  // a file without a path of its own
  if (o.out.empty() && needs_dir) {
    char tmpl[] = "/tmp/nexus-group-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("cannot make a directory under /tmp");
    o.out = tmpl;
  }
  if (!o.out.empty()) std::filesystem::create_directories(o.out);
  if (o.csv.empty()) o.csv = o.out + "/group.csv";
  if (o.png.empty()) o.png = o.out + "/group.png";
  if (o.png == "none") o.png.clear();
  // The GEMM peak is measured again before every repeat of every cell, and the best kept: a
  // peak taken once, before the cells, was sometimes below what the backbone then achieved.
  double peak = peak_gemm_flops(o.device, o.precision);
  const double flops_per_sample = backbone_flops_per_sample(o.backbone);
  std::fprintf(stderr, "[group] %s backbone on %s at %s: %.2f GFLOP per sample; %d rounds, %d repeats per cell\n",
               o.backbone.c_str(), o.device.c_str(), o.precision.c_str(), flops_per_sample / 1e9, o.rounds, o.repeats);
  std::unique_ptr<GpuUtilization> utilization;
  if (gpu && o.utilization_s > 0) {
    utilization = std::make_unique<GpuUtilization>(static_cast<unsigned>(std::stoi(o.device.substr(5))));
    if (!utilization->available()) std::fprintf(stderr, "[group] no utilization figures: %s\n", utilization->why().c_str());
  }

  // Every daemon on the bench's device, at its precision: the in-process ceiling runs there too.
  auto daemon_args = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = {"--backbone", o.backbone, "--log-level", "warn", "--precision", o.precision, "--devices", o.device};
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  test::Daemon grouped(daemon_args({}), o.nexusd);
  test::Daemon serial(daemon_args({"--batch-samples", "1"}), o.nexusd);
  std::unique_ptr<test::Daemon> replicated;
  if (o.replicas > 1) {
    std::vector<std::string> args = daemon_args({});
    for (int i = 1; i < o.replicas; ++i) args.push_back(o.device);
    replicated = std::make_unique<test::Daemon>(args, o.nexusd);
  }

  // Memory: one backbone copy however many tenants attach.
  double rss1 = 0, rss8 = 0;
  {
    std::vector<TenantRig> rigs;
    for (int i = 0; i < 8; ++i) {
      rigs.push_back(make_tenant(grouped.socket(), "rss-" + std::to_string(i), 1));
      rigs.back().client->predict({&rigs.back().images, &rigs.back().tokens, &rigs.back().mask});
      if (i == 0) rss1 = rss_mib(grouped.pid());
    }
    rss8 = rss_mib(grouped.pid());
  }
  std::fprintf(stderr, "[group] daemon RSS: %.0f MiB with 1 tenant, %.0f MiB with 8\n", rss1, rss8);

  // What one tenant waits for a batch-1 request, against the pass alone.
  const auto latency = daemon_latency(grouped.socket(), o.latency_requests);
  const double pass_p50_us = inprocess_batch1_p50_us(o, std::max(10, o.latency_requests / 4));
  std::printf("batch-1 request through nexusd: p50 %.3f ms, p99 %.3f ms (%zu requests); the pass alone in-process: "
              "p50 %.3f ms\n", latency.p50_us / 1e3, latency.p99_us / 1e3, latency.samples, pass_p50_us / 1e3);

  nlohmann::json cells = nlohmann::json::array();
  std::ofstream csv(o.csv);
  csv << "tenants,batch,daemon_grouped_sps,daemon_serial_sps,speedup_daemon,inprocess_grouped_sps,"
         "inprocess_serial_sps,speedup_inprocess,speedup_daemon_spread,speedup_inprocess_spread,replica_speedup\n";
  // efficiency: the grouped daemon's samples/s as a share of the same pass in-process on the same
  // device, repeat by repeat (both measured back to back). Speedups: medians over the repeats of
  // each repeat's ratio; +-: the spread of those ratios. replicas: the replicated daemon's grouped
  // throughput against the one-replica daemon's, in the same repeat. sm%: NVML's utilization,
  // median of its readings while the cell ran again for --utilization-seconds.
  const bool read_utilization = utilization && utilization->available();
  std::printf("%7s %5s | %12s %12s %13s | %12s %12s %13s | %10s%s%s\n", "tenants", "batch", "daemon grp/s", "daemon ser/s",
              "speedup", "inproc grp/s", "inproc ser/s", "speedup", "efficiency", o.replicas > 1 ? " | replicas" : "",
              read_utilization ? " |   sm%" : "");
  const int widest = *std::max_element(o.tenants.begin(), o.tenants.end());
  Figure daemon_8x1, inproc_8x1, replica_8x1, efficiency_best;
  double best_sps = 0, best_daemon_sps = 0, serial_8x1 = 0;
  nlohmann::json best_cell;
  for (int t : o.tenants)
    for (int b : o.batches) {
      std::fprintf(stderr, "[group] %d tenants x batch %d ...\n", t, b);
      std::vector<double> dg, ds, ig, is, sd, si, sr, ef;
      for (int rep = 0; rep < o.repeats; ++rep) {
        peak = std::max(peak, peak_gemm_flops(o.device, o.precision));
        const std::string tag = "r" + std::to_string(rep);
        dg.push_back(daemon_throughput(grouped.socket(), "g" + tag, t, b, o.rounds));
        ds.push_back(daemon_throughput(serial.socket(), "s" + tag, t, b, o.rounds));
        const auto ip = inprocess_throughput(o, t, b);
        ig.push_back(ip.grouped_sps), is.push_back(ip.serial_sps);
        sd.push_back(dg.back() / ds.back()), si.push_back(ip.grouped_sps / ip.serial_sps);
        ef.push_back(dg.back() / ip.grouped_sps);
        if (replicated) sr.push_back(daemon_throughput(replicated->socket(), "m" + tag, t, b, o.rounds) / dg.back());
      }
      const auto fdg = summarize(dg), fds = summarize(ds), fig = summarize(ig), fis = summarize(is);
      const auto fsd = summarize(sd), fsi = summarize(si), fef = summarize(ef), fsr = replicated ? summarize(sr) : Figure{};
      UtilizationFigure sm;
      if (read_utilization && t == widest)
        daemon_throughput(grouped.socket(), "u", t, b, 0, o.utilization_s, [&] { utilization->start(); }),
            sm = utilization->stop();
      best_sps = std::max(best_sps, fig.median);
      if (t == 8 && b == 1) daemon_8x1 = fsd, inproc_8x1 = fsi, replica_8x1 = fsr, serial_8x1 = fds.median;
      std::printf("%7d %5d | %12.1f %12.1f %6.2fx+-%3.0f%% | %12.1f %12.1f %6.2fx+-%3.0f%% | %9.0f%%", t, b, fdg.median,
                  fds.median, fsd.median, 100 * fsd.spread, fig.median, fis.median, fsi.median, 100 * fsi.spread,
                  100 * fef.median);
      if (replicated) std::printf(" | %6.2fx+-%3.0f%%", fsr.median, 100 * fsr.spread);
      if (read_utilization) sm.samples ? std::printf(" | %5.0f", sm.median) : std::printf(" |     -");
      std::printf("\n");
      csv << t << "," << b << "," << fdg.median << "," << fds.median << "," << fsd.median << "," << fig.median << ","
          << fis.median << "," << fsi.median << "," << fsd.spread << "," << fsi.spread << "," << fsr.median << "\n";
      nlohmann::json cell = {{"tenants", t}, {"batch", b}, {"speedup_daemon", fsd.median},
                             {"speedup_daemon_spread", fsd.spread}, {"speedup_inprocess", fsi.median},
                             {"speedup_inprocess_spread", fsi.spread}, {"daemon_grouped_sps", fdg.median},
                             {"daemon_grouped_sps_spread", fdg.spread}, {"inprocess_grouped_sps", fig.median},
                             {"daemon_share_of_inprocess_sps", fef.median}};
      if (replicated) cell["replica_speedup"] = fsr.median, cell["replica_speedup_spread"] = fsr.spread;
      if (sm.samples) cell["sm_utilization_median"] = sm.median, cell["sm_utilization_max"] = sm.max;
      if (fdg.median > best_daemon_sps) best_daemon_sps = fdg.median, best_cell = cell, efficiency_best = fef;
      cells.push_back(cell);
    }
  csv.close();

  // What deterministic mode costs: it gives every request its own backbone pass.
  double speedup_deterministic_8x1 = 0;
  if (serial_8x1 > 0) {
    std::fprintf(stderr, "[group] deterministic mode, 8 tenants x batch 1 ...\n");
    test::Daemon deterministic(daemon_args({"--deterministic"}), o.nexusd);
    speedup_deterministic_8x1 = daemon_throughput(deterministic.socket(), "d", 8, 1, o.rounds) / serial_8x1;
    std::printf("deterministic mode at 8x1: %.2fx the serial daemon (grouped: %.2fx)\n", speedup_deterministic_8x1,
                daemon_8x1.median);
  }
  const double flops_fraction = best_sps * flops_per_sample / peak;
  std::printf("backbone achieved %.1f GFLOP/s at best (in-process, grouped, median of its repeats) = %.1f%% of the "
              "%s GEMM peak on %s (%.1f GFLOP/s, best of every measurement)\n",
              best_sps * flops_per_sample / 1e9, 100 * flops_fraction, o.precision.c_str(), o.device.c_str(), peak / 1e9);
  std::printf("the daemon's best cell: %d x %d at %.1f samples/s = %.0f%% (+-%.0f%%) of the same pass in-process\n",
              best_cell.value("tenants", 0), best_cell.value("batch", 0), best_daemon_sps, 100 * efficiency_best.median,
              100 * efficiency_best.spread);
  std::printf("daemon RSS with 8 tenants / with 1: %.3f\n", rss8 / rss1);
  std::printf("wrote %s", o.csv.c_str());
  if (!o.python.empty() && !o.png.empty()) {
    const std::string cmd = o.python + " " + o.plot_script + " " + o.csv + " " + o.png;
    if (std::system(cmd.c_str()) == 0) std::printf(" and %s", o.png.c_str());
  }
  std::printf("\n");
  if (o.json) {
    nlohmann::json j = {{"backbone", o.backbone},
                        {"device", o.device},
                        {"precision", o.precision},
                        {"rounds", o.rounds},
                        {"repeats", o.repeats},
                        {"latency_batch1_p50_ms", latency.p50_us / 1e3},
                        {"latency_batch1_p99_ms", latency.p99_us / 1e3},
                        {"inprocess_batch1_p50_ms", pass_p50_us / 1e3},
                        {"best_daemon_sps", best_daemon_sps},
                        {"best_cell", best_cell},
                        {"daemon_share_of_inprocess_sps_best", efficiency_best.median},
                        {"speedup_daemon", daemon_8x1.median},
                        {"speedup_daemon_spread", daemon_8x1.spread},
                        {"speedup_inprocess", inproc_8x1.median},
                        {"speedup_inprocess_spread", inproc_8x1.spread},
                        {"daemon_share_of_inprocess_speedup", daemon_8x1.median / inproc_8x1.median},
                        {"peak_gemm_gflops", peak / 1e9},
                        {"flops_fraction_of_peak", flops_fraction},
                        {"rss_ratio_8_vs_1", rss8 / rss1},
                        {"speedup_deterministic", speedup_deterministic_8x1},
                        {"cells", cells}};
    if (utilization && !utilization->available()) j["utilization_unavailable"] = utilization->why();
    if (replicated) j["replicas"] = o.replicas, j["replica_speedup"] = replica_8x1.median,
                    j["replica_speedup_spread"] = replica_8x1.spread;
    std::printf("%s\n", j.dump().c_str());
  }
  return 0;
}

}  // namespace nexus::bench
