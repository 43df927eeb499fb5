#include "daemon/ipc/output_arena.hpp"

namespace nexus::daemon {

std::optional<std::uint64_t> OutputArena::allocate(std::uint64_t bytes) {
  if (bytes == 0 || used_.size() >= kMaxBlocks) return std::nullopt;
  const std::uint64_t need = (bytes + 63) & ~std::uint64_t{63};
  if (need < bytes) return std::nullopt;  // overflow
  std::uint64_t at = 0;
  for (const auto& [offset, len] : used_) {
    if (offset - at >= need) break;
    at = offset + len;
  }
  if (at > size_ || size_ - at < need) return std::nullopt;
  used_[at] = need;
  return at;
}

bool OutputArena::release(std::uint64_t offset) { return used_.erase(offset) > 0; }

std::uint64_t OutputArena::free_bytes() const {
  std::uint64_t used = 0;
  for (const auto& [offset, len] : used_) used += len;
  return size_ - used;
}

}  // namespace nexus::daemon
