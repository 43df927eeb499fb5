#include "processes.hpp"

#include <algorithm>

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "nexus/status.hpp"

namespace nexus::test {

TempDir::TempDir() {
  char tmpl[] = "/tmp/nexus-test-XXXXXX";
  if (!::mkdtemp(tmpl)) throw std::runtime_error("mkdtemp failed");
  path = tmpl;
  ::chmod(path.c_str(), 0755);
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
}

namespace {

// Children spawned and not yet reaped. A test that fails between spawn() and its wait leaves its
// children running, and one that inherited the test's stdout keeps CTest waiting on the pipe
// until the test's timeout: a one-line failure would read as a 300 s hang. So whatever is still
// here when the test binary exits is killed. An unreaped child (even a zombie) keeps its pid, so
// the kill cannot reach an unrelated process.
struct Unreaped {
  std::mutex mutex;
  std::set<pid_t> pids;
  ~Unreaped() {
    for (pid_t pid : pids) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
};

Unreaped& unreaped() {
  static Unreaped children;
  return children;
}

void forget(pid_t pid) {
  std::lock_guard lock(unreaped().mutex);
  unreaped().pids.erase(pid);
}

}  // namespace

pid_t spawn(const std::vector<std::string>& argv, const SpawnOptions& o) {
  Unreaped& children = unreaped();  // constructed before the first child, so destroyed after it
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    auto redirect = [](const std::string& path, int target) {
      if (path.empty()) return;
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd >= 0) {
        ::dup2(fd, target);
        ::close(fd);
      }
    };
    if (o.listen_fd >= 0) {  // what systemd does for a socket-activated service
      ::dup2(o.listen_fd, 3);
      ::setenv("LISTEN_FDS", "1", 1);
      ::setenv("LISTEN_PID", std::to_string(::getpid()).c_str(), 1);
    }
    for (const auto& [k, v] : o.env) ::setenv(k.c_str(), v.c_str(), 1);
    redirect(o.stdout_path, 1);
    redirect(o.stderr_path, 2);
    if (o.gid && (::setgroups(0, nullptr) != 0 || ::setgid(*o.gid) != 0)) ::_exit(126);
    if (o.uid && ::setuid(*o.uid) != 0) ::_exit(126);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  std::lock_guard lock(children.mutex);
  children.pids.insert(pid);
  return pid;
}

std::optional<int> wait_exit(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) {
      forget(pid);
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    if (r < 0) {
      forget(pid);
      return -1;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

std::string executable_copy(const std::string& from, const TempDir& dir) {
  const std::string to = dir.path + "/" + std::filesystem::path(from).filename().string();
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
  ::chmod(to.c_str(), 0755);
  ::chmod(dir.path.c_str(), 0755);
  return to;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

std::string last_line(const std::string& path) {
  std::istringstream lines(read_file(path));
  std::string line, last;
  while (std::getline(lines, line))
    if (!line.empty()) last = line;
  return last;
}

Daemon::Daemon(std::vector<std::string> extra, const std::string& nexusd,
               std::vector<std::pair<std::string, std::string>> env) {
  socket_ = dir_.path + "/nexusd.sock";
  log_ = dir_.path + "/nexusd.log";
  std::vector<std::string> argv = {nexusd, "--socket", socket_};
  argv.insert(argv.end(), extra.begin(), extra.end());
  // A private state directory (tenant bindings, checkpoints) unless the test names one: a
  // binding made by one test must not follow the machine into the next.
  if (std::find(extra.begin(), extra.end(), "--state-dir") == extra.end())
    argv.insert(argv.end(), {"--state-dir", dir_.path + "/state"});
  // Tests connect as other Unix users too: a socket anyone may connect to (tenant names are
  // still each bound to one uid), unless the test asks for the default 0660 and a group.
  if (std::find(extra.begin(), extra.end(), "--socket-mode") == extra.end())
    argv.insert(argv.end(), {"--socket-mode", "666"});
  pid_ = spawn(argv, {.stdout_path = log_, .stderr_path = log_, .env = std::move(env)});
  // Generous: a release nexusd loads LibTorch and the backbone first, beside CI's other tests.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      query_status(socket_, std::chrono::milliseconds(500));
      return;
    } catch (const std::exception&) {
      if (wait_exit(pid_, std::chrono::milliseconds(0))) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  throw std::runtime_error("nexusd did not come up; log:\n" + read_file(log_));
}

Daemon::~Daemon() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGTERM);
  if (!wait_exit(pid_, std::chrono::seconds(5))) {
    ::kill(pid_, SIGKILL);
    wait_exit(pid_, std::chrono::seconds(5));
  }
}

std::optional<int> Daemon::stop(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return std::nullopt;
  ::kill(pid_, SIGTERM);
  const auto status = wait_exit(pid_, timeout);
  if (status) pid_ = -1;
  return status;
}

void Daemon::kill9() {
  ::kill(pid_, SIGKILL);
  wait_exit(pid_, std::chrono::seconds(5));
  pid_ = -1;
}

bool Daemon::wait_tenants(std::size_t n, std::chrono::milliseconds timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  do {
    if (query_status(socket_).tenants.size() == n) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

std::size_t count_fds(pid_t pid, const std::string& needle) {
  std::size_t n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec)) {
    const auto target = std::filesystem::read_symlink(e.path(), ec);
    if (!ec && target.string().find(needle) != std::string::npos) ++n;
  }
  return n;
}

std::size_t count_mappings(pid_t pid, const std::string& needle) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::size_t n = 0;
  for (std::string line; std::getline(maps, line);)
    if (line.find(needle) != std::string::npos) ++n;
  return n;
}

double process_cpu_seconds(pid_t pid) {
  const std::string stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  // Field 2 (comm) may hold spaces and parentheses: count fields after its last ')'.
  std::istringstream fields(stat.substr(stat.rfind(')') + 2));
  std::string field;
  unsigned long long ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i)
    if (i >= 14) ticks += std::stoull(field);
  return static_cast<double>(ticks) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

long process_status_field(pid_t pid, const std::string& field) {
  std::istringstream in(read_file("/proc/" + std::to_string(pid) + "/status"));
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return -1;
}

std::size_t count_epoll_registrations(pid_t pid) {
  std::size_t n = 0;
  std::error_code ec;
  const std::string proc = "/proc/" + std::to_string(pid);
  for (const auto& e : std::filesystem::directory_iterator(proc + "/fd", ec)) {
    const auto target = std::filesystem::read_symlink(e.path(), ec);
    if (ec || target.string().find("eventpoll") == std::string::npos) continue;
    std::ifstream info(proc + "/fdinfo/" + e.path().filename().string());
    for (std::string line; std::getline(info, line);)
      if (line.rfind("tfd:", 0) == 0) ++n;
  }
  return n;
}

std::optional<TestUser> ensure_test_user(const std::string& name) {
  if (::geteuid() != 0) return std::nullopt;
  if (::getpwnam(name.c_str()) == nullptr) {
    const std::string cmd = "/usr/sbin/useradd --system --no-create-home --shell /usr/sbin/nologin " + name +
                            " >/dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0 && ::getpwnam(name.c_str()) == nullptr)
      throw std::runtime_error("useradd " + name + " failed");
  }
  const passwd* pw = ::getpwnam(name.c_str());
  return TestUser{pw->pw_uid, pw->pw_gid};
}

}  // namespace nexus::test
