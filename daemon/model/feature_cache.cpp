#include "daemon/model/feature_cache.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "daemon/log/log_text.hpp"
#include "daemon/model/adapted_backbone.hpp"
#include "daemon/state/private_files.hpp"

namespace nexus::model {

namespace fs = std::filesystem;
using daemon::ContentDigest;

std::uint64_t CachedFeature::bytes() const {
  return static_cast<std::uint64_t>(tokens.numel() + pooled.numel()) * sizeof(float) +
         static_cast<std::uint64_t>(mask.numel());
}

std::size_t FeatureCache::DigestHash::operator()(const ContentDigest& d) const {
  std::size_t h = 0;  // the digest is uniformly distributed already: its first bytes will do
  std::memcpy(&h, d.data(), sizeof h);
  return h;
}

FeatureCache::FeatureCache(FeatureCacheConfig config) : config_(std::move(config)) {
  if (config_.disk_bytes > 0) load_disk_index();
}

ContentDigest FeatureCache::key(const ContentDigest& backbone, const std::string& scope,
                                const ContentDigest& sample) const {
  daemon::ContentHasher h;
  h.text("nexus.feature_cache.v1").digest(backbone).text(config_.shared ? std::string() : scope).digest(sample);
  return h.finish();
}

std::optional<CachedFeature> FeatureCache::find(const ContentDigest& key) {
  std::lock_guard lk(mu_);
  if (auto it = entries_.find(key); it != entries_.end()) {
    ++stats_.hits;
    lru_.splice(lru_.begin(), lru_, it->second.lru);
    auto& mine = owner_lru_[it->second.owner];
    mine.splice(mine.begin(), mine, it->second.owner_lru);
    return it->second.feature;  // tensors are shared, never written: entries are immutable
  }
  if (auto f = from_disk(key)) {
    ++stats_.hits, ++stats_.disk_hits;
    return f;  // not promoted: memory keeps what was used most recently from memory
  }
  ++stats_.misses;
  return std::nullopt;
}

std::size_t FeatureCache::present(const std::vector<ContentDigest>& keys) const {
  std::lock_guard lk(mu_);
  std::size_t n = 0;
  for (const auto& k : keys) n += entries_.count(k) + disk_.count(k) > 0 ? 1 : 0;
  return n;
}

void FeatureCache::insert(const ContentDigest& key, const std::string& tenant, const CachedFeature& f) {
  CachedFeature copy{f.tokens.to(torch::kCPU).contiguous().clone(), f.pooled.to(torch::kCPU).contiguous().clone(),
                     f.mask.to(torch::kCPU).contiguous().clone()};
  const auto size = copy.bytes();
  std::lock_guard lk(mu_);
  if (entries_.count(key) || size > config_.bytes_per_tenant || size > config_.bytes) return;
  while (owner_bytes_[tenant] + size > config_.bytes_per_tenant) evict(owner_lru_[tenant].back());
  while (stats_.bytes + size > config_.bytes) evict(lru_.back());
  lru_.push_front(key);
  auto& mine = owner_lru_[tenant];
  mine.push_front(key);
  entries_.emplace(key, Entry{std::move(copy), tenant, lru_.begin(), mine.begin()});
  owner_bytes_[tenant] += size;
  stats_.bytes += size, ++stats_.entries, ++stats_.inserts;
}

void FeatureCache::evict(const ContentDigest& key) {
  auto it = entries_.find(key);
  const auto size = it->second.feature.bytes();
  if (config_.disk_bytes > 0) to_disk(key, it->second.feature);
  auto& mine = owner_lru_[it->second.owner];
  mine.erase(it->second.owner_lru);
  owner_bytes_[it->second.owner] -= size;
  if (mine.empty()) owner_lru_.erase(it->second.owner), owner_bytes_.erase(it->second.owner);
  lru_.erase(it->second.lru);
  entries_.erase(it);
  stats_.bytes -= size, --stats_.entries, ++stats_.evictions;
}

FeatureCacheStats FeatureCache::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

// --- the disk tier -------------------------------------------------------------------------
// A file per entry, named by its key in hex: a header (magic, L, D), then mask (L bytes), pooled
// (D floats) and tokens (L x D floats) in host byte order. nexusd's own files, in its private
// directory; still read defensively (sizes checked against the header) since a disk can be
// full or a file cut short by a crash.

namespace {

constexpr char kMagic[8] = {'N', 'X', 'F', 'C', 'A', 'C', 'H', '1'};

struct FileHeader {
  char magic[8];
  std::int64_t tokens = 0, dim = 0;
};

std::uint64_t file_bytes(std::int64_t tokens, std::int64_t dim) {
  return sizeof(FileHeader) + static_cast<std::uint64_t>(tokens) +
         static_cast<std::uint64_t>(dim + tokens * dim) * sizeof(float);
}

std::optional<ContentDigest> parse_hex(const std::string& name) {
  if (name.size() != 64) return std::nullopt;
  ContentDigest d{};
  for (std::size_t i = 0; i < 32; ++i) {
    unsigned v = 0;
    for (int k = 0; k < 2; ++k) {
      const char c = name[2 * i + k];
      const int x = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
      if (x < 0) return std::nullopt;
      v = v * 16 + static_cast<unsigned>(x);
    }
    d[i] = static_cast<std::uint8_t>(v);
  }
  return d;
}

}  // namespace

void FeatureCache::load_disk_index() {
  try {
    daemon::ensure_private_dir(config_.dir);
    std::vector<std::pair<fs::file_time_type, fs::path>> files;
    for (const auto& e : fs::directory_iterator(config_.dir)) files.emplace_back(e.last_write_time(), e.path());
    std::sort(files.begin(), files.end());  // oldest first: the newest end up at the LRU's front
    for (const auto& [time, path] : files) {
      const auto key = parse_hex(path.filename().string());
      std::error_code ec;
      if (!key || !fs::is_regular_file(fs::symlink_status(path))) {
        fs::remove(path, ec);  // not ours: a temporary left by a crash, or anything else
        continue;
      }
      const auto bytes = fs::file_size(path, ec);
      if (ec) continue;
      disk_lru_.push_front(*key);
      disk_.emplace(*key, DiskEntry{bytes, disk_lru_.begin()});
      stats_.disk_bytes += bytes, ++stats_.disk_entries;
    }
    while (stats_.disk_bytes > config_.disk_bytes && !disk_lru_.empty()) forget_on_disk(disk_lru_.back());
  } catch (const std::exception& e) {
    daemon::log_text(daemon::LogLevel::Warn, "feature_cache", std::string("disk tier unusable: ") + e.what());
  }
}

void FeatureCache::forget_on_disk(ContentDigest key) {
  const auto it = disk_.find(key);
  std::error_code ec;
  fs::remove(fs::path(config_.dir) / daemon::to_hex(key), ec);
  stats_.disk_bytes -= it->second.bytes, --stats_.disk_entries;
  disk_lru_.erase(it->second.lru);
  disk_.erase(it);
}

void FeatureCache::to_disk(const ContentDigest& key, const CachedFeature& f) {
  const auto L = f.mask.size(0), D = f.pooled.size(0);
  const auto size = file_bytes(L, D);
  if (size > config_.disk_bytes || disk_.count(key)) return;
  while (stats_.disk_bytes + size > config_.disk_bytes) forget_on_disk(disk_lru_.back());
  std::string bytes(size, '\0');
  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.tokens = L, h.dim = D;
  char* p = bytes.data();
  std::memcpy(p, &h, sizeof h), p += sizeof h;
  std::memcpy(p, f.mask.data_ptr(), static_cast<std::size_t>(L)), p += L;
  std::memcpy(p, f.pooled.data_ptr<float>(), static_cast<std::size_t>(D) * sizeof(float)), p += D * sizeof(float);
  std::memcpy(p, f.tokens.data_ptr<float>(), static_cast<std::size_t>(L * D) * sizeof(float));
  // Written in place, without fsync: a cache, in nexusd's private directory; a file a crash cut
  // short fails from_disk's size check and is dropped.
  std::ofstream out(fs::path(config_.dir) / daemon::to_hex(key), std::ios::binary | std::ios::trunc);
  if (!out.write(bytes.data(), static_cast<std::streamsize>(bytes.size())) || !out.flush()) {
    std::error_code ec;  // a full disk: the entry is simply not kept
    fs::remove(fs::path(config_.dir) / daemon::to_hex(key), ec);
    return;
  }
  disk_lru_.push_front(key);
  disk_.emplace(key, DiskEntry{size, disk_lru_.begin()});
  stats_.disk_bytes += size, ++stats_.disk_entries;
}

std::optional<CachedFeature> FeatureCache::from_disk(const ContentDigest& key) {
  auto it = disk_.find(key);
  if (it == disk_.end()) return std::nullopt;
  const auto path = fs::path(config_.dir) / daemon::to_hex(key);
  std::ifstream in(path, std::ios::binary);
  FileHeader h{};
  const bool header = in.read(reinterpret_cast<char*>(&h), sizeof h) && std::memcmp(h.magic, kMagic, sizeof kMagic) == 0 &&
                      h.tokens > 0 && h.dim > 0 && h.tokens <= (1 << 20) && h.dim <= (1 << 16) &&
                      file_bytes(h.tokens, h.dim) == it->second.bytes;
  std::optional<CachedFeature> f;
  if (header) {
    CachedFeature c{torch::empty({h.tokens, h.dim}), torch::empty({h.dim}), torch::empty({h.tokens}, torch::kBool)};
    if (in.read(static_cast<char*>(c.mask.data_ptr()), h.tokens) &&
        in.read(reinterpret_cast<char*>(c.pooled.data_ptr<float>()), h.dim * static_cast<std::int64_t>(sizeof(float))) &&
        in.read(reinterpret_cast<char*>(c.tokens.data_ptr<float>()),
                h.tokens * h.dim * static_cast<std::int64_t>(sizeof(float))) &&
        in.peek() == std::char_traits<char>::eof())
      f = std::move(c);
  }
  if (!f) {  // cut short or not ours: forget it
    forget_on_disk(key);
    return std::nullopt;
  }
  disk_lru_.splice(disk_lru_.begin(), disk_lru_, it->second.lru);
  return f;
}

// --- the backbone's digest ------------------------------------------------------------------

ContentDigest backbone_digest(Backbone& backbone, const std::string& kind, const std::string& weights,
                              std::string_view precision) {
  daemon::ContentHasher h;
  const auto& c = backbone.config();
  h.text("nexus.backbone.v1").text(kind).text(c.name);
  if (precision != "float32") h.text("precision").text(precision);
  for (auto v : {c.image_size, c.patch, c.max_views, c.dim, c.layers, c.heads, c.mlp_ratio, c.max_tokens})
    h.number(static_cast<std::uint64_t>(v));
  if (auto* builtin = dynamic_cast<AdaptableBackbone*>(&backbone)) {
    auto add = [&](const std::string& name, const torch::Tensor& t) {
      const auto host = t.detach().to(torch::kCPU).contiguous();
      h.text(name).text(std::string(host.dtype().name())).number(static_cast<std::uint64_t>(host.dim()));
      for (auto s : host.sizes()) h.number(static_cast<std::uint64_t>(s));
      h.bytes(host.data_ptr(), host.nbytes());
    };
    for (const auto& p : builtin->module().named_parameters(true)) add(p.key(), p.value());
    for (const auto& b : builtin->module().named_buffers(true)) add(b.key(), b.value());
    return h.finish();
  }
  // A user's module: its file. Read in chunks; a file that cannot be read gives a digest of its
  // name alone, which is still a key no other backbone's entries share.
  h.text(weights);
  std::ifstream in(weights, std::ios::binary);
  std::vector<char> chunk(1 << 20);
  while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0)
    h.bytes(chunk.data(), static_cast<std::size_t>(in.gcount()));
  return h.finish();
}

}  // namespace nexus::model
