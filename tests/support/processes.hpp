// Test support: real processes. Starts nexusd and tenant binaries with fork/exec, optionally as
// another Unix user, and waits for them with deadlines (a test never hangs on a child).
#pragma once
#include <sys/types.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace nexus::test {

// Paths of the built binaries (paths.cpp; compile definitions from tests/CMakeLists.txt).
std::string nexusd_path();
std::string ping_tenant_path();
std::string nexusctl_path();
std::string probe_access_path();
// The committed pretrained tiny backbone (weights/backbone-tiny.safetensors); throws if missing.
std::string tiny_weights_path();

// A fresh directory under /tmp, mode 0755, removed by the destructor.
struct TempDir {
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  std::string path;
};

struct SpawnOptions {
  std::string stdout_path;            // empty: inherit
  std::string stderr_path;            // empty: inherit
  std::optional<uid_t> uid;           // run as this user (needs root)
  std::optional<gid_t> gid;
  int listen_fd = -1;                 // pass as fd 3 with LISTEN_FDS/LISTEN_PID (socket activation)
  std::vector<std::pair<std::string, std::string>> env;  // set in the child before exec
};

pid_t spawn(const std::vector<std::string>& argv, const SpawnOptions& options = {});

// Exit status (0-255), 128+signal if killed, or nullopt if still running at the deadline.
std::optional<int> wait_exit(pid_t pid, std::chrono::milliseconds timeout);

std::string read_file(const std::string& path);
// A copy of an executable in `dir` (made 0755, and `dir` too) for a test user to run: the build
// tree may sit where other users cannot traverse (a clone under /root on a fresh machine).
std::string executable_copy(const std::string& from, const TempDir& dir);
// The last non-empty line of a file: where benchmarks put their JSON object.
std::string last_line(const std::string& path);

// nexusd on a private socket in its own temp dir. Stops it (SIGTERM, then SIGKILL) on scope exit.
class Daemon {
 public:
  // `env`: set in nexusd's environment (NOTIFY_SOCKET and WATCHDOG_USEC, say).
  explicit Daemon(std::vector<std::string> extra_args = {}, const std::string& nexusd = nexusd_path(),
                  std::vector<std::pair<std::string, std::string>> env = {});
  ~Daemon();
  Daemon(const Daemon&) = delete;

  const std::string& socket() const { return socket_; }
  pid_t pid() const { return pid_; }
  const std::string& log_path() const { return log_; }
  void kill9();
  // SIGTERM, and its exit status (nullopt if it did not exit within the timeout).
  std::optional<int> stop(std::chrono::milliseconds timeout = std::chrono::seconds(60));
  // Waits until `n` tenants are attached; false at the deadline.
  bool wait_tenants(std::size_t n, std::chrono::milliseconds timeout) const;

 private:
  TempDir dir_;
  std::string socket_, log_;
  pid_t pid_ = -1;
};

// Count of fds open in a process (those whose link target contains `needle`, if given), and of
// its mappings whose line contains `needle`.
std::size_t count_fds(pid_t pid, const std::string& needle = "");
std::size_t count_mappings(pid_t pid, const std::string& needle);
// CPU seconds (user + system) a live process has used so far: /proc/PID/stat fields 14 and 15.
double process_cpu_seconds(pid_t pid);
// A field of /proc/PID/status in kB or as a count (VmHWM, VmRSS, Threads); -1 if absent.
long process_status_field(pid_t pid, const std::string& field);
// Registrations in the process's epoll sets (the "tfd:" lines of their /proc fdinfo).
std::size_t count_epoll_registrations(pid_t pid);

// Polls `pred` until it holds or `timeout` passes; returns its last value. The default is long
// (a loaded CI machine under ASan): it costs nothing when the condition comes.
template <class Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return pred();
    ::usleep(2000);
  }
  return true;
}

// Creates (idempotently) a system user for access tests; nullopt when not root.
struct TestUser {
  uid_t uid;
  gid_t gid;
};
std::optional<TestUser> ensure_test_user(const std::string& name);

}  // namespace nexus::test
