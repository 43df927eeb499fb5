// nexus-bench workload's second scenario (workload.hpp): two SFT tenants fine-tuning on one
// dataset for several epochs, on one daemon each time: the frozen-feature cache off, on (per
// tenant, the default), shared between tenants, and bounded below the dataset's features. Per
// run: each epoch's wall time (the two tenants step concurrently; an epoch is as many steps as
// the dataset has samples over the batch, sampled with replacement as dataset_sft_step does),
// how many samples went through the backbone, the cache's hits and bytes.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>

#include <nlohmann/json.hpp>

#include "nexus/client.hpp"
#include "nexus/status.hpp"
#include "metrics_text.hpp"
#include "processes.hpp"
#include "workload.hpp"

namespace nexus::bench {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kBatch = 32, kChunk = 4;

struct CacheCounters {
  double hits = 0, misses = 0, bytes = 0, bound = 0;
};

CacheCounters cache_counters(const std::string& socket) {
  const auto text = query_metrics(socket);
  return {test::metric_sample(text, "nexus_feature_cache_lookups_total{result=\"hit\"}"),
          test::metric_sample(text, "nexus_feature_cache_lookups_total{result=\"miss\"}"),
          test::metric_sample(text, "nexus_feature_cache_bytes{tier=\"memory\"}"),
          test::metric_sample(text, "nexus_feature_cache_bytes{tier=\"bound\"}")};
}

struct CacheRun {
  std::string label;
  std::vector<double> epoch_s;         // the slower tenant's time for each epoch
  std::vector<double> epoch_hit_rate;  // the cache's hits over lookups in each epoch
  std::uint64_t samples = 0, backbone_samples = 0, drawn = 0;  // samples: the dataset's
  CacheCounters cache;
  double peak_bytes = 0;
  std::vector<double> final_loss;
};

CacheRun run_cache_case(const WorkloadOptions& o, const std::string& dataset, const std::string& dir,
                        const std::string& label, std::vector<std::string> flags, int epochs) {
  CacheRun run{label};
  flags.insert(flags.end(), {"--log-level", "warn", "--state-dir", dir + "/state-" + label});
  test::Daemon daemon(flags, o.nexusd);
  std::vector<std::unique_ptr<Client>> tenants;
  std::uint64_t samples = 0;
  for (const char* name : {"fay", "gus"}) {
    auto c = Client::attach({.socket_path = daemon.socket(), .tenant = name, .timeout = std::chrono::seconds(300)});
    TenantSpec spec;
    spec.head = {.kind = "mlp_chunk", .state_dim = 4, .action_dim = 2, .chunk = kChunk};
    spec.seed = 7;
    c->register_tenant(spec);
    samples = c->dataset_load("demos", dataset, name[0] == 'f' ? 1 : 2).samples;
    tenants.push_back(std::move(c));
  }
  run.samples = samples;
  const int steps = static_cast<int>((samples + kBatch - 1) / kBatch);
  run.final_loss.assign(tenants.size(), 0);
  for (int e = 0; e < epochs; ++e) {
    const auto before = cache_counters(daemon.socket());
    std::vector<std::future<double>> done;
    for (std::size_t t = 0; t < tenants.size(); ++t)
      done.push_back(std::async(std::launch::async, [&, t] {
        const auto t0 = Clock::now();
        for (int s = 0; s < steps; ++s) run.final_loss[t] = tenants[t]->dataset_sft_step("demos", kBatch, kChunk).loss;
        return std::chrono::duration<double>(Clock::now() - t0).count();
      }));
    double slowest = 0;
    for (auto& f : done) slowest = std::max(slowest, f.get());
    run.epoch_s.push_back(slowest);
    const auto after = cache_counters(daemon.socket());
    run.peak_bytes = std::max(run.peak_bytes, after.bytes);
    const double lookups = after.hits + after.misses - before.hits - before.misses;
    run.epoch_hit_rate.push_back(lookups > 0 ? (after.hits - before.hits) / lookups : 0.0);
    std::fprintf(stderr, "[workload] sft-cache %-8s epoch %d/%d: %.2f s, hit rate %.2f\n", label.c_str(), e + 1, epochs,
                 slowest, run.epoch_hit_rate.back());
  }
  run.drawn = static_cast<std::uint64_t>(steps) * kBatch * tenants.size() * static_cast<std::uint64_t>(epochs);
  run.backbone_samples = query_status(daemon.socket()).model_samples;
  run.cache = cache_counters(daemon.socket());
  return run;
}

double mean_after_first(const std::vector<double>& v) {
  if (v.size() < 2) return v.empty() ? 0 : v[0];
  double s = 0;
  for (std::size_t i = 1; i < v.size(); ++i) s += v[i];
  return s / static_cast<double>(v.size() - 1);
}

}  // namespace

nlohmann::json run_sft_cache(const WorkloadOptions& o, const std::string& dir) {
  const int episodes = std::max(10, static_cast<int>(std::lround(100 * o.scale)));
  const int epochs = std::max(2, o.cache_epochs);
  const std::string dataset = dir + "/cache-reach.hdf5";
  std::fprintf(stderr, "[workload] sft-cache: recording %d reach demonstrations ...\n", episodes);
  const pid_t rec = test::spawn({o.nexusctl, "dataset", "record", "--task", "reach", "--episodes", std::to_string(episodes),
                                 "--seed", "500", "--out", dataset},
                                {.stdout_path = dir + "/cache-record.out", .stderr_path = dir + "/cache-record.err"});
  if (test::wait_exit(rec, std::chrono::seconds(300)) != 0) throw std::runtime_error("recording the demonstrations failed");
  // The bounded case: a quarter of what the dataset's features take (tiny: ~50 KB a sample).
  std::vector<CacheRun> runs;
  runs.push_back(run_cache_case(o, dataset, dir, "off", {"--feature-cache-mib", "0"}, epochs));
  runs.push_back(run_cache_case(o, dataset, dir, "on", {}, epochs));
  runs.push_back(run_cache_case(o, dataset, dir, "shared", {"--feature-cache-shared"}, epochs));
  const double features_mib = runs[1].peak_bytes / 2 / (1 << 20);  // one tenant's entries: the whole dataset
  const auto bounded_mib = std::max<long>(1, std::lround(features_mib / 4));
  const std::string bounded_toml = dir + "/cache-bounded.toml";
  std::ofstream(bounded_toml) << "[feature_cache]\nmib = " << bounded_mib << "\nmib_per_tenant = " << bounded_mib << "\n";
  runs.push_back(run_cache_case(o, dataset, dir, "bounded", {"-c", bounded_toml}, epochs));

  nlohmann::json j = {{"epochs", epochs}, {"episodes", episodes}, {"batch", kBatch}, {"tenants", 2},
                      {"dataset_features_mib", features_mib}, {"bounded_mib", bounded_mib}};
  std::printf("\nsecond scenario: two SFT tenants on one dataset (%d reach demos), %d epochs each, concurrently\n",
              episodes, epochs);
  std::printf("%-8s %9s %12s %11s %9s %15s %9s %9s %9s\n", "cache", "epoch 1 s", "epochs 2+ s", "last epoch", "speedup",
              "backbone/drawn", "hits last", "peak MiB", "bound MiB");
  // An uncached epoch's time does not depend on which epoch it is: the off run's mean is the
  // reference (less noisy than any one of its epochs).
  double off_epoch = 0;
  for (double s : runs[0].epoch_s) off_epoch += s / static_cast<double>(runs[0].epoch_s.size());
  j["uncached_epoch_s"] = off_epoch;
  for (const auto& r : runs) {
    const double later = mean_after_first(r.epoch_s);
    std::printf("%-8s %9.2f %12.2f %11.2f %8.2fx %8llu/%-6llu %8.0f%% %9.1f %9.1f\n", r.label.c_str(), r.epoch_s[0], later,
                r.epoch_s.back(), off_epoch / r.epoch_s.back(), static_cast<unsigned long long>(r.backbone_samples),
                static_cast<unsigned long long>(r.drawn), 100 * r.epoch_hit_rate.back(), r.peak_bytes / (1 << 20),
                r.cache.bound / (1 << 20));
    j[r.label] = {{"epoch_s", r.epoch_s},          {"epoch_hit_rate", r.epoch_hit_rate},
                  {"later_epoch_s", later},        {"later_speedup_vs_off", off_epoch / later},
                  {"last_speedup_vs_off", off_epoch / r.epoch_s.back()},
                  {"backbone_samples", r.backbone_samples},
                  {"drawn", r.drawn},              {"hits", r.cache.hits},
                  {"misses", r.cache.misses},      {"peak_bytes", r.peak_bytes},
                  {"bound_bytes", r.cache.bound},  {"final_loss", r.final_loss}};
  }
  // A cached epoch: the last one, whose hit rate the table shows (sampling with replacement
  // leaves about 1/e of the samples undrawn after the first epoch, 1/e^2 after the second, ...).
  j["cached_epoch_speedup"] = off_epoch / runs[1].epoch_s.back();
  j["cached_epoch_hit_rate"] = runs[1].epoch_hit_rate.back();
  j["dataset_samples"] = runs[1].samples;
  // Encodes per dataset sample over the whole run, both tenants together: 2 with a cache per
  // tenant, 1 if shared entries made them encode each sample once between them (a little more:
  // a sample both miss in the same pass, or drawn twice in one batch, is encoded twice).
  for (const auto* r : {&runs[1], &runs[2]})
    j[r->label]["encodes_per_sample"] = static_cast<double>(r->backbone_samples) / static_cast<double>(r->samples);
  std::printf("a cached epoch (the last, %.0f%% hits) vs an uncached one: %.2fx faster; backbone encodes per dataset sample, both tenants: "
              "%.2f per tenant, %.2f shared\n",
              100 * j["cached_epoch_hit_rate"].get<double>(), j["cached_epoch_speedup"].get<double>(),
              j["on"]["encodes_per_sample"].get<double>(),
              j["shared"]["encodes_per_sample"].get<double>());
  return j;
}

}  // namespace nexus::bench
