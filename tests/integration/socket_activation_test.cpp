#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "nexus/client.hpp"
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
  CHECK(wait_exit(d, std::chrono::seconds(5)) == 0);
  CHECK(::access(path.c_str(), F_OK) == 0);  // systemd's socket: not ours to unlink
  CHECK_THAT(read_file(dir.path + "/log"), Catch::Contains("systemd=true"));
}
