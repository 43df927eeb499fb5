#include "arena_allocator.hpp"

#include <iterator>

namespace nexus::detail {

ArenaAllocator::ArenaAllocator(std::uint8_t* base, std::uint64_t bytes) : base_(base) {
  if (bytes >= kAlign) free_.emplace(0, bytes / kAlign * kAlign);
}

std::optional<std::uint64_t> ArenaAllocator::allocate(std::uint64_t bytes) {
  if (bytes > UINT64_MAX - kAlign) return std::nullopt;
  const std::uint64_t size = bytes == 0 ? kAlign : (bytes + kAlign - 1) / kAlign * kAlign;
  std::lock_guard lock(mu_);
  for (auto it = free_.begin(); it != free_.end(); ++it) {
    if (it->second < size) continue;
    const std::uint64_t offset = it->first, left = it->second - size;
    free_.erase(it);
    if (left) free_.emplace(offset + size, left);
    used_.emplace(offset, size);
    return offset;
  }
  return std::nullopt;
}

void ArenaAllocator::release(std::uint64_t offset) {
  std::lock_guard lock(mu_);
  auto u = used_.find(offset);
  if (u == used_.end()) return;
  std::uint64_t start = offset, size = u->second;
  used_.erase(u);
  auto next = free_.lower_bound(start);
  if (next != free_.end() && start + size == next->first) {
    size += next->second;
    next = free_.erase(next);
  }
  if (next != free_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      free_.erase(prev);
    }
  }
  free_.emplace(start, size);
}

std::uint64_t ArenaAllocator::free_bytes() const {
  std::lock_guard lock(mu_);
  std::uint64_t total = 0;
  for (const auto& [o, s] : free_) total += s;
  return total;
}

}  // namespace nexus::detail
