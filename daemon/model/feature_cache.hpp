// The frozen-feature cache (docs/design/cache.md). The backbone is frozen, so the features of a
// dataset sample never change while the weights do not: an SFT tenant's second epoch, and a
// second tenant on the same dataset, can read them instead of running the backbone again.
//
// Keys are content digests (SHA-256): the backbone's weights digest, the scope (the tenant's
// owner uid and name, or "" when [feature_cache] shared = true), and the sample's key from the dataset store
// (its episode's views and instruction as stored, and the step). New weights or a changed dataset
// make new keys; old entries are never read again and age out. A tenant cannot choose a key that
// collides with another's content, and cannot put features in: entries are what nexusd computed.
//
// Bounds: `bytes` in host memory in all, `bytes_per_tenant` of them inserted by one tenant (a
// tenant over its share evicts its own oldest entries, never another's), least recently used
// first. Optional disk tier: entries evicted from memory go to files under `dir` (bounded by
// `disk_bytes`, oldest first), read back on a memory miss, and kept across restarts (their keys
// name the weights they came from). A file that does not read back as an entry is deleted and
// counts as a miss.
//
// Thread safety: every member may be called from any thread (replicas share one cache).
#pragma once
#include <torch/torch.h>

#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "daemon/model/model_service.hpp"
#include "daemon/state/content_digest.hpp"

namespace nexus::model {

class Backbone;

// One sample's features, on the host: tokens float [L, D], pooled float [D], mask bool [L].
struct CachedFeature {
  torch::Tensor tokens, pooled, mask;
  std::uint64_t bytes() const;
};

class FeatureCache {
 public:
  explicit FeatureCache(FeatureCacheConfig config);
  FeatureCache(const FeatureCache&) = delete;
  FeatureCache& operator=(const FeatureCache&) = delete;

  // The key of a sample of `scope` (its tenant: owner uid and name) under the backbone whose
  // digest is `backbone`; the scope is left out when the cache is shared.
  daemon::ContentDigest key(const daemon::ContentDigest& backbone, const std::string& scope,
                            const daemon::ContentDigest& sample) const;
  std::optional<CachedFeature> find(const daemon::ContentDigest& key);
  // How many of `keys` are held (memory or disk), without counting as lookups or touching the LRU.
  std::size_t present(const std::vector<daemon::ContentDigest>& keys) const;
  // Keeps a copy of `f` (any device; stored on the host). `tenant`: whose share it counts in.
  void insert(const daemon::ContentDigest& key, const std::string& tenant, const CachedFeature& f);
  FeatureCacheStats stats() const;
  const FeatureCacheConfig& config() const { return config_; }

 private:
  struct Entry {
    CachedFeature feature;
    std::string owner;
    std::list<daemon::ContentDigest>::iterator lru, owner_lru;
  };
  struct DigestHash {
    std::size_t operator()(const daemon::ContentDigest& d) const;
  };
  // Both hold mu_. evict: the entry leaves memory (to the disk tier when there is one).
  void evict(const daemon::ContentDigest& key);
  void to_disk(const daemon::ContentDigest& key, const CachedFeature& f);
  std::optional<CachedFeature> from_disk(const daemon::ContentDigest& key);
  void forget_on_disk(daemon::ContentDigest key);  // a copy: callers pass disk_lru_.back()
  void load_disk_index();

  const FeatureCacheConfig config_;
  mutable std::mutex mu_;
  std::unordered_map<daemon::ContentDigest, Entry, DigestHash> entries_;        // GUARDED_BY(mu_)
  std::list<daemon::ContentDigest> lru_;                                      // GUARDED_BY(mu_): front = newest
  std::map<std::string, std::list<daemon::ContentDigest>> owner_lru_;        // GUARDED_BY(mu_)
  std::map<std::string, std::uint64_t> owner_bytes_;                         // GUARDED_BY(mu_)
  struct DiskEntry {
    std::uint64_t bytes;
    std::list<daemon::ContentDigest>::iterator lru;
  };
  std::unordered_map<daemon::ContentDigest, DiskEntry, DigestHash> disk_;    // GUARDED_BY(mu_)
  std::list<daemon::ContentDigest> disk_lru_;                                 // GUARDED_BY(mu_)
  FeatureCacheStats stats_;                                                    // GUARDED_BY(mu_)
};

// SHA-256 of what makes the backbone's features what they are: its kind and geometry, and every
// parameter and buffer (the built-in one), or the bytes of the user's TorchScript/AOTInductor
// file `weights`; and the arithmetic it runs at, other than float32 ([model] precision: a bf16
// pass gives other features; float32's digest is what it was before precision existed).
daemon::ContentDigest backbone_digest(Backbone& backbone, const std::string& kind, const std::string& weights,
                                      std::string_view precision = "float32");

}  // namespace nexus::model
