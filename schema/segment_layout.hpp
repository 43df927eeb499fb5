// Binary layout of a tenant's shared-memory segment (one per attached tenant).
//
//   [SegmentHeader | pad to 4 KiB]
//   [request ring:  RingControl + capacity bytes]   client -> daemon
//   [response ring: RingControl + capacity bytes]   daemon -> client
//   [client arena  (page aligned)]                  tensors the client writes in place
//   [output arena  (page aligned)]                  tensors the daemon writes
//
// The daemon writes the header once before passing the fd; neither side trusts it afterwards:
// each computes the layout with SegmentLayout::compute() from values it holds itself and only
// compares against the header.
#pragma once
#include <cstdint>
#include <optional>
#include <type_traits>

namespace nexus::schema {

inline constexpr std::uint64_t kSegmentMagic = 0x3153554e58454e00ull;  // "\0NEXUNS1"
inline constexpr std::uint32_t kSegmentLayoutVersion = 1;
inline constexpr std::uint64_t kSegmentAlign = 4096;

struct SegmentHeader {
  std::uint64_t magic;
  std::uint32_t layout_version;
  std::uint32_t protocol_version;
  std::uint64_t session_id;
  std::uint64_t total_bytes;
  std::uint64_t ring_capacity;
  std::uint64_t client_arena_bytes;
  std::uint64_t output_arena_bytes;
};
static_assert(std::is_trivially_copyable_v<SegmentHeader>, "lives in shared memory");
static_assert(sizeof(SegmentHeader) <= kSegmentAlign);

struct SegmentLayout {
  std::uint64_t ring_capacity = 0;  // per ring, power of two
  std::uint64_t request_ring_offset = 0;
  std::uint64_t response_ring_offset = 0;
  std::uint64_t client_arena_offset = 0;
  std::uint64_t client_arena_bytes = 0;
  std::uint64_t output_arena_offset = 0;
  std::uint64_t output_arena_bytes = 0;
  std::uint64_t total_bytes = 0;

  // nullopt when ring_capacity is not a power of two within [kMinRingBytes, kMaxRingBytes]
  // or the sum overflows. Arenas are rounded up to kSegmentAlign.
  static std::optional<SegmentLayout> compute(std::uint64_t ring_capacity,
                                              std::uint64_t client_arena_bytes,
                                              std::uint64_t output_arena_bytes);

  bool matches(const SegmentHeader& h) const;
};

// Smallest power of two >= n (n > 0), saturating at 2^63.
std::uint64_t round_up_pow2(std::uint64_t n);

}  // namespace nexus::schema
