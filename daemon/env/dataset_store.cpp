#include "daemon/env/dataset_store.hpp"

#include <sys/stat.h>

#include <cstring>

#include "datasets/demo_transfer.hpp"

#include "schema/tokenizer.hpp"

namespace nexus::env {
namespace {

std::string mib(std::uint64_t bytes) { return std::to_string(bytes >> 20) + " MiB"; }

// What the backbone reads of an episode: its views (as stored: resized to the backbone's size at
// load) and its instruction, with the shape that gives the bytes their meaning.
daemon::ContentDigest episode_digest(const datasets::Episode& ep, const datasets::DatasetMeta& meta) {
  daemon::ContentHasher h;
  h.text("nexus.dataset.episode.v1").number(meta.views.size()).number(static_cast<std::uint64_t>(meta.image_size));
  h.number(static_cast<std::uint64_t>(ep.steps)).text(ep.instruction).bytes(ep.images.data(), ep.images.size());
  return h.finish();
}

daemon::ContentDigest sample_key(const daemon::ContentDigest& episode, std::int64_t step) {
  daemon::ContentHasher h;
  return h.text("nexus.dataset.sample.v1").digest(episode).number(static_cast<std::uint64_t>(step)).finish();
}

}  // namespace

std::uint64_t DatasetStore::tenant_bytes(const std::string& tenant, const std::string& except) const {
  std::uint64_t b = 0;
  auto it = datasets_.find(tenant);
  if (it != datasets_.end())
    for (const auto& [name, d] : it->second)
      if (name != except) b += d->bytes;
  return b;
}

std::uint64_t DatasetStore::reserve(const std::string& tenant, const std::string& name) {
  auto it = datasets_.find(tenant);
  const bool replacing = it != datasets_.end() && it->second.count(name);
  if (!replacing && it != datasets_.end() && it->second.size() >= limits_.per_tenant)
    throw DatasetRefused(true, "a tenant may hold " + std::to_string(limits_.per_tenant) +
                                   " datasets; reuse a name to replace one");
  const auto replaced = replacing ? it->second.at(name)->bytes : 0;
  const auto mine = tenant_bytes(tenant, name) + (reserved_.count(tenant) ? reserved_.at(tenant) : 0);
  const auto all = total_bytes_ - replaced + reserved_total_;
  const auto left_mine = limits_.bytes_per_tenant > mine ? limits_.bytes_per_tenant - mine : 0;
  const auto left_all = limits_.bytes_total > all ? limits_.bytes_total - all : 0;
  if (left_mine == 0)
    throw DatasetRefused(true, "dataset '" + name + "' does not fit: this tenant holds or is loading " + mib(mine) +
                                   " of its " + mib(limits_.bytes_per_tenant) + " ([env] dataset_mib_per_tenant)");
  if (left_all == 0)
    throw DatasetRefused(true, "dataset '" + name + "' does not fit nexusd's " + mib(limits_.bytes_total) +
                                   " of datasets in all ([env] dataset_mib_total; loads in progress reserve what "
                                   "they may hold: try again when they end)");
  const auto bound = std::min(left_mine, left_all);
  reserved_[tenant] += bound;
  reserved_total_ += bound;
  return bound;
}

LoadedDataset DatasetStore::load(const std::string& tenant, const std::string& name, int fd, std::uint64_t seed,
                                 std::int64_t image_size, std::int64_t max_views, const DatasetLoadOptions& options) {
  struct stat st {};
  const std::uint64_t file_bytes = ::fstat(fd, &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
  std::uint64_t bound = 0;
  {
    std::lock_guard lk(mu_);
    bound = reserve(tenant, name);
    if (file_bytes > bound) {  // a huge file is refused without being read
      reserved_[tenant] -= bound, reserved_total_ -= bound;
      throw DatasetRefused(true, "dataset '" + name + "' is a file of " + mib(file_bytes) + "; at most " + mib(bound) +
                                     " is left of this tenant's datasets ([env] dataset_mib_per_tenant, dataset_mib_total)");
    }
  }
  struct Unreserve {  // however the load ends
    DatasetStore& store;
    const std::string& tenant;
    std::uint64_t bound;
    ~Unreserve() {
      std::lock_guard lk(store.mu_);
      store.reserved_[tenant] -= bound;
      if (store.reserved_[tenant] == 0) store.reserved_.erase(tenant);
      store.reserved_total_ -= bound;
    }
  } unreserve{*this, tenant, bound};
  auto d = std::make_shared<Dataset>();
  datasets::ReadOptions read{options.views, options.state_keys, image_size, options.instruction};
  read.max_bytes = bound;
  try {
    d->file = parse_dataset(limits_.reader, fd, "dataset '" + name + "'", read);
    if (options.normalize)
      d->normalizer = std::make_shared<const datasets::Normalizer>(datasets::compute_normalizer(d->file));
  } catch (const datasets::DatasetTooLarge& e) {  // refused by what is left of the quotas
    throw DatasetRefused(true, e.what());
  } catch (const datasets::DatasetError& e) {
    throw DatasetRefused(false, e.what());
  }
  const auto& m = d->file.meta;
  if (static_cast<std::int64_t>(m.views.size()) > max_views)
    throw DatasetRefused(false, "dataset '" + name + "' has " + std::to_string(m.views.size()) +
                                    " views; the backbone takes at most " + std::to_string(max_views) +
                                    " (name the ones to use with views)");
  LoadedDataset out;
  for (std::size_t e = 0; e < d->file.episodes.size(); ++e) {
    const auto& ep = d->file.episodes[e];
    out.train_episodes += ep.train;
    out.valid_episodes += ep.valid;
    if (ep.train)
      for (std::int64_t t = 0; t < ep.steps; ++t) d->index.emplace_back(e, t);
  }
  if (d->index.empty()) throw DatasetRefused(false, "dataset '" + name + "' has no training samples");
  d->episode_digests.reserve(d->file.episodes.size());
  for (const auto& ep : d->file.episodes) d->episode_digests.push_back(episode_digest(ep, m));
  d->rng.seed(seed);
  d->bytes = datasets::held_bytes(d->file);
  out.episodes = static_cast<std::uint32_t>(d->file.episodes.size());
  out.samples = d->index.size();
  out.state_dim = m.state_dim;
  out.action_dim = m.action_dim;
  out.source_image_size = m.source_image_size;
  out.bytes = d->bytes;
  out.layout = m.layout;
  out.views = m.views;
  out.state_keys = m.state_keys;
  out.normalizer = d->normalizer;
  std::lock_guard lk(mu_);  // it held at most `bound`, reserved for it: it fits
  auto& slot = datasets_[tenant][name];
  if (slot) total_bytes_ -= slot->bytes;
  slot = std::move(d);
  total_bytes_ += out.bytes;
  return out;
}

SampledBatch DatasetStore::sample(const std::string& tenant, const std::string& name, std::int64_t n,
                                  std::int64_t chunk, std::int64_t max_tokens) {
  std::shared_ptr<Dataset> d;
  {
    std::lock_guard lk(mu_);
    auto it = datasets_.find(tenant);
    if (it != datasets_.end() && it->second.count(name)) d = it->second.at(name);
  }
  if (!d) throw DatasetRefused(false, "no dataset '" + name + "' loaded by this tenant");
  if (n < 1 || n > 4096 || chunk < 1 || chunk > 64) throw std::invalid_argument("batch must be 1..4096 and chunk 1..64");
  const auto& meta = d->file.meta;
  SampledBatch b;
  b.n = n, b.chunk = chunk, b.image_size = meta.image_size, b.max_tokens = max_tokens;
  b.views = static_cast<std::int64_t>(meta.views.size());
  b.state_dim = meta.state_dim, b.action_dim = meta.action_dim;
  const auto hw = static_cast<std::size_t>(meta.image_size);
  const std::size_t image_bytes = static_cast<std::size_t>(b.views) * hw * hw * 3, sd = static_cast<std::size_t>(meta.state_dim),
                    ad = static_cast<std::size_t>(meta.action_dim), T = static_cast<std::size_t>(max_tokens);
  b.images.resize(static_cast<std::size_t>(n) * image_bytes);
  b.tokens.resize(static_cast<std::size_t>(n) * T);
  b.mask.resize(static_cast<std::size_t>(n) * T);
  b.state.resize(static_cast<std::size_t>(n) * sd);
  b.actions.resize(static_cast<std::size_t>(n * chunk) * ad);
  b.sample_keys.resize(static_cast<std::size_t>(n));
  std::lock_guard lk(d->mu);
  for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
    const auto [e, t] = d->index[d->rng() % d->index.size()];
    const auto& ep = d->file.episodes[e];
    b.sample_keys[i] = sample_key(d->episode_digests[e], t);
    std::memcpy(&b.images[i * image_bytes], ep.images.data() + static_cast<std::size_t>(t) * image_bytes, image_bytes);
    schema::tokenize_bytes(ep.instruction, &b.tokens[i * T], &b.mask[i * T], max_tokens);
    std::memcpy(&b.state[i * sd], ep.proprio.data() + static_cast<std::size_t>(t) * sd, sd * sizeof(float));
    for (std::size_t k = 0; k < static_cast<std::size_t>(chunk); ++k) {
      const auto step = static_cast<std::size_t>(std::min<std::int64_t>(t + static_cast<std::int64_t>(k), ep.steps - 1));
      std::memcpy(&b.actions[(i * static_cast<std::size_t>(chunk) + k) * ad], ep.actions.data() + step * ad,
                  ad * sizeof(float));
    }
  }
  if (d->normalizer) {
    b.normalized = true;
    d->normalizer->state.normalize(b.state.data(), b.state.size());
    d->normalizer->action.normalize(b.actions.data(), b.actions.size());
  }
  return b;
}

std::shared_ptr<const datasets::Normalizer> DatasetStore::normalizer(const std::string& tenant,
                                                                     const std::string& name) const {
  std::lock_guard lk(mu_);
  auto it = datasets_.find(tenant);
  if (it == datasets_.end() || !it->second.count(name))
    throw DatasetRefused(false, "no dataset '" + name + "' loaded by this tenant");
  auto n = it->second.at(name)->normalizer;
  if (!n) throw DatasetRefused(false, "dataset '" + name + "' was loaded without normalize: nothing to apply");
  return n;
}

void DatasetStore::tenant_detached(const std::string& tenant) {
  std::lock_guard lk(mu_);
  auto it = datasets_.find(tenant);
  if (it == datasets_.end()) return;
  for (const auto& [name, d] : it->second) total_bytes_ -= d->bytes;
  datasets_.erase(it);
}

std::uint64_t DatasetStore::bytes() const {
  std::lock_guard lk(mu_);
  return total_bytes_;
}

}  // namespace nexus::env
