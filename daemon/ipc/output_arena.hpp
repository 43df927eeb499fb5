// The daemon's allocator for a tenant's output arena, where replies too large for the response
// ring are written (nexus.fbs, OutputReply). Its state lives here, in daemon memory: the tenant
// can scribble over the arena's bytes (harming only its own replies) but not over our
// bookkeeping. First fit over 64-byte-aligned blocks, at most kMaxBlocks outstanding.
//
// Thread safety: owned by the reactor thread (with its TenantSession).
#pragma once
#include <cstdint>
#include <map>
#include <optional>

namespace nexus::daemon {

class OutputArena {
 public:
  static constexpr std::size_t kMaxBlocks = 64;
  explicit OutputArena(std::uint64_t bytes) : size_(bytes) {}

  // The offset of `bytes` free bytes, or nullopt if they do not fit (or too many are out).
  std::optional<std::uint64_t> allocate(std::uint64_t bytes);
  // Frees the block at `offset`; false (and nothing happens) if no block starts there.
  bool release(std::uint64_t offset);
  std::uint64_t free_bytes() const;
  std::uint64_t size() const { return size_; }

 private:
  const std::uint64_t size_;
  std::map<std::uint64_t, std::uint64_t> used_;  // offset -> bytes (aligned)
};

}  // namespace nexus::daemon
