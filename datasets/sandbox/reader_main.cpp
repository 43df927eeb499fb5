// nexus-dataset-reader: parses one tenant's demonstration file for nexusd, in a sandbox, so that
// libhdf5 never parses a tenant's bytes inside the daemon. nexusd starts one per dataset load
// (env/dataset_sandbox.cpp) with:
//   fd 3  the tenant's file (the descriptor the tenant sent; read-only)
//   fd 4  a SOCK_SEQPACKET socket to nexusd: one request in, one result out
// The request is a JSON object: name (for messages), views, state_keys, image_size, instruction,
// max_bytes (what is left of the tenant's quota: the most the result may hold), memory_bytes and
// cpu_seconds (its limits). The reader makes a memfd, enters the sandbox (sandbox.hpp), reads the
// file with the same checking reader as ever (datasets/demo_file.hpp, bounded by max_bytes),
// writes the result into the memfd (demo_transfer.hpp), seals it against any change, and sends
// it with {"ok": true}; or sends {"error": "..."}. Then it exits 0. Any other end (a crash, a
// limit, nexusd's deadline) fails that load alone, with a typed error.
//
//   nexus-dataset-reader --check-sandbox    enters the sandbox and tries what it must not do:
//                                           one JSON line of what was refused; exit 0 if all was.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "datasets/demo_transfer.hpp"
#include "datasets/hdf5_handles.hpp"
#include "datasets/sandbox/sandbox.hpp"

namespace {

using nexus::datasets::DatasetError;
constexpr int kFileFd = 3, kSocketFd = 4;

void send_result(const nlohmann::json& result, int memfd = -1) {
  const auto text = result.dump();
  iovec iov{const_cast<char*>(text.data()), text.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (memfd >= 0) {
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(c), &memfd, sizeof memfd);
  }
  while (::sendmsg(kSocketFd, &msg, MSG_NOSIGNAL) < 0 && errno == EINTR) {
  }
}

// Sends the result and ends the process with _exit, as every end inside the filter must (see
// check_sandbox).
[[noreturn]] void finish(const nlohmann::json& result, int memfd = -1) {
  send_result(result, memfd);
  ::_exit(0);
}

std::vector<std::string> strings(const nlohmann::json& j, const char* key) {
  std::vector<std::string> out;
  if (j.contains(key) && j[key].is_array())
    for (const auto& s : j[key])
      if (s.is_string()) out.push_back(s.get<std::string>());
  return out;
}

// What the sandbox must refuse, tried from inside it.
int check_sandbox() {
  const std::string error = nexus::datasets::sandbox::enter({1ull << 30, 10, 1 << 20});
  if (!error.empty()) {
    std::printf("{\"sandbox\": false, \"error\": \"%s\"}\n", error.c_str());
    return 1;
  }
  const bool open_refused = ::open("/etc/passwd", O_RDONLY | O_CLOEXEC) < 0;
  const bool create_refused = ::open("/tmp/nexus-sandbox-probe", O_WRONLY | O_CREAT | O_CLOEXEC, 0600) < 0;
  const bool socket_refused = ::socket(AF_INET, SOCK_STREAM, 0) < 0 && ::socket(AF_UNIX, SOCK_STREAM, 0) < 0;
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  if (child > 0) ::waitpid(child, nullptr, 0);
  const bool fork_refused = child < 0;
  char* const argv[] = {const_cast<char*>("/bin/true"), nullptr};
  const bool exec_refused = ::execv("/bin/true", argv) < 0;  // returns only if refused
  const bool all = open_refused && create_refused && socket_refused && fork_refused && exec_refused;
  std::printf("{\"sandbox\": true, \"open_refused\": %s, \"create_refused\": %s, \"socket_refused\": %s, "
              "\"fork_refused\": %s, \"exec_refused\": %s}\n",
              open_refused ? "true" : "false", create_refused ? "true" : "false", socket_refused ? "true" : "false",
              fork_refused ? "true" : "false", exec_refused ? "true" : "false");
  std::fflush(stdout);
  ::_exit(all ? 0 : 1);  // nothing to clean up; and a sanitizer's exit-time checks would need what the filter refuses
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--check-sandbox") == 0) return check_sandbox();
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives nexusd
  char buf[16384];
  ssize_t n;
  while ((n = ::recv(kSocketFd, buf, sizeof buf, 0)) < 0 && errno == EINTR) {
  }
  if (n <= 0) return 2;
  const auto req = nlohmann::json::parse(std::string(buf, static_cast<std::size_t>(n)), nullptr, false);
  if (!req.is_object()) return 2;
  const std::string name = req.value("name", std::string("dataset"));
  nexus::datasets::ReadOptions options;
  options.views = strings(req, "views");
  options.state_keys = strings(req, "state_keys");
  options.image_size = req.value("image_size", std::int64_t{0});
  options.instruction = req.value("instruction", std::string());
  options.max_bytes = req.value("max_bytes", std::uint64_t{0});
  const std::uint64_t memory = req.value("memory_bytes", std::uint64_t{0});
  const std::uint64_t cpu = req.value("cpu_seconds", std::uint64_t{60});

  // Before the filter: what needs a system call it refuses (libhdf5's start-up, the memfd).
  nexus::datasets::detail::quiet_hdf5();
  H5open();
  const int memfd = ::memfd_create("nexus-dataset", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (memfd < 0) finish({{"error", std::string("memfd_create: ") + std::strerror(errno)}});
  const auto error = nexus::datasets::sandbox::enter({memory, cpu, options.max_bytes + (1 << 20)});
  if (!error.empty()) finish({{"error", "the reader's sandbox: " + error}});
  try {
    const auto file = nexus::datasets::read_demo_fd(kFileFd, name, options);
    nexus::datasets::write_demo_transfer(memfd, file);
  } catch (const nexus::datasets::DatasetTooLarge& e) {
    finish({{"error", e.what()}, {"too_large", true}});
  } catch (const DatasetError& e) {
    finish({{"error", e.what()}});
  } catch (const std::bad_alloc&) {
    finish({{"error", name + ": reading it took more memory than the reader may use"}, {"too_large", true}});
  } catch (const std::exception& e) {
    finish({{"error", name + ": " + e.what()}});
  }
  if (::fcntl(memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0)
    finish({{"error", std::string("sealing the result: ") + std::strerror(errno)}});
  finish({{"ok", true}}, memfd);
}
