// The frozen-feature cache on its own (docs/design/cache.md): its bounds (in all, per tenant, on
// disk), least recently used first out, keys that change with the weights, the tenant and the
// content, the disk tier across a restart and against a damaged file.
// LibTorch first: c10 defines a glog-style CHECK that aborts; Catch must define the last one.
#include <torch/torch.h>
#undef CHECK
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "daemon/model/adapted_backbone.hpp"
#include "daemon/model/feature_cache.hpp"
#include "processes.hpp"

using namespace nexus;
using daemon::ContentDigest;

namespace {

constexpr std::int64_t kTokens = 9, kDim = 16;

model::CachedFeature feature(float value) {
  return {torch::full({kTokens, kDim}, value), torch::full({kDim}, -value), torch::ones({kTokens}, torch::kBool)};
}
const std::uint64_t kEntryBytes = feature(0).bytes();

ContentDigest sample(std::uint64_t i) {
  daemon::ContentHasher h;
  return h.number(i).finish();
}

const ContentDigest kBackbone = sample(424242);

}  // namespace

TEST_CASE("the feature cache keeps within its bound, least recently used out first", "[model][feature_cache]") {
  model::FeatureCache cache({.bytes = 10 * kEntryBytes, .bytes_per_tenant = 10 * kEntryBytes});
  for (std::uint64_t i = 0; i < 10; ++i) cache.insert(cache.key(kBackbone, "a", sample(i)), "a", feature(float(i)));
  REQUIRE(cache.find(cache.key(kBackbone, "a", sample(0))));  // 0 is now the most recently used
  for (std::uint64_t i = 10; i < 25; ++i) {
    cache.insert(cache.key(kBackbone, "a", sample(i)), "a", feature(float(i)));
    CHECK(cache.stats().bytes <= 10 * kEntryBytes);
  }
  const auto s = cache.stats();
  CHECK(s.entries == 10);
  CHECK(s.evictions == 15);
  CHECK(s.inserts == 25);
  // 0 was used after 1..9 went in: among the ten kept only while newer ones fit (it went last
  // of the first ten); the newest ten are 15..24.
  CHECK_FALSE(cache.find(cache.key(kBackbone, "a", sample(1))));
  for (std::uint64_t i = 15; i < 25; ++i) {
    const auto f = cache.find(cache.key(kBackbone, "a", sample(i)));
    REQUIRE(f);
    CHECK(f->tokens.equal(feature(float(i)).tokens));
    CHECK(f->pooled.equal(feature(float(i)).pooled));
  }
  // A hit's tensors are the cache's own copies: writing the inserted ones changes nothing.
  auto mine = feature(7);
  cache.insert(cache.key(kBackbone, "a", sample(100)), "a", mine);
  mine.tokens.fill_(0);
  CHECK(cache.find(cache.key(kBackbone, "a", sample(100)))->tokens.equal(feature(7).tokens));
}

TEST_CASE("a tenant over its share of the feature cache evicts its own entries, not another's",
          "[model][feature_cache]") {
  model::FeatureCache cache({.bytes = 10 * kEntryBytes, .bytes_per_tenant = 4 * kEntryBytes});
  for (std::uint64_t i = 0; i < 3; ++i) cache.insert(cache.key(kBackbone, "b", sample(i)), "b", feature(1));
  for (std::uint64_t i = 0; i < 50; ++i) cache.insert(cache.key(kBackbone, "a", sample(i)), "a", feature(2));
  for (std::uint64_t i = 0; i < 3; ++i) CHECK(cache.find(cache.key(kBackbone, "b", sample(i))));
  CHECK(cache.stats().entries == 7);  // b's 3 and a's newest 4
  CHECK(cache.find(cache.key(kBackbone, "a", sample(49))));
  CHECK_FALSE(cache.find(cache.key(kBackbone, "a", sample(45))));
}

TEST_CASE("feature cache keys change with the weights, the tenant and the sample: shared keys drop the tenant",
          "[model][feature_cache]") {
  model::FeatureCache own({});
  model::FeatureCache shared({.shared = true});
  const auto other = sample(7);
  CHECK(own.key(kBackbone, "a", sample(1)) == own.key(kBackbone, "a", sample(1)));
  CHECK(own.key(kBackbone, "a", sample(1)) != own.key(kBackbone, "b", sample(1)));
  CHECK(own.key(kBackbone, "a", sample(1)) != own.key(kBackbone, "a", sample(2)));
  CHECK(own.key(kBackbone, "a", sample(1)) != own.key(other, "a", sample(1)));
  CHECK(shared.key(kBackbone, "a", sample(1)) == shared.key(kBackbone, "b", sample(1)));
  CHECK(shared.key(kBackbone, "a", sample(1)) != own.key(kBackbone, "a", sample(1)));
  CHECK(shared.key(kBackbone, "a", sample(1)) != shared.key(other, "a", sample(1)));

  // The backbone's digest covers its weights: the same seeded init twice is one digest; one
  // changed number in one parameter is another.
  const auto tiny = *model::named_backbone("tiny");
  auto b1 = model::make_adaptable_backbone(tiny, "");
  auto b2 = model::make_adaptable_backbone(tiny, "");
  const auto d1 = model::backbone_digest(*b1, "tiny", "");
  CHECK(d1 == model::backbone_digest(*b2, "tiny", ""));
  {
    torch::NoGradGuard no_grad;
    auto p = b2->module().named_parameters(true).begin()->value();
    p.view({-1})[0] += 1e-6f;
  }
  CHECK(d1 != model::backbone_digest(*b2, "tiny", ""));
  auto small = model::make_adaptable_backbone(*model::named_backbone("small"), "");
  CHECK(d1 != model::backbone_digest(*small, "small", ""));
}

TEST_CASE("the feature cache's disk tier takes what memory evicts, survives a restart, and drops a damaged file",
          "[model][feature_cache]") {
  test::TempDir dir;
  const std::string where = dir.path + "/fc";
  model::FeatureCacheConfig config{.bytes = 2 * kEntryBytes, .bytes_per_tenant = 2 * kEntryBytes,
                                   .disk_bytes = 3 * (kEntryBytes + 64), .dir = where};
  {
    model::FeatureCache cache(config);
    for (std::uint64_t i = 0; i < 6; ++i) cache.insert(cache.key(kBackbone, "a", sample(i)), "a", feature(float(i)));
    const auto s = cache.stats();
    CHECK(s.entries == 2);
    CHECK(s.disk_entries == 3);  // 4 evicted, the disk holds the newest 3 of them
    CHECK(s.disk_bytes <= config.disk_bytes);
    const auto f = cache.find(cache.key(kBackbone, "a", sample(2)));
    REQUIRE(f);
    CHECK(f->tokens.equal(feature(2).tokens));
    CHECK(f->mask.equal(feature(2).mask));
    CHECK(cache.stats().disk_hits == 1);
    CHECK_FALSE(cache.find(cache.key(kBackbone, "a", sample(0))));
    CHECK((std::filesystem::status(where).permissions() & std::filesystem::perms::all) ==
          std::filesystem::perms::owner_all);
  }
  // A restart: the entries on disk are found again; one file cut short is a miss, and removed.
  model::FeatureCache cache(config);
  CHECK(cache.stats().disk_entries == 3);
  const auto cut = cache.key(kBackbone, "a", sample(3));
  const auto path = where + "/" + daemon::to_hex(cut);
  REQUIRE(std::filesystem::exists(path));
  std::filesystem::resize_file(path, 100);
  std::ofstream(where + "/not-a-key") << "left by someone";
  CHECK_FALSE(cache.find(cut));
  CHECK_FALSE(std::filesystem::exists(path));
  CHECK(cache.stats().disk_entries == 2);
  const auto f = cache.find(cache.key(kBackbone, "a", sample(1)));
  REQUIRE(f);
  CHECK(f->pooled.equal(feature(1).pooled));
  model::FeatureCache again(config);  // the stray file is not ours: removed at start
  CHECK_FALSE(std::filesystem::exists(where + "/not-a-key"));
}
