#include "daemon/env/worker_pool.hpp"

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
        run_one(lk);
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

bool WorkerPool::run_one(std::unique_lock<std::mutex>& lk) {
  if (queue_.empty()) return false;
  auto [batch, index] = queue_.front();
  queue_.pop_front();
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
  while (batch.remaining > 0) {
    // Help with whatever is queued (ours or another caller's), then wait for parts in flight.
    if (!run_one(lk)) done_cv_.wait(lk, [&] { return batch.remaining == 0 || !queue_.empty(); });
  }
}

}  // namespace nexus::env
