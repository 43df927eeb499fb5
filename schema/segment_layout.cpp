#include "schema/segment_layout.hpp"

#include "schema/protocol.hpp"
#include "schema/ring.hpp"

namespace nexus::schema {
namespace {

bool add_checked(std::uint64_t& acc, std::uint64_t v) {
  if (acc > UINT64_MAX - v) return false;
  acc += v;
  return true;
}

std::optional<std::uint64_t> align_up(std::uint64_t v, std::uint64_t a) {
  if (v > UINT64_MAX - (a - 1)) return std::nullopt;
  return (v + a - 1) / a * a;
}

}  // namespace

std::uint64_t round_up_pow2(std::uint64_t n) {
  std::uint64_t p = 1;
  while (p < n && p < (1ull << 63)) p <<= 1;
  return p;
}

std::optional<SegmentLayout> SegmentLayout::compute(std::uint64_t ring_capacity,
                                                    std::uint64_t client_arena_bytes,
                                                    std::uint64_t output_arena_bytes) {
  if (ring_capacity < kMinRingBytes || ring_capacity > kMaxRingBytes ||
      (ring_capacity & (ring_capacity - 1)) != 0)
    return std::nullopt;
  auto client = align_up(client_arena_bytes, kSegmentAlign);
  auto output = align_up(output_arena_bytes, kSegmentAlign);
  auto ring_region = align_up(sizeof(RingControl) + ring_capacity, kSegmentAlign);
  if (!client || !output || !ring_region) return std::nullopt;

  SegmentLayout l;
  l.ring_capacity = ring_capacity;
  std::uint64_t at = kSegmentAlign;  // header page
  l.request_ring_offset = at;
  if (!add_checked(at, *ring_region)) return std::nullopt;
  l.response_ring_offset = at;
  if (!add_checked(at, *ring_region)) return std::nullopt;
  l.client_arena_offset = at;
  l.client_arena_bytes = *client;
  if (!add_checked(at, *client)) return std::nullopt;
  l.output_arena_offset = at;
  l.output_arena_bytes = *output;
  if (!add_checked(at, *output)) return std::nullopt;
  l.total_bytes = at;
  return l;
}

bool SegmentLayout::matches(const SegmentHeader& h) const {
  return h.magic == kSegmentMagic && h.layout_version == kSegmentLayoutVersion &&
         h.protocol_version == kProtocolVersion && h.total_bytes == total_bytes &&
         h.ring_capacity == ring_capacity && h.client_arena_bytes == client_arena_bytes &&
         h.output_arena_bytes == output_arena_bytes;
}

}  // namespace nexus::schema
