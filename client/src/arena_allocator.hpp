// First-fit allocator over the client arena with coalescing free lists. Its state lives in the
// client's private memory; the daemon never sees it (and never needs to: every request names
// its tensors by offset and length, which the daemon checks against the arena's size).
//
// Thread safety: all members are safe to call concurrently.
#pragma once
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>

namespace nexus::detail {

class ArenaAllocator {
 public:
  static constexpr std::uint64_t kAlign = 64;

  ArenaAllocator(std::uint8_t* base, std::uint64_t bytes);
  std::optional<std::uint64_t> allocate(std::uint64_t bytes);  // offset, kAlign-aligned
  void release(std::uint64_t offset);
  std::uint64_t free_bytes() const;
  std::uint8_t* base() const { return base_; }

 private:
  std::uint8_t* const base_;
  mutable std::mutex mu_;
  std::map<std::uint64_t, std::uint64_t> free_;  // offset -> size, never adjacent
  std::map<std::uint64_t, std::uint64_t> used_;  // offset -> size
};

}  // namespace nexus::detail
