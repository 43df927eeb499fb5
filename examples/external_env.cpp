// external_env: a simulator in its own process, serving nexusd's Environment Service over the
// external-environment protocol (nexus.fbs, ExtMessage; docs/design/env-rl.md). It serves the
// built-in MuJoCo tasks (rollout/session_server.hpp), which proves the protocol; a Python LIBERO
// or ManiSkill wrapper would speak the same frames. Run it, then start nexusd with
// --external-env NAME=SOCKET; tenants open "NAME:reach". One thread per connection, which serves all the sessions nexusd opened on it
// (protocol 3, schema/ext_frame.hpp: a reset or step names its sessions, one ExtObservations
// answers them in order). Every reply carries the id of the request it answers.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include <CLI/CLI.hpp>

#include "rollout/session_server.hpp"

namespace {

nexus::rollout::ServeFaults g_faults;

// One thread per connection: answers until nexusd closes it or goes out of protocol.
void serve(int fd) {
  std::vector<std::uint8_t> buffer;
  std::string why;
  nexus::rollout::SessionServer server(g_faults);
  // The open comes at once; then a session may sit idle for as long as its tenant likes.
  for (std::chrono::milliseconds wait = std::chrono::seconds(30);;) {
    const auto* m = nexus::schema::recv_ext(fd, wait, buffer, why);
    if (!m || !server.answer(fd, *m)) break;
    wait = std::chrono::hours(24);
  }
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"external_env: built-in MuJoCo tasks served as an external environment"};
  std::string path;
  long hang_after = -1, extra_after = -1, short_after = -1, slow_ms = 0;
  std::uint32_t protocol = nexus::schema::kExtProtocol;
  app.add_option("-s,--socket", path, "Unix socket to listen on")->required();
  app.add_option("--hang-after", hang_after, "stop answering after this many steps in all (fault tests)");
  app.add_option("--extra-reply-after", extra_after, "send one reply twice after this many steps (fault tests)");
  app.add_option("--short-reply-after", short_after, "leave a session out of replies after this many steps (fault tests)");
  app.add_option("--protocol", protocol, "claim this protocol version (fault tests)");
  app.add_option("--slow-ms-per-session", slow_ms, "take this long per session named to answer a step (timeout tests)");
  CLI11_PARSE(app, argc, argv);
  g_faults.hang_after = hang_after;
  g_faults.extra_after = extra_after;
  g_faults.short_after = short_after;
  g_faults.protocol = protocol;
  g_faults.slow_ms_per_session = slow_ms;
  std::signal(SIGPIPE, SIG_IGN);
  // The socket file appears at bind(), but connects are refused until listen(). Bound under
  // this process's own name and renamed into place, `path` appears only once it accepts, so
  // whoever waits for the file (nexusd's operator, the tests) never meets that window. A path
  // too long for the staged name is bound in place.
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) {
    std::fprintf(stderr, "external_env: socket path too long (%zu bytes): %s\n", path.size(), path.c_str());
    return 2;
  }
  std::string staging = path + "." + std::to_string(::getpid());
  if (staging.size() >= sizeof(addr.sun_path)) staging = path;
  std::memcpy(addr.sun_path, staging.c_str(), staging.size() + 1);
  ::unlink(staging.c_str());
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::listen(listener, 64) != 0 || (staging != path && ::rename(staging.c_str(), path.c_str()) != 0)) {
    std::fprintf(stderr, "external_env: cannot listen on %s: %s\n", path.c_str(), std::strerror(errno));
    ::unlink(staging.c_str());
    return 1;
  }
  std::printf("external_env: serving reach and push on %s\n", path.c_str());
  std::fflush(stdout);
  for (;;) {
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::thread(serve, fd).detach();
  }
}
