// The Training Queue between an RL job's rollout producer and its actor: the only thing the two
// loops share. Bounded, so a producer that runs ahead of the actor blocks instead of piling up
// records that would be stale by the time they are used (the bound is what keeps staleness
// small; max_staleness is what is done about the rest, by the actor).
//
// Torch-free and generic over the record type so that its rules are tested without a model.
// Thread safety: any thread; close() wakes every waiter.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <optional>

#include "daemon/sync/mutex.hpp"

namespace nexus::rl {

template <class Record>
class TrainingQueue {
 public:
  explicit TrainingQueue(std::size_t capacity) : capacity_(capacity == 0 ? 1 : capacity) {}

  // Blocks while full; false (record dropped) once the queue is closed.
  bool push(Record r) {
    MutexLock lk(mu_);
    while (!closed_ && items_.size() >= capacity_) space_.wait(lk.native());
    if (closed_) return false;
    items_.push_back(std::move(r));
    ready_.notify_one();
    return true;
  }

  // Blocks until a record is there; nullopt once closed and drained.
  std::optional<Record> pop() {
    MutexLock lk(mu_);
    while (!closed_ && items_.empty()) ready_.wait(lk.native());
    if (items_.empty()) return std::nullopt;
    Record r = std::move(items_.front());
    items_.pop_front();
    space_.notify_one();
    return r;
  }

  void close() {
    MutexLock lk(mu_);
    closed_ = true;
    space_.notify_all();
    ready_.notify_all();
  }

  std::size_t depth() const {
    MutexLock lk(mu_);
    return items_.size();
  }

 private:
  const std::size_t capacity_;
  mutable Mutex mu_;
  std::condition_variable space_, ready_;
  std::deque<Record> items_ NEXUS_GUARDED_BY(mu_);
  bool closed_ NEXUS_GUARDED_BY(mu_) = false;
};

// What the actor does with a record `age` versions older than the policy it would update.
enum class StalePolicy { Drop, Downweight };
struct Staleness {
  int max_staleness = 2;
  StalePolicy policy = StalePolicy::Drop;
};
// The weight of a record's loss: 1 within max_staleness; beyond it 0 (drop) or halved for each
// version past the bound (downweight).
inline double staleness_weight(const Staleness& s, long age) {
  if (age <= s.max_staleness) return 1.0;
  if (s.policy == StalePolicy::Drop) return 0.0;
  double w = 1.0;
  for (long i = s.max_staleness; i < age && w > 1e-6; ++i) w *= 0.5;
  return w;
}

}  // namespace nexus::rl
