#include "watchdog_listener.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <stdexcept>

namespace nexus::test {

WatchdogListener::WatchdogListener(const std::string& path) : path_(path) {
  fd_ = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (fd_ < 0 || path.size() >= sizeof addr.sun_path) throw std::runtime_error("notify socket: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ::unlink(path.c_str());
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0)
    throw std::runtime_error("bind " + path + ": " + std::strerror(errno));
  ::chmod(path.c_str(), 0666);
  thread_ = std::thread([this] { run(); });
}

WatchdogListener::~WatchdogListener() {
  stop_ = true;
  thread_.join();
  ::close(fd_);
  ::unlink(path_.c_str());
}

void WatchdogListener::run() {
  char buf[4096];
  while (!stop_) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
    if (n <= 0) continue;
    if (std::string(buf, static_cast<std::size_t>(n)).find("WATCHDOG=1") != std::string::npos) {
      std::lock_guard lk(mu_);
      pings_.push_back(std::chrono::steady_clock::now());
    }
  }
}

double WatchdogListener::longest_gap_s() const {
  std::lock_guard lk(mu_);
  double longest = 0;
  for (std::size_t i = 1; i < pings_.size(); ++i)
    longest = std::max(longest, std::chrono::duration<double>(pings_[i] - pings_[i - 1]).count());
  if (!pings_.empty())
    longest = std::max(longest, std::chrono::duration<double>(std::chrono::steady_clock::now() - pings_.back()).count());
  return longest;
}

std::size_t WatchdogListener::pings() const {
  std::lock_guard lk(mu_);
  return pings_.size();
}

}  // namespace nexus::test
