// nexus-bench fairness (workload.hpp), in one run: weighted fair share under contention, and
// inference latency idle vs. behind saturated training, on one daemon; then, on another, a
// small-batch tenant beside a big one (equal weights, batch 4 vs 128, each a closed loop: one
// step in flight), each alone and then together: the share of its own alone rate each keeps.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
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

pid_t trainer(const FairnessOptions& o, const test::Daemon& d, const std::string& dir, const std::string& name,
              int batch = 32, int pipeline = 4) {
  return test::spawn({o.sft_tenant, "--socket", d.socket(), "--tenant", name, "--steps", "100000000", "--batch",
                      std::to_string(batch), "--pipeline", std::to_string(pipeline), "--report-every", "0"},
                     {.stdout_path = dir + "/" + name + ".out", .stderr_path = dir + "/" + name + ".err"});
}

double samples(const test::Daemon& d, const std::string& name) {
  for (const auto& u : query_status(d.socket()).usage)
    if (u.name == name) return static_cast<double>(u.samples);
  return 0;
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

// Samples per second of each named closed-loop trainer (name -> batch) over `seconds`, all at
// once, after a warm-up; and, into `charged`, the compute-seconds per second nexusd charged each
// (what its fair share weighs: with several training lanes, a turn's wall time on its lane).
std::map<std::string, double> rates(const FairnessOptions& o, const test::Daemon& d, const std::string& dir,
                                    const std::map<std::string, int>& trainers, double seconds,
                                    std::map<std::string, double>* charged = nullptr) {
  std::vector<pid_t> pids;
  for (const auto& [name, batch] : trainers) pids.push_back(trainer(o, d, dir, name, batch, 1));
  std::this_thread::sleep_for(std::chrono::seconds(3));
  std::map<std::string, double> s0, out;
  for (const auto& [name, batch] : trainers) s0[name] = samples(d, name);
  auto c0 = charged ? compute(d) : std::map<std::string, double>{};
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  for (const auto& [name, batch] : trainers) out[name] = (samples(d, name) - s0[name]) / seconds;
  if (charged) {
    auto c1 = compute(d);
    for (const auto& [name, batch] : trainers) (*charged)[name] = (c1[name] - c0[name]) / seconds;
  }
  stop(pids);
  return out;
}

// Batch 128 and batch 4, closed loops: what each keeps of its own alone rate, with equal
// weights, with the small tenant weighted 2 and with the big one weighted 2; then the same
// equal-weight pair on a daemon whose steps stay whole ([model] max_training_turn_ms = 0, as
// before turns existed), side by side.
void small_beside_big(const FairnessOptions& o, nlohmann::json& j) {
  test::TempDir dir;
  {
    std::ofstream turns(dir.path + "/turns.toml");
    turns << "[model]\n";
    if (o.turn_ms >= 0) turns << "max_training_turn_ms = " << o.turn_ms << "\n";
    if (o.training_lanes >= 0) turns << "training_lanes = " << o.training_lanes << "\n";
    turns << "[tenants.small-heavy]\nweight = 2\n[tenants.big-heavy]\nweight = 2\n";
  }
  // The baseline: one training lane whose steps stay whole, whatever the others have.
  std::ofstream(dir.path + "/whole.toml") << "[model]\nmax_training_turn_ms = 0\ntraining_lanes = 1\n";
  auto phase = [&](const char* what, double seconds) {
    std::fprintf(stderr, "[fairness] %s, %.0f s ...\n", what, seconds);
  };
  double big_alone = 0, small_alone = 0;
  std::map<std::string, double> equal, weighted, big_weighted, equal_c, weighted_c, big_weighted_c;
  double turn_ms = 0;
  {
    test::Daemon daemon({"--log-level", "warn", "-c", dir.path + "/turns.toml"}, o.nexusd);
    phase("batch 128 alone", o.seconds);
    big_alone = rates(o, daemon, dir.path, {{"big-alone", 128}}, o.seconds).at("big-alone");
    phase("batch 4 alone", o.seconds);
    small_alone = rates(o, daemon, dir.path, {{"small-alone", 4}}, o.seconds).at("small-alone");
    phase("both at once, equal weights", o.shared_seconds);
    equal = rates(o, daemon, dir.path, {{"big", 128}, {"small", 4}}, o.shared_seconds, &equal_c);
    turn_ms = query_status(daemon.socket()).longest_shared_training_turn_s * 1000;
    phase("both at once, the small tenant weighted 2", o.shared_seconds);
    weighted = rates(o, daemon, dir.path, {{"big-light", 128}, {"small-heavy", 4}}, o.shared_seconds, &weighted_c);
    phase("both at once, the big tenant weighted 2", o.shared_seconds);
    big_weighted = rates(o, daemon, dir.path, {{"big-heavy", 128}, {"small-light", 4}}, o.shared_seconds, &big_weighted_c);
  }
  double whole_big_alone = 0;
  std::map<std::string, double> whole;
  {
    test::Daemon daemon({"--log-level", "warn", "-c", dir.path + "/whole.toml"}, o.nexusd);
    phase("steps kept whole: batch 128 alone", o.seconds);
    whole_big_alone = rates(o, daemon, dir.path, {{"big-alone", 128}}, o.seconds).at("big-alone");
    phase("steps kept whole: both at once, equal weights", o.shared_seconds);
    whole = rates(o, daemon, dir.path, {{"big", 128}, {"small", 4}}, o.shared_seconds);
  }
  const double big_share = equal.at("big") / big_alone, small_share = equal.at("small") / small_alone;
  const double light_share = weighted.at("big-light") / big_alone, heavy_share = weighted.at("small-heavy") / small_alone;
  const double heavy_big_share = big_weighted.at("big-heavy") / big_alone,
               light_small_share = big_weighted.at("small-light") / small_alone;
  const double total = equal.at("big") + equal.at("small"), whole_total = whole.at("big") + whole.at("small");
  j["turns_big_alone_sps"] = big_alone, j["turns_small_alone_sps"] = small_alone;
  j["turns_big_shared_sps"] = equal.at("big"), j["turns_small_shared_sps"] = equal.at("small");
  j["turns_big_share"] = big_share, j["turns_small_share"] = small_share;
  // A closed loop has one step in flight: its mean step latency is its batch over its rate.
  j["turns_small_step_ms_alone"] = 4000 / small_alone, j["turns_small_step_ms_shared"] = 4000 / equal.at("small");
  j["turns_weighted_big_share"] = light_share, j["turns_weighted_small_share"] = heavy_share;
  j["turns_weighted_small_fraction"] = heavy_share / (heavy_share + light_share);  // weights say 2/3
  j["turns_big_weighted_big_share"] = heavy_big_share, j["turns_big_weighted_small_share"] = light_small_share;
  j["turns_big_weighted_big_fraction"] = heavy_big_share / (heavy_big_share + light_small_share);  // 2/3
  // Compute-seconds nexusd charged per second (its fair share's measure), and their ratios: the
  // weights say 1, 2 and 2.
  j["turns_big_charged_s_per_s"] = equal_c.at("big"), j["turns_small_charged_s_per_s"] = equal_c.at("small");
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  j["turns_equal_charged_ratio"] = ratio(equal_c.at("big"), equal_c.at("small"));
  j["turns_weighted_charged_ratio"] = ratio(weighted_c.at("small-heavy"), weighted_c.at("big-light"));
  j["turns_big_weighted_charged_ratio"] = ratio(big_weighted_c.at("big-heavy"), big_weighted_c.at("small-light"));
  j["turns_total_shared_sps"] = total;
  j["turns_longest_turn_ms"] = turn_ms;
  j["training_lanes"] = o.training_lanes;  // < 0: nexusd's default
  j["whole_big_alone_sps"] = whole_big_alone;
  j["whole_big_share"] = whole.at("big") / whole_big_alone, j["whole_small_share"] = whole.at("small") / small_alone;
  j["whole_total_shared_sps"] = whole_total;
  j["turns_total_vs_whole"] = total / whole_total;
  std::printf("batch 128 vs batch 4, closed loops, alone: %.0f and %.0f samples/s (batch 128 with steps kept whole: %.0f)\n"
              "equal weights: %.0f and %.0f samples/s (%.0f in all); share of its own alone rate: big %.2f, small %.2f;\n"
              "  the small tenant's mean step %.1f ms alone, %.1f ms beside the big one; longest shared training turn %.1f ms\n"
              "small weighted 2: shares big %.2f, small %.2f (small's fraction %.2f; weights say 0.67)\n"
              "big weighted 2: shares big %.2f, small %.2f (big's fraction %.2f; weights say 0.67)\n"
              "steps kept whole (turns off): shares big %.2f, small %.2f, %.0f samples/s in all; with turns %.2fx that\n",
              big_alone, small_alone, whole_big_alone, equal.at("big"), equal.at("small"), total, big_share, small_share,
              4000 / small_alone, 4000 / equal.at("small"), turn_ms, light_share, heavy_share,
              heavy_share / (heavy_share + light_share), heavy_big_share, light_small_share,
              heavy_big_share / (heavy_big_share + light_small_share), whole.at("big") / whole_big_alone,
              whole.at("small") / small_alone, whole_total, total / whole_total);
  std::printf("compute-seconds nexusd charged per second (what its fair share weighs): equal weights big %.2f, small %.2f "
              "(ratio %.2f; weights say 1); small weighted 2: ratio %.2f; big weighted 2: ratio %.2f (weights say 2)\n",
              equal_c.at("big"), equal_c.at("small"), j["turns_equal_charged_ratio"].get<double>(),
              j["turns_weighted_charged_ratio"].get<double>(), j["turns_big_weighted_charged_ratio"].get<double>());
}

}  // namespace

int run_fairness(const FairnessOptions& o) {
  test::TempDir dir;
  {
    std::ofstream config(dir.path + "/nexusd.toml");
    if (o.training_lanes >= 0) config << "[model]\ntraining_lanes = " << o.training_lanes << "\n";
    config << "[tenants.light]\nweight = 1\n[tenants.heavy]\nweight = 2\n";
  }
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
  small_beside_big(o, j);
  if (o.json) std::printf("%s\n", j.dump().c_str());
  return 0;
}

}  // namespace nexus::bench
