// Test support: systemd's notification socket, played by the test. nexusd is started with
// NOTIFY_SOCKET naming a datagram socket this object binds, and WATCHDOG_USEC; every datagram it
// sends (READY=1, WATCHDOG=1, STOPPING=1) is recorded with its arrival time, so a test can check
// that the watchdog was never missed. The real protocol (sd_notify), on a real socket.
#pragma once
#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace nexus::test {

class WatchdogListener {
 public:
  explicit WatchdogListener(const std::string& path);
  ~WatchdogListener();
  const std::string& path() const { return path_; }
  // The longest gap between consecutive WATCHDOG=1 pings (and from the first to now), seconds.
  double longest_gap_s() const;
  std::size_t pings() const;

 private:
  void run();
  std::string path_;
  int fd_ = -1;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::vector<std::chrono::steady_clock::time_point> pings_;  // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace nexus::test
