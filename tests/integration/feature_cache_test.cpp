// The frozen-feature cache through nexusd (docs/design/cache.md): dataset SFT steps read the
// backbone's features of samples they saw before instead of recomputing them; the losses are
// bitwise those of a daemon without the cache (deterministic mode); tenants do not share entries
// unless the config says so, and then encode a dataset's samples once between them; keys follow
// the content (another name for the same file hits, another file misses) and the weights (a
// restart with the disk tier hits with the same weights, misses with others).
#include <catch2/catch.hpp>

#include <fstream>

#include "nexus/client.hpp"
#include "nexus/status.hpp"
#include "metrics_text.hpp"
#include "processes.hpp"
#include "tenant_run.hpp"

using namespace nexus::test;

namespace {

constexpr int kBatch = 32, kChunk = 4;

struct Cache {
  double hit = 0, miss = 0, disk_hit = 0, memory_bytes = 0, bound = 0;
};

// The daemon's feature cache counters, from its Prometheus exposition (nexusctl metrics).
Cache cache_of(const Daemon& d) {
  const auto text = nexus::query_metrics(d.socket());
  return {metric_sample(text, "nexus_feature_cache_lookups_total{result=\"hit\"}"),
          metric_sample(text, "nexus_feature_cache_lookups_total{result=\"miss\"}"),
          metric_sample(text, "nexus_feature_cache_lookups_total{result=\"disk_hit\"}"),
          metric_sample(text, "nexus_feature_cache_bytes{tier=\"memory\"}"),
          metric_sample(text, "nexus_feature_cache_bytes{tier=\"bound\"}")};
}

std::uint64_t backbone_samples(const Daemon& d) { return nexus::query_status(d.socket()).model_samples; }

std::unique_ptr<nexus::Client> sft_tenant(const Daemon& d, const std::string& name, const std::string& file,
                                          std::uint64_t seed = 5) {
  auto c = nexus::Client::attach({.socket_path = d.socket(), .tenant = name, .timeout = std::chrono::seconds(120)});
  nexus::TenantSpec spec;
  spec.head = {.kind = "mlp_chunk", .state_dim = 4, .action_dim = 2, .chunk = kChunk};
  spec.seed = 11;
  c->register_tenant(spec);
  c->dataset_load("demos", file, seed);
  return c;
}

std::vector<double> losses(nexus::Client& c, int steps, const std::string& dataset = "demos") {
  std::vector<double> out;
  for (int i = 0; i < steps; ++i) out.push_back(c.dataset_sft_step(dataset, kBatch, kChunk).loss);
  return out;
}

std::string record(const TempDir& dir, const std::string& name, int episodes, int seed) {
  const std::string file = dir.path + "/" + name + ".hdf5";
  REQUIRE(run_json({nexusctl_path(), "dataset", "record", "--task", "reach", "--episodes", std::to_string(episodes),
                    "--seed", std::to_string(seed), "--out", file},
                   dir, "record-" + name)
              .first == 0);
  return file;
}

std::vector<std::string> flags(const TempDir& dir, const std::string& state, std::vector<std::string> more = {}) {
  std::vector<std::string> f{"--weights", tiny_weights_path(), "--log-level", "warn", "--state-dir", dir.path + "/" + state};
  f.insert(f.end(), more.begin(), more.end());
  return f;
}

}  // namespace

TEST_CASE("cached SFT epochs give bitwise the losses of uncached ones in deterministic mode, with fewer backbone "
          "samples",
          "[integration][model][feature_cache]") {
  TempDir dir;
  const auto file = record(dir, "reach", 4, 31);
  constexpr int kSteps = 30;  // 960 draws over a few hundred samples: most later rows are hits
  std::vector<double> uncached, cached;
  std::uint64_t uncached_samples = 0, cached_samples = 0;
  {
    Daemon d(flags(dir, "off", {"--deterministic", "--feature-cache-mib", "0"}));
    auto c = sft_tenant(d, "ann", file);
    uncached = losses(*c, kSteps);
    uncached_samples = backbone_samples(d);
    CHECK(cache_of(d).hit == 0);
    CHECK(cache_of(d).bound == 0);
  }
  {
    Daemon d(flags(dir, "on", {"--deterministic"}));
    auto c = sft_tenant(d, "ann", file);
    cached = losses(*c, kSteps);
    cached_samples = backbone_samples(d);
    const auto fc = cache_of(d);
    INFO("hits " << fc.hit << " misses " << fc.miss);
    CHECK(fc.hit > 0.5 * kSteps * kBatch);
    CHECK(fc.hit + fc.miss == kSteps * kBatch);
    CHECK(fc.memory_bytes > 0);
    CHECK(fc.memory_bytes <= fc.bound);
  }
  CHECK(uncached_samples == kSteps * kBatch);
  CHECK(cached_samples < uncached_samples / 2);
  REQUIRE(cached.size() == uncached.size());
  for (std::size_t i = 0; i < cached.size(); ++i) {
    INFO("step " << i);
    CHECK(cached[i] == uncached[i]);  // bitwise: the cache returns exactly the features the backbone made
  }
}

TEST_CASE("tenants on one dataset share cached features only when the config says so: keys follow content",
          "[integration][model][feature_cache]") {
  TempDir dir;
  const auto file = record(dir, "reach", 3, 41);
  const auto other = record(dir, "other", 3, 9041);  // episodes are seeded seed + i: none in common
  SECTION("off by default: each tenant encodes for itself") {
    Daemon d(flags(dir, "own"));
    auto a = sft_tenant(d, "a", file);
    losses(*a, 40);  // a has seen (nearly) every sample
    auto b = sft_tenant(d, "b", file);
    const auto before = cache_of(d);
    losses(*b, 1);
    const auto after = cache_of(d);
    // None of a's entries is b's: a has every sample, so a leak would make all 32 hits. A few
    // may hit b's own: a sample drawn twice, in two micro-batches of a split step.
    CHECK(after.hit + after.miss == before.hit + before.miss + kBatch);
    CHECK(after.hit - before.hit <= kBatch / 4);
    // The same content under another name is the same key: a's steps on it hit.
    a->dataset_load("again", file, 9);
    const auto b2 = cache_of(d);
    losses(*a, 1, "again");
    CHECK(cache_of(d).hit > b2.hit);
    // Another file's samples are other keys.
    a->dataset_load("other", other, 9);
    const auto b3 = cache_of(d);
    losses(*a, 1, "other");
    CHECK(cache_of(d).hit - b3.hit <= kBatch / 4);
  }
  SECTION("shared: the second tenant's steps read what the first encoded") {
    Daemon d(flags(dir, "shared", {"--feature-cache-shared"}));
    auto a = sft_tenant(d, "a", file);
    // Until a's own steps stop missing: then every sample is in the cache.
    for (int i = 0; i < 400; ++i) {
      const auto before = cache_of(d);
      losses(*a, 1);
      if (cache_of(d).miss == before.miss && i > 10) break;
    }
    auto b = sft_tenant(d, "b", file);
    const auto samples = backbone_samples(d);
    const auto before = cache_of(d);
    losses(*b, 10);
    const auto after = cache_of(d);
    INFO("b's misses: " << after.miss - before.miss);
    CHECK(after.hit - before.hit >= 0.95 * 10 * kBatch);
    CHECK(backbone_samples(d) - samples <= 0.05 * 10 * kBatch);
  }
}

TEST_CASE("the feature cache's disk tier serves a restarted nexusd with the same weights, and not with others",
          "[integration][model][feature_cache]") {
  TempDir dir;
  const auto file = record(dir, "reach", 3, 51);
  const std::string config = dir.path + "/nexusd.toml";
  // A memory tier of 1 MiB holds about 20 samples of tiny's features: most go to disk. Shared, so
  // that each run's tenant can be a new one (a restarted nexusd would bring a name's slot back).
  std::ofstream(config) << "[feature_cache]\nmib = 1\nmib_per_tenant = 1\ndisk_mib = 256\nshared = true\n";
  int runs = 0;
  auto run = [&](const std::string& weights, int steps) {
    Daemon d({"-c", config, "--weights", weights, "--log-level", "warn", "--state-dir", dir.path + "/state"});
    auto c = sft_tenant(d, "ann" + std::to_string(++runs), file);
    losses(*c, steps);
    return cache_of(d);
  };
  const auto first = run(tiny_weights_path(), 20);
  CHECK(first.memory_bytes <= (1 << 20));
  CHECK(first.disk_hit > 0);  // the memory tier is too small: samples come back from disk already
  // One step after a restart (within one run, a step also hits what its earlier steps put in).
  const auto again = run(tiny_weights_path(), 1);
  CHECK(again.disk_hit >= 0.5 * kBatch);  // from disk
  const auto seeded = run("seeded", 1);   // other weights: other keys
  CHECK(seeded.hit == 0);
  CHECK(seeded.miss == kBatch);
}
