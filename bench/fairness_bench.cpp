// nexus-bench fairness (workload.hpp): weighted fair share under contention, and inference
// latency idle vs. behind saturated training, in one run on one daemon.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "latency.hpp"
#include "nexus/client.hpp"
#include "nexus/status.hpp"
#include "processes.hpp"
#include "workload.hpp"

namespace nexus::bench {
namespace {

using Clock = std::chrono::steady_clock;

pid_t trainer(const FairnessOptions& o, const test::Daemon& d, const std::string& dir, const std::string& name) {
  return test::spawn({o.sft_tenant, "--socket", d.socket(), "--tenant", name, "--steps", "100000000", "--batch", "32",
                      "--pipeline", "4", "--report-every", "0"},
                     {.stdout_path = dir + "/" + name + ".out", .stderr_path = dir + "/" + name + ".err"});
}

std::map<std::string, double> compute(const test::Daemon& d) {
  std::map<std::string, double> out;
  for (const auto& u : query_status(d.socket()).usage) out[u.name] = u.compute_s();
  return out;
}

// Closed-loop predicts of one sample for `seconds`: each one's latency in microseconds.
std::vector<double> predict_latencies(Client& c, const BackboneInfo& bb, double seconds) {
  auto images = c.alloc(DType::UInt8, {1, 1, bb.image_size, bb.image_size, 3});
  auto tokens = c.alloc(DType::Int32, {1, bb.max_tokens});
  auto mask = c.alloc(DType::UInt8, {1, bb.max_tokens});
  tokenize("reach the red ball", tokens, mask, 0);
  std::vector<double> us;
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    const auto t0 = Clock::now();
    c.predict({&images, &tokens, &mask, nullptr});
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
  }
  return us;
}

void stop(std::vector<pid_t>& pids) {
  for (auto p : pids) ::kill(p, SIGKILL);
  for (auto p : pids) test::wait_exit(p, std::chrono::seconds(5));
  pids.clear();
}

}  // namespace

int run_fairness(const FairnessOptions& o) {
  test::TempDir dir;
  std::ofstream(dir.path + "/nexusd.toml") << "[tenants.light]\nweight = 1\n[tenants.heavy]\nweight = 2\n";
  test::Daemon daemon({"--log-level", "warn", "-c", dir.path + "/nexusd.toml"}, o.nexusd);
  nlohmann::json j;

  std::fprintf(stderr, "[fairness] weights 1:2, both tenants keeping the Training Queue busy, %.0f s ...\n", o.seconds);
  std::vector<pid_t> pids = {trainer(o, daemon, dir.path, "light"), trainer(o, daemon, dir.path, "heavy")};
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const auto c0 = compute(daemon);
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));
  const auto c1 = compute(daemon);
  stop(pids);
  const double light = c1.at("light") - c0.at("light"), heavy = c1.at("heavy") - c0.at("heavy");
  j["weighted_ratio"] = heavy / light;
  j["weighted_ratio_error"] = std::abs(heavy / light / 2 - 1);
  std::printf("weights 1:2: compute-seconds %.2f : %.2f, ratio %.3f (error %.1f%%)\n", light, heavy, heavy / light,
              100 * j["weighted_ratio_error"].get<double>());

  auto c = Client::attach({.socket_path = daemon.socket(), .tenant = "inference", .timeout = std::chrono::seconds(60)});
  const auto bb = c->register_tenant({.head = {.kind = "mlp_chunk", .action_dim = 2, .chunk = 4}});
  std::fprintf(stderr, "[fairness] predict latency, nothing else running ...\n");
  predict_latencies(*c, bb, 1.0);  // warm-up
  const auto idle = percentiles(predict_latencies(*c, bb, o.seconds / 3));
  std::fprintf(stderr, "[fairness] predict latency while three tenants saturate training ...\n");
  pids = {trainer(o, daemon, dir.path, "t1"), trainer(o, daemon, dir.path, "t2"), trainer(o, daemon, dir.path, "t3")};
  std::this_thread::sleep_for(std::chrono::seconds(3));
  const auto loaded = percentiles(predict_latencies(*c, bb, o.seconds));
  const double turn_us = query_status(daemon.socket()).longest_training_turn_s * 1e6;
  stop(pids);
  j["idle_p50_ms"] = idle.p50_us / 1000, j["idle_p99_ms"] = idle.p99_us / 1000;
  j["loaded_p50_ms"] = loaded.p50_us / 1000, j["loaded_p99_ms"] = loaded.p99_us / 1000;
  j["longest_training_turn_ms"] = turn_us / 1000;
  j["bound_ms"] = (idle.p99_us + turn_us) / 1000;
  j["within_bound"] = loaded.p99_us <= idle.p99_us + turn_us;
  std::printf("predict p50/p99: idle %.2f/%.2f ms, under training %.2f/%.2f ms; longest training turn %.2f ms;\n"
              "bound (idle p99 + longest turn) %.2f ms: %s\n",
              idle.p50_us / 1000, idle.p99_us / 1000, loaded.p50_us / 1000, loaded.p99_us / 1000, turn_us / 1000,
              (idle.p99_us + turn_us) / 1000, j["within_bound"].get<bool>() ? "held" : "exceeded");
  if (o.json) std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace nexus::bench
