#include "schema/ring.hpp"

#include <algorithm>
#include <cstring>

namespace nexus::schema {
namespace {

std::uint8_t* data_of(void* region) {
  return static_cast<std::uint8_t*>(region) + sizeof(RingControl);
}

void copy_in(std::uint8_t* data, std::uint64_t cap, std::uint64_t index, const void* src,
             std::uint64_t n) {
  const std::uint64_t pos = index & (cap - 1);
  const std::uint64_t first = std::min(n, cap - pos);
  // An empty record may come with a null source; memcpy's arguments must not be null
  // even for zero bytes (UBSan halts on it), so zero-length copies are skipped.
  if (first != 0) std::memcpy(data + pos, src, first);
  if (n != first) std::memcpy(data, static_cast<const std::uint8_t*>(src) + first, n - first);
}

void copy_out(const std::uint8_t* data, std::uint64_t cap, std::uint64_t index, void* dst,
              std::uint64_t n) {
  const std::uint64_t pos = index & (cap - 1);
  const std::uint64_t first = std::min(n, cap - pos);
  if (first != 0) std::memcpy(dst, data + pos, first);
  if (n != first) std::memcpy(static_cast<std::uint8_t*>(dst) + first, data, n - first);
}

}  // namespace

void init_ring(void* ring_region) {
  auto* c = new (ring_region) RingControl;
  c->tail.store(0, std::memory_order_relaxed);
  c->head.store(0, std::memory_order_relaxed);
  c->consumer_sleeping.store(0, std::memory_order_relaxed);
  c->producer_sleeping.store(0, std::memory_order_relaxed);
}

RingWriter::RingWriter(void* ring_region, std::uint64_t capacity)
    : ctrl_(static_cast<RingControl*>(ring_region)),
      data_(data_of(ring_region)),
      capacity_(capacity),
      tail_(0) {}

PushStatus RingWriter::try_push(std::span<const std::uint8_t> message) {
  if (message.size() > max_message()) return PushStatus::TooLarge;
  const std::uint64_t rec = record_bytes(message.size());
  const std::uint64_t head = ctrl_->head.load(std::memory_order_acquire);
  const std::uint64_t used = tail_ - head;
  if (used > capacity_) return PushStatus::PeerCorrupt;  // head ahead of tail, or wildly behind
  if (capacity_ - used < rec) return PushStatus::Full;

  const std::uint32_t len = static_cast<std::uint32_t>(message.size());
  copy_in(data_, capacity_, tail_, &len, sizeof len);
  copy_in(data_, capacity_, tail_ + 4, message.data(), message.size());
  const std::uint64_t pad = rec - 4 - message.size();
  if (pad) {
    static constexpr std::uint8_t zeros[8] = {};
    copy_in(data_, capacity_, tail_ + 4 + message.size(), zeros, pad);
  }
  tail_ += rec;
  ctrl_->tail.store(tail_, std::memory_order_release);
  return PushStatus::Ok;
}

bool RingWriter::has_space_for(std::uint64_t payload) const {
  const std::uint64_t used = tail_ - ctrl_->head.load(std::memory_order_acquire);
  return used <= capacity_ && capacity_ - used >= record_bytes(payload);
}

bool RingWriter::consumer_sleeping() const {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return ctrl_->consumer_sleeping.load(std::memory_order_relaxed) != 0;
}

void RingWriter::set_producer_sleeping(bool on) {
  ctrl_->producer_sleeping.store(on ? 1 : 0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

RingReader::RingReader(void* ring_region, std::uint64_t capacity)
    : ctrl_(static_cast<RingControl*>(ring_region)),
      data_(data_of(ring_region)),
      capacity_(capacity),
      head_(0) {}

bool RingReader::empty() const {
  return ctrl_->tail.load(std::memory_order_acquire) == head_;
}

void RingReader::drop_to(std::uint64_t tail) {
  head_ = tail;
  ctrl_->head.store(head_, std::memory_order_release);
}

PopStatus RingReader::try_pop(std::vector<std::uint8_t>& out, std::uint64_t max_message) {
  const std::uint64_t tail = ctrl_->tail.load(std::memory_order_acquire);  // read once
  const std::uint64_t avail = tail - head_;
  if (avail == 0) return PopStatus::Empty;
  if (avail > capacity_ || avail % 8 != 0) {
    drop_to(tail);
    return PopStatus::RingCorrupt;
  }
  std::uint32_t len = 0;
  copy_out(data_, capacity_, head_, &len, sizeof len);
  const std::uint64_t rec = record_bytes(len);
  if (rec > avail) {
    drop_to(tail);
    return PopStatus::BadLengthPrefix;
  }
  if (len > max_message) {
    drop_to(head_ + rec);
    return PopStatus::TooLarge;
  }
  out.resize(len);
  copy_out(data_, capacity_, head_ + 4, out.data(), len);
  drop_to(head_ + rec);
  return PopStatus::Ok;
}

void RingReader::set_consumer_sleeping(bool on) {
  ctrl_->consumer_sleeping.store(on ? 1 : 0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

bool RingReader::producer_sleeping() const {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return ctrl_->producer_sleeping.load(std::memory_order_relaxed) != 0;
}

}  // namespace nexus::schema
