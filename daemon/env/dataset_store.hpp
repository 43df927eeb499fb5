// Offline datasets (the Environment Service's data side): demonstration files a tenant loaded
// through a descriptor it opened itself (nexusd never opens a tenant's path), kept per tenant
// within bounds, and sampled into SFT batches (training demos only; normalised on request).
//
// Bounds (typed refusals, nothing half-loaded): datasets per tenant, bytes per tenant, bytes in
// all. The file's size is checked before it is read; then what is left of both quotas is
// reserved and handed to the parser as the most it may hold, so that no load, and no number of
// loads at once, can make nexusd allocate past the quotas (a gzip bomb is refused by its declared
// sizes, before its chunks are inflated). Files are parsed by the sandboxed reader
// (dataset_sandbox.hpp), never in this process.
// Thread safety: every member may be called from any thread; loading reads outside the lock.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "datasets/demo_file.hpp"
#include "daemon/env/dataset_sandbox.hpp"
#include "daemon/state/content_digest.hpp"
#include "datasets/normalizer.hpp"

namespace nexus::env {

struct DatasetLimits {
  std::size_t per_tenant = 8;
  std::uint64_t bytes_per_tenant = 2ull << 30;
  std::uint64_t bytes_total = 8ull << 30;
  DatasetReader reader;  // the sandboxed parser (its path empty: in this process, for tools and tests)
};

// A refusal: the file is not a valid demonstration file (BadDataset) or does not fit a bound.
class DatasetRefused : public std::runtime_error {
 public:
  DatasetRefused(bool over_quota, const std::string& reason) : std::runtime_error(reason), quota_(over_quota) {}
  bool over_quota() const { return quota_; }

 private:
  bool quota_;
};

// How to read a file: which keys, and whether to normalise (datasets/demo_file.hpp, normalizer.hpp).
struct DatasetLoadOptions {
  std::vector<std::string> views, state_keys;  // empty: the file's layout decides
  bool normalize = false;
  std::string instruction;                     // for demos whose file names none
};

struct LoadedDataset {
  std::uint32_t episodes = 0, train_episodes = 0, valid_episodes = 0;
  std::uint64_t samples = 0;   // steps over the training episodes
  std::int64_t state_dim = 0, action_dim = 0, source_image_size = 0;
  std::uint64_t bytes = 0;     // held in memory
  std::string layout;
  std::vector<std::string> views, state_keys;
  std::shared_ptr<const datasets::Normalizer> normalizer;  // null unless normalize
};

// A batch the daemon sampled: (views, instruction tokens, state, action chunk) per sample, in
// the layouts the model service reads (images uint8 [n, views, H, W, 3], tokens int32 and mask
// uint8 [n, T], state float32 [n, state_dim], actions float32 [n, chunk, action_dim]), normalised
// when the dataset was loaded with normalize.
struct SampledBatch {
  std::int64_t n = 0, chunk = 0, views = 1, image_size = 0, max_tokens = 0, state_dim = 0, action_dim = 0;
  bool normalized = false;  // state and actions in the dataset's normalised units
  std::vector<std::uint8_t> images, mask;
  std::vector<std::int32_t> tokens;
  std::vector<float> state, actions;
  // Per sample: what the backbone sees of it, digested (its episode's content digest and the
  // step), so that the model service can key its frozen-feature cache by content
  // (docs/design/cache.md). The pixels are the stored, resized ones: no augmentation is applied
  // here; one that changed pixels would have to enter this key.
  std::vector<daemon::ContentDigest> sample_keys;
};

class DatasetStore {
 public:
  explicit DatasetStore(DatasetLimits limits = {}) : limits_(limits) {}

  // Reads the whole file from `fd` (not closed here) as `name` for `tenant` (replacing a dataset
  // of that name). image_size and max_views: the backbone's; views are resized to image_size.
  // Throws DatasetRefused.
  LoadedDataset load(const std::string& tenant, const std::string& name, int fd, std::uint64_t seed,
                     std::int64_t image_size, std::int64_t max_views, const DatasetLoadOptions& options = {});
  // The normalisation of a dataset this tenant loaded with normalize. Throws DatasetRefused when
  // there is no such dataset or it was loaded without.
  std::shared_ptr<const datasets::Normalizer> normalizer(const std::string& tenant, const std::string& name) const;
  // Samples `batch` steps with `chunk` consecutive actions each (the last action repeats past
  // an episode's end). Throws DatasetRefused (no such dataset) or std::invalid_argument.
  SampledBatch sample(const std::string& tenant, const std::string& name, std::int64_t batch, std::int64_t chunk,
                      std::int64_t max_tokens);
  void tenant_detached(const std::string& tenant);
  std::uint64_t bytes() const;

 private:
  struct Dataset {
    datasets::DemoFile file;
    std::vector<std::pair<std::size_t, std::int64_t>> index;  // (episode, step) of every training sample
    std::shared_ptr<const datasets::Normalizer> normalizer;   // null unless loaded with normalize
    std::vector<daemon::ContentDigest> episode_digests;       // SHA-256 of each episode's views and instruction
    std::uint64_t bytes = 0;
    std::mutex mu;                                          // the sampling RNG
    std::mt19937_64 rng;
  };
  std::uint64_t tenant_bytes(const std::string& tenant, const std::string& except) const;  // holds mu_
  // Reserves the most a load may hold (holds mu_): min of what is left to the tenant and in all,
  // counting the dataset it replaces as freed. Throws DatasetRefused when nothing is left.
  std::uint64_t reserve(const std::string& tenant, const std::string& name);

  const DatasetLimits limits_;
  mutable std::mutex mu_;
  std::map<std::string, std::map<std::string, std::shared_ptr<Dataset>>> datasets_;  // GUARDED_BY(mu_)
  std::uint64_t total_bytes_ = 0;                                                      // GUARDED_BY(mu_)
  std::map<std::string, std::uint64_t> reserved_;  // GUARDED_BY(mu_): loads in progress, per tenant
  std::uint64_t reserved_total_ = 0;               // GUARDED_BY(mu_)
};

}  // namespace nexus::env
