#include <catch2/catch.hpp>

#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "nexus/client.hpp"
#include "nexus/status.hpp"
#include "processes.hpp"

using namespace nexus::test;

TEST_CASE("nexusd serves a listening socket passed by systemd (sd_listen_fds)", "[integration]") {
  TempDir dir;
  const std::string path = dir.path + "/activated.sock";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  std::strcpy(a.sun_path, path.c_str());
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
  REQUIRE(::listen(fd, 16) == 0);
  // --socket names a path nexusd must NOT bind: the passed socket wins.
  const pid_t d = spawn({nexusd_path(), "--socket", dir.path + "/unused.sock", "--state-dir", dir.path + "/state"},
                        {.stderr_path = dir.path + "/log", .listen_fd = fd});
  ::close(fd);
  auto client = nexus::Client::attach({.socket_path = path, .tenant = "activated"});
  std::vector<std::uint8_t> p = {1, 2, 3};
  CHECK(client->ping(p) == p);
  CHECK(::access((dir.path + "/unused.sock").c_str(), F_OK) != 0);
  client.reset();
  ::kill(d, SIGTERM);
  CHECK(wait_exit(d, std::chrono::seconds(30)) == 0);
  CHECK(::access(path.c_str(), F_OK) == 0);  // systemd's socket: not ours to unlink
  CHECK_THAT(read_file(dir.path + "/log"), Catch::Contains("systemd=true"));
}

// A script or client that waits for the socket file must find it accepting, with the mode and
// group it was configured for. Polled as tightly as a loop can across several starts, a socket
// bound but not yet listening (connects refused) or not yet given its group would be seen here:
// before nexusd bound it in a staging directory and linked it into place, the first start was
// refused and showed root's group. (The mode is set at bind either way.) A SIGTERM as soon
// as the socket appears (the backbone still loading) is a clean exit that unlinks it: before the
// handler was installed ahead of the socket, the default action killed nexusd and left the file.
TEST_CASE("nexusd's socket path appears only once it accepts connections, with its mode and group", "[integration]") {
  TempDir dir;
  // Always named: the default group (nexus) may exist here. As root, a group other than
  // nexusd's own, so a file seen before it was given its group would show.
  const group* nogroup = ::getgrnam("nogroup");
  const group* own = ::getgrgid(::getegid());
  REQUIRE((nogroup != nullptr || own != nullptr));
  const group* chosen = nogroup != nullptr && ::geteuid() == 0 ? nogroup : own;
  const std::string group = chosen->gr_name;
  const gid_t gid = chosen->gr_gid;
  for (int start = 0; start < 8; ++start) {
    const std::string path = dir.path + "/nexusd-" + std::to_string(start) + ".sock";
    const pid_t d = spawn({nexusd_path(), "--socket", path, "--socket-mode", "660", "--socket-group", group,
                           "--state-dir", dir.path + "/state"},
                          {.stderr_path = dir.path + "/log"});
    struct stat st {};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    bool seen = false;
    // Spin without sleeping: the window between bind and listen is microseconds wide.
    for (long polls = 0; !(seen = ::lstat(path.c_str(), &st) == 0); ++polls)
      if (polls % 4096 == 0 && std::chrono::steady_clock::now() > deadline) break;
    REQUIRE(seen);
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    std::strcpy(a.sun_path, path.c_str());
    const int connected = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    const int why = errno;
    ::close(fd);
    INFO("start " << start << ": " << (connected == 0 ? "connected" : std::strerror(why)));
    CHECK(connected == 0);
    CHECK(st.st_gid == gid);
    CHECK((st.st_mode & 0777) == 0660);
    ::kill(d, SIGTERM);
    REQUIRE(wait_exit(d, std::chrono::seconds(60)) == 0);
    CHECK(::access(path.c_str(), F_OK) != 0);  // ours: unlinked at exit
  }
  // Nothing staged is left behind: the directory holds the state dir and the log only.
  std::vector<std::string> left;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path)) left.push_back(entry.path().filename());
  std::sort(left.begin(), left.end());
  CHECK(left == std::vector<std::string>{"log", "state"});
}

// A second nexusd on the path of a live one is refused with a clear error; the first keeps its
// socket and serves on (staging and linking must never replace a live socket).
TEST_CASE("a second nexusd on a live daemon's socket path is refused, and the first serves on", "[integration]") {
  TempDir dir;
  Daemon first;
  const pid_t second = spawn({nexusd_path(), "--socket", first.socket(), "--state-dir", dir.path + "/state"},
                             {.stderr_path = dir.path + "/log"});
  const auto rc = wait_exit(second, std::chrono::seconds(60));
  REQUIRE(rc.has_value());
  CHECK(*rc != 0);
  CHECK_THAT(read_file(dir.path + "/log"), Catch::Contains("another nexusd is listening on " + first.socket()));
  auto client = nexus::Client::attach({.socket_path = first.socket(), .tenant = "still-served"});
  std::vector<std::uint8_t> p = {4, 5, 6};
  CHECK(client->ping(p) == p);
  CHECK(nexus::query_status(first.socket()).pid == first.pid());
}
