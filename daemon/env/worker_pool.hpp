// A fixed pool of threads that runs the parts of a parallel_for. The calling thread works too
// (it takes its own parts from the queue until they are done), so parallel_for may be called from
// any thread, including concurrently from several, without deadlock and without idle callers.
// A caller never runs another caller's part: a part that hangs (an external simulator past its
// timeout) holds up a pool thread and its own caller, never an unrelated one.
//
// Written by hand rather than taken from a library: Boost.Asio's thread_pool has no
// caller-participates wait, and TBB is not among the project's dependencies for this one loop.
#pragma once
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "daemon/health/health_manager.hpp"

namespace nexus::env {

class WorkerPool {
 public:
  // health (optional): each worker is a role ("env-worker-N"); a worker whose loop dies is
  // restarted in place (tests make one throw: fault::Point::EnvWorker).
  explicit WorkerPool(int threads, daemon::HealthManager* health = nullptr);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Runs fn(0) .. fn(n - 1), spread over the pool and the caller; returns when all have run.
  // fn must not throw (catch inside: a part's failure is the caller's to report).
  void parallel_for(std::size_t n, const std::function<void(std::size_t)>& fn);
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  struct Batch;
  // Runs a queued part (of `only` if set, else any); false if there is none.
  bool run_one(std::unique_lock<std::mutex>& lk, const Batch* only);
  void start_worker(std::size_t i);  // (re)starts worker i
  void worker_loop(std::size_t i);
  daemon::HealthManager* const health_;
  std::vector<std::shared_ptr<daemon::Role>> roles_;
  std::vector<std::thread> retired_;  // GUARDED_BY(mu_): dead workers' threads, joined at the end
  std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::deque<std::pair<Batch*, std::size_t>> queue_;  // GUARDED_BY(mu_)
  bool stop_ = false;                                 // GUARDED_BY(mu_)
  bool started_ = false;                              // GUARDED_BY(mu_): the constructor is done
  std::vector<std::thread> threads_;
};

}  // namespace nexus::env
