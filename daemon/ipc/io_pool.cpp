#include "daemon/ipc/io_pool.hpp"

#include <algorithm>

#include "daemon/log/log_text.hpp"

namespace nexus::daemon {

IoPool::IoPool(std::size_t threads) {
  try {
    for (std::size_t i = 0; i < std::max<std::size_t>(threads, 1); ++i) threads_.emplace_back([this] { run(); });
  } catch (...) {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    throw;
  }
}

IoPool::~IoPool() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    queues_.clear();
    turns_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void IoPool::post(std::uint64_t key, std::function<void()> task) {
  {
    std::lock_guard lk(mu_);
    auto& q = queues_[key];
    q.push_back(std::move(task));
    // A key enters the turns when it has work and is not running; a running key re-enters when
    // its task ends (run()), so each key has one place in the turns at most.
    if (q.size() == 1 && !running_.count(key)) turns_.push_back(key);
  }
  cv_.notify_one();
}

void IoPool::forget(std::uint64_t key) {
  std::lock_guard lk(mu_);
  queues_.erase(key);
  std::erase(turns_, key);
}

std::size_t IoPool::queued() const {
  std::lock_guard lk(mu_);
  std::size_t n = 0;
  for (const auto& [key, q] : queues_) n += q.size();
  return n;
}

void IoPool::run() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || !turns_.empty(); });
    if (stop_) return;
    const auto key = turns_.front();
    turns_.pop_front();
    auto& q = queues_.at(key);
    auto task = std::move(q.front());
    q.pop_front();
    if (q.empty()) queues_.erase(key);
    running_.insert(key);
    lk.unlock();
    try {
      task();
    } catch (const std::exception& e) {  // a task answers its own errors; this one is a bug, not a crash
      log_text(LogLevel::Error, "io_task_failed", std::string("reason=\"") + e.what() + "\"");
    } catch (...) {
      log_text(LogLevel::Error, "io_task_failed", "reason=\"unknown exception\"");
    }
    lk.lock();
    running_.erase(key);
    if (queues_.count(key)) {
      turns_.push_back(key);  // its next task waits behind the other keys' turns
      cv_.notify_one();
    }
  }
}

}  // namespace nexus::daemon
