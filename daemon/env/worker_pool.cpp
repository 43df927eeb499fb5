#include "daemon/env/worker_pool.hpp"

#include <algorithm>

namespace nexus::env {

struct WorkerPool::Batch {
  const std::function<void(std::size_t)>* fn;
  std::size_t remaining;  // GUARDED_BY(WorkerPool::mu_)
};

WorkerPool::WorkerPool(int threads) {
  for (int i = 0; i < threads; ++i)
    threads_.emplace_back([this] {
      std::unique_lock lk(mu_);
      for (;;) {
        work_cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
        if (stop_) return;
        run_one(lk, nullptr);
      }
    });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

bool WorkerPool::run_one(std::unique_lock<std::mutex>& lk, const Batch* only) {
  auto it = queue_.begin();
  if (only) it = std::find_if(queue_.begin(), queue_.end(), [&](const auto& part) { return part.first == only; });
  if (it == queue_.end()) return false;
  auto [batch, index] = *it;
  queue_.erase(it);
  lk.unlock();
  (*batch->fn)(index);
  lk.lock();
  if (--batch->remaining == 0) done_cv_.notify_all();
  return true;
}

void WorkerPool::parallel_for(std::size_t n, const std::function<void(std::size_t)>& fn) {
  if (n == 0) return;
  Batch batch{&fn, n};
  std::unique_lock lk(mu_);
  for (std::size_t i = 0; i < n; ++i) queue_.emplace_back(&batch, i);
  work_cv_.notify_all();
  auto own_queued = [&] {
    return std::any_of(queue_.begin(), queue_.end(), [&](const auto& part) { return part.first == &batch; });
  };
  while (batch.remaining > 0) {
    // Run our own queued parts, never another caller's: one tenant's hung simulator call must
    // not end up on (and stall) another tenant's thread. Then wait for our parts in flight.
    if (!run_one(lk, &batch)) done_cv_.wait(lk, [&] { return batch.remaining == 0 || own_queued(); });
  }
}

}  // namespace nexus::env
