#include "daemon/ipc/watchdog.hpp"

#include <systemd/sd-daemon.h>

#include <algorithm>

#include "daemon/log/log_text.hpp"

namespace nexus::daemon {

Watchdog::Watchdog() {
  beat();
  std::uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return;
  interval_ = std::chrono::microseconds(usec);
  thread_ = std::thread([this] { run(); });
}

Watchdog::~Watchdog() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::run() {
  using namespace std::chrono;
  // Twice per interval, and at least every second; the reactor must have beaten within half of it.
  const auto every = std::min<microseconds>(interval_ / 2, seconds(1));
  const auto stale_after = duration_cast<nanoseconds>(interval_ / 2);
  bool withheld = false;
  std::unique_lock lk(mu_);
  while (!cv_.wait_for(lk, every, [&] { return stop_; })) {
    const auto since = nanoseconds(steady_clock::now().time_since_epoch().count() - last_beat_ns_.load(std::memory_order_relaxed));
    if (since < stale_after) {
      sd_notify(0, "WATCHDOG=1");
      if (withheld) log_text(LogLevel::Warn, "reactor_resumed", "");
      withheld = false;
    } else if (!withheld) {
      withheld = true;  // logged once per stall; systemd restarts us if it lasts
      log_text(LogLevel::Error, "reactor_stalled",
               "seconds=" + std::to_string(duration<double>(since).count()) + " watchdog=withheld");
    }
  }
}

}  // namespace nexus::daemon
