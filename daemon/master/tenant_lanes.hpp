// One lane per tenant for the Master's blocking work (environment steps, dataset loads, job
// control): a tenant's tasks run in order on its own thread, so one tenant's slow or hung call
// (an 8 GiB dataset, a simulator past its timeout) holds up that tenant alone.
//
// A lane's thread starts with its tenant's first task and ends when the tenant detaches (its
// queued tasks are dropped: nobody waits for their answers) or the lanes are destroyed.
// Bounded: the reactor caps each tenant's requests in flight, and the Master's tenants.
//
// Thread safety: post() and close() from any thread; the destructor waits for every lane.
#pragma once
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace nexus::daemon {

class TenantLanes {
 public:
  TenantLanes() = default;
  ~TenantLanes();
  TenantLanes(const TenantLanes&) = delete;
  TenantLanes& operator=(const TenantLanes&) = delete;

  void post(const std::string& tenant, std::function<void()> task);
  // Drops the tenant's queued tasks and lets its thread end after the task in progress.
  void close(const std::string& tenant);
  std::size_t lanes() const;

 private:
  struct Lane {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> tasks;  // GUARDED_BY(mu)
    bool closing = false;                     // GUARDED_BY(mu)
    bool finished = false;                    // GUARDED_BY(mu)
    std::thread thread;
  };
  static void run(Lane& lane);
  void reap();  // holds mu_: joins retired lanes that have finished

  mutable std::mutex mu_;
  std::map<std::string, std::shared_ptr<Lane>> lanes_;  // GUARDED_BY(mu_)
  std::vector<std::shared_ptr<Lane>> retired_;          // GUARDED_BY(mu_)
};

}  // namespace nexus::daemon
