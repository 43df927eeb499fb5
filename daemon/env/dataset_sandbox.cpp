#include "daemon/env/dataset_sandbox.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "datasets/demo_transfer.hpp"
#include "schema/control_frame.hpp"

extern char** environ;

namespace nexus::env {
namespace {

using datasets::DatasetError;

struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) : fd(f) {}
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// The reader's memory: the file's image, what it decodes (at most max_bytes) and its transient
// buffers (bounded by the same), libhdf5's chunk cache and a largest chunk, and the process itself.
std::uint64_t memory_for(std::uint64_t file_bytes, std::uint64_t max_bytes) {
  return file_bytes + 2 * max_bytes + (768ull << 20);
}

// Only what a sanitizer build needs passes: the reader starts with no one's environment.
std::vector<std::string> reader_environment() {
  std::vector<std::string> env;
  for (char** e = environ; e && *e; ++e)
    for (const char* keep : {"ASAN_OPTIONS=", "UBSAN_OPTIONS=", "LSAN_OPTIONS="})
      if (std::strncmp(*e, keep, std::strlen(keep)) == 0) env.emplace_back(*e);
  return env;
}

// Waits for the reader to end (it exits right after its result), killing it at the deadline.
int reap(pid_t pid, std::chrono::steady_clock::time_point deadline) {
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return status;
    if (r < 0 && errno != EINTR) return 0;
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(pid, SIGKILL);
      while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
      return status;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

std::string how_it_ended(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    if (sig == SIGXCPU) return "ran out of CPU time";
    return std::string("was killed by signal ") + std::to_string(sig) + " (" + ::strsignal(sig) + ")";
  }
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  return "ended";
}

}  // namespace

std::string beside_executable(const std::string& program, const std::string& build_dir) {
  std::error_code ec;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return "";
  const auto path = self.parent_path() / program;
  if (std::filesystem::exists(path, ec)) return path.string();
  // The build tree: nexusd in daemon/, the program in its own folder.
  const auto built = self.parent_path().parent_path() / build_dir / program;
  return std::filesystem::exists(built, ec) ? built.string() : "";
}

std::string reader_beside_executable() { return beside_executable("nexus-dataset-reader", "datasets"); }

datasets::DemoFile parse_dataset(const DatasetReader& reader, int fd, const std::string& name,
                                 const datasets::ReadOptions& options) {
  if (reader.path.empty()) return datasets::read_demo_fd(fd, name, options);
  const auto deadline = std::chrono::steady_clock::now() + reader.timeout;
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw DatasetError(name + ": cannot stat: " + std::strerror(errno));
  int pair[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0)
    throw DatasetError(name + ": cannot start the dataset reader: socketpair: " + std::strerror(errno));
  Fd ours(pair[0]), theirs(pair[1]);
  // Above the descriptors the reader gets (3, 4), so that dup2 always clears close-on-exec.
  Fd file(::fcntl(fd, F_DUPFD_CLOEXEC, 10)), sock(::fcntl(theirs.fd, F_DUPFD_CLOEXEC, 10));
  if (file.fd < 0 || sock.fd < 0) throw DatasetError(name + ": cannot start the dataset reader: " + std::strerror(errno));
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, file.fd, 3);
  posix_spawn_file_actions_adddup2(&actions, sock.fd, 4);
  posix_spawn_file_actions_addclosefrom_np(&actions, 5);
  const auto env_strings = reader_environment();
  std::vector<char*> env;
  for (const auto& e : env_strings) env.push_back(const_cast<char*>(e.c_str()));
  env.push_back(nullptr);
  char* const argv[] = {const_cast<char*>(reader.path.c_str()), nullptr};
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, reader.path.c_str(), &actions, nullptr, argv, env.data());
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw DatasetError(name + ": cannot start the dataset reader " + reader.path + ": " + std::strerror(rc));
  ::close(theirs.fd), theirs.fd = -1;  // EOF reaches us when the reader ends
  ::close(sock.fd), sock.fd = -1;

  const std::uint64_t max_bytes = options.max_bytes;
  const nlohmann::json request = {
      {"name", name}, {"views", options.views}, {"state_keys", options.state_keys},
      {"image_size", options.image_size}, {"instruction", options.instruction}, {"max_bytes", max_bytes},
      {"memory_bytes", memory_for(static_cast<std::uint64_t>(st.st_size), max_bytes)},
      {"cpu_seconds", std::max<std::int64_t>(1, std::chrono::duration_cast<std::chrono::seconds>(reader.timeout).count())}};
  const auto text = request.dump();
  if (::send(ours.fd, text.data(), text.size(), MSG_NOSIGNAL) < 0) {
    const int status = reap(pid, deadline);
    throw DatasetError(name + ": the dataset reader " + how_it_ended(status) + " before it read its request");
  }
  // One result: a JSON object, with the sealed memfd when it is {"ok": true}.
  std::string reply(65536, '\0');
  Fd result;
  ssize_t got = -1;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    pollfd p{ours.fd, POLLIN, 0};
    const int ready = left.count() > 0 ? ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(left.count(), 1000))) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0 && left.count() > 0) continue;
    if (ready <= 0) {
      ::kill(pid, SIGKILL);
      reap(pid, deadline);
      throw DatasetError(name + ": the dataset reader took longer than " + std::to_string(reader.timeout.count()) +
                         " ms ([env] dataset_parse_timeout_ms) and was stopped");
    }
    std::vector<int> fds;
    got = schema::recv_with_fds(ours.fd, {reinterpret_cast<std::uint8_t*>(reply.data()), reply.size()}, 0, fds);
    if (got < 0 && errno == EINTR) continue;
    for (int received : fds) {  // the first is the result; any other is closed
      if (result.fd < 0) result.fd = received;
      else ::close(received);
    }
    break;
  }
  const int status = reap(pid, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::seconds(5)));
  if (got <= 0) throw DatasetError(name + ": the dataset reader " + how_it_ended(status) + " without a result");
  const auto j = nlohmann::json::parse(reply.substr(0, static_cast<std::size_t>(got)), nullptr, false);
  if (!j.is_object()) throw DatasetError(name + ": the dataset reader's result is not JSON");
  if (j.contains("error")) {
    const auto why = j["error"].is_string() ? j["error"].get<std::string>() : name + ": failed";
    if (j.value("too_large", false)) throw datasets::DatasetTooLarge(why);
    throw DatasetError(why);
  }
  if (result.fd < 0 || !j.value("ok", false)) throw DatasetError(name + ": the dataset reader sent no data");
  // Sealed: nobody, the reader included, can change or resize what we read.
  const int seals = ::fcntl(result.fd, F_GET_SEALS);
  constexpr int kSeals = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE;
  struct stat rst {};
  if (seals < 0 || (seals & kSeals) != kSeals || ::fstat(result.fd, &rst) != 0 || !S_ISREG(rst.st_mode))
    throw DatasetError(name + ": the dataset reader's result is not a sealed memfd");
  return datasets::read_demo_transfer(result.fd, static_cast<std::uint64_t>(rst.st_size),
                                      max_bytes > 0 ? max_bytes : (4ull << 30));
}

}  // namespace nexus::env
