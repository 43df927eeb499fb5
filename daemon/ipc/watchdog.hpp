// systemd's watchdog for the reactor, pinged from a thread of its own. The reactor beats at every
// turn of its loop (it never blocks longer than max_block_ms(), a quarter of WatchdogSec); this thread
// sends WATCHDOG=1 twice per WatchdogSec only while the last beat is recent (within half of
// WatchdogSec). A reactor stuck in one call for that long is no longer vouched for, and systemd
// restarts the daemon a WatchdogSec later: a stuck reactor is noticed, while a busy one (serving
// many tenants, each event's work bounded) keeps beating. Without a watchdog (not started by
// systemd with WatchdogSec) this does nothing and starts no thread.
//
// Thread safety: beat() and max_block_ms() from the reactor thread; the rest is the watchdog's
// own thread.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace nexus::daemon {

class Watchdog {
 public:
  Watchdog();
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  void beat() {
    last_beat_ns_.store(std::chrono::steady_clock::now().time_since_epoch().count(), std::memory_order_relaxed);
  }
  bool enabled() const { return interval_.count() > 0; }
  // The longest the reactor may block waiting for events: it must beat well within the half
  // interval the watchdog allows it.
  int max_block_ms() const {
    return enabled() ? static_cast<int>(std::clamp<std::int64_t>(interval_.count() / 4000, 1, 500)) : 500;
  }

 private:
  void run();

  std::chrono::microseconds interval_{0};  // WatchdogSec, 0: none
  std::atomic<std::int64_t> last_beat_ns_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;  // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace nexus::daemon
