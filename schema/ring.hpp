// Single-producer/single-consumer byte ring in shared memory, carrying length-prefixed messages.
//
// Thread safety: one RingWriter and one RingReader per ring, each used by one thread at a time
// (callers serialize). The two may live in different processes.
//
// Record format: [uint32 length][payload][zero-pad to 8 bytes]. Indices are 64-bit byte counts
// that only grow; position = index & (capacity - 1). Records wrap around the end of the data
// area; the 4-byte length never straddles it (records are 8-aligned, capacity is a power of two).
//
// Invariants an honest peer keeps (and a reader/writer checks, never assumes):
//   (1) 0 <= tail - head <= capacity, both multiples of 8;
//   (2) every record between head and tail is complete before tail is published (release store);
//   (3) each side holds its own index privately and only publishes it; the peer's index is read
//       once per operation (acquire) and bounds-checked against the privately held capacity.
// Full rings never overwrite: try_push() reports Full and the caller waits or gives up.
//
// Sleeping: a side about to block sets its *_sleeping flag, issues a seq_cst fence and re-checks
// the ring; the other side, after publishing, fences and reads the flag (Dekker pattern), so a
// wake-up is never lost. Waking is done by the caller (eventfd doorbells, schema/doorbell.hpp).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <span>
#include <vector>

namespace nexus::schema {

inline constexpr std::size_t kCacheLine = 64;

// Data-only part; lives at the start of each ring region in the segment.
struct RingControl {
  alignas(kCacheLine) std::atomic<std::uint64_t> tail;  // written by the producer only
  alignas(kCacheLine) std::atomic<std::uint64_t> head;  // written by the consumer only
  alignas(kCacheLine) std::atomic<std::uint32_t> consumer_sleeping;
  alignas(kCacheLine) std::atomic<std::uint32_t> producer_sleeping;
};
static_assert(std::atomic<std::uint64_t>::is_always_lock_free,
              "indices are shared across processes: they must not need a lock");
static_assert(std::atomic<std::uint32_t>::is_always_lock_free);
static_assert(sizeof(RingControl) == 4 * kCacheLine, "each index on its own cache line");

// Zeroes the control block of a fresh ring (daemon side, before the fd is passed).
void init_ring(void* ring_region);

inline constexpr std::uint64_t record_bytes(std::uint64_t payload) {
  return (4 + payload + 7) & ~std::uint64_t{7};
}

enum class PushStatus { Ok, Full, TooLarge, PeerCorrupt };

class RingWriter {
 public:
  RingWriter() = default;
  RingWriter(void* ring_region, std::uint64_t capacity);

  // Appends one message, or reports why not. Never overwrites unread bytes.
  PushStatus try_push(std::span<const std::uint8_t> message);
  // Largest message that can ever fit.
  std::uint64_t max_message() const { return capacity_ / 2 - 8; }

  bool consumer_sleeping() const;  // fence + load: call after try_push
  void set_producer_sleeping(bool on);
  bool has_space_for(std::uint64_t payload) const;

 private:
  RingControl* ctrl_ = nullptr;
  std::uint8_t* data_ = nullptr;
  std::uint64_t capacity_ = 0;
  std::uint64_t tail_ = 0;  // private copy; the shared one is only ever written from it
};

enum class PopStatus {
  Empty,
  Ok,
  BadLengthPrefix,  // record runs past the published bytes: everything published is dropped
  RingCorrupt,      // impossible indices: everything published is dropped
  TooLarge          // record skipped, the ring stays in sync
};

class RingReader {
 public:
  RingReader() = default;
  RingReader(void* ring_region, std::uint64_t capacity);

  // Copies the next message out of shared memory into `out` (resized). The copy is what the
  // caller verifies: the peer may keep scribbling on the ring after we read it.
  PopStatus try_pop(std::vector<std::uint8_t>& out, std::uint64_t max_message);
  bool empty() const;

  void set_consumer_sleeping(bool on);
  bool producer_sleeping() const;  // fence + load: call after try_pop
  std::uint64_t bytes_consumed() const { return head_; }

 private:
  void drop_to(std::uint64_t tail);

  RingControl* ctrl_ = nullptr;
  const std::uint8_t* data_ = nullptr;
  std::uint64_t capacity_ = 0;
  std::uint64_t head_ = 0;
};

}  // namespace nexus::schema
