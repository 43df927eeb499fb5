// The transport's slow work, off the reactor: tasks whose cost grows with a tenant's data (a
// digest of up to its whole arena) or with a disk (the metrics textfile) run here, on a fixed
// set of threads, so that the reactor only ever does work bounded per event.
//
// Fairness: tasks are queued per key (a tenant's session; 0 for the daemon's own), run in order
// within a key and at most one at a time per key, and the keys with work take turns. A tenant
// that floods the pool holds one thread at most; the queue it may build is bounded by its
// requests in flight (the reactor's max_in_flight), not here.
//
// Thread safety: post() and forget() from any thread. The destructor drops what is queued and
// joins the threads (a task in progress finishes).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace nexus::daemon {

class IoPool {
 public:
  explicit IoPool(std::size_t threads);  // throws std::system_error if a thread cannot start
  ~IoPool();
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;

  void post(std::uint64_t key, std::function<void()> task);
  void forget(std::uint64_t key);  // drops the key's queued tasks (its tenant left)
  std::size_t queued() const;

 private:
  void run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::uint64_t, std::deque<std::function<void()>>> queues_;  // GUARDED_BY(mu_): non-empty only
  std::deque<std::uint64_t> turns_;                                    // GUARDED_BY(mu_): keys with work, not running
  std::set<std::uint64_t> running_;                                    // GUARDED_BY(mu_)
  bool stop_ = false;                                                  // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;
};

}  // namespace nexus::daemon
