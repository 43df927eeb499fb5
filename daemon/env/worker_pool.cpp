#include "daemon/env/worker_pool.hpp"

#include <algorithm>
#include <stdexcept>
#include <system_error>

#include "daemon/fault/fault_plan.hpp"
#include "daemon/log/log_text.hpp"

namespace nexus::env {

struct WorkerPool::Batch {
  const std::function<void(std::size_t)>* fn;
  std::size_t remaining;  // GUARDED_BY(WorkerPool::mu_)
};

WorkerPool::WorkerPool(int threads, daemon::HealthManager* health) : health_(health) {
  threads_.resize(static_cast<std::size_t>(std::max(0, threads)));
  for (std::size_t i = 0; i < threads_.size(); ++i) {
    if (health_)
      roles_.push_back(health_->add("env-worker-" + std::to_string(i), std::chrono::milliseconds(0),
                                    [this, i] { start_worker(i); }));
    start_worker(i);
  }
  std::lock_guard lk(mu_);
  started_ = true;
}

// At construction, and by the Health Manager after worker i's loop died.
void WorkerPool::start_worker(std::size_t i) {
  std::lock_guard lk(mu_);
  if (stop_) return;
  if (threads_[i].joinable()) retired_.push_back(std::move(threads_[i]));
  try {
    threads_[i] = std::thread([this, i] { worker_loop(i); });
  } catch (const std::system_error& e) {  // no thread to be had: the callers step their sessions themselves
    if (!started_) throw;                   // at start: nexusd cannot run
    daemon::log_text(daemon::LogLevel::Error, "env_worker_restart_failed", std::string("reason=\"") + e.what() + "\"");
  }
}

void WorkerPool::worker_loop(std::size_t i) {
  try {
    std::unique_lock lk(mu_);
    for (;;) {
      work_cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      if (daemon::fault::at(daemon::fault::Point::EnvWorker) == daemon::fault::Action::Throw)
        throw std::runtime_error("injected fault: an environment worker threw");
      run_one(lk, nullptr);
    }
  } catch (const std::exception& e) {  // a part never throws (parallel_for's contract): the loop did
    if (i < roles_.size()) roles_[i]->failed(e.what());
  } catch (...) {
    if (i < roles_.size()) roles_[i]->failed("unknown exception");
  }
}

WorkerPool::~WorkerPool() {
  for (auto& r : roles_) health_->remove(r);
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : threads_)
    if (t.joinable()) t.join();
  for (auto& t : retired_) t.join();
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
