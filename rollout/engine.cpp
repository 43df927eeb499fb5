#include "rollout/engine.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <thread>

namespace nexus::rollout {
namespace {

using Clock = std::chrono::steady_clock;

int connect_within(const std::string& path, std::chrono::milliseconds timeout) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) return -1;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const auto until = Clock::now() + timeout;
  for (;;) {
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) return fd;
    if (fd >= 0) ::close(fd);
    if (Clock::now() > until) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

}  // namespace

int run_engine(const EngineOptions& o, ServeFaults& faults, const std::atomic<bool>& drain) {
  const int reg = connect_within(o.socket, o.connect_timeout);
  if (reg < 0) {
    std::fprintf(stderr, "nexus-rollout: cannot reach nexusd at %s: %s\n", o.socket.c_str(), std::strerror(errno));
    return 1;
  }
  std::vector<std::string> tasks = o.tasks.empty() ? sim::task_names() : o.tasks;
  {
    flatbuffers::FlatBufferBuilder fbb(256);
    const auto hello = wire::CreateEngineHello(fbb, schema::kEngineProtocol, fbb.CreateString(o.name),
                                               fbb.CreateVectorOfStrings(tasks), o.capacity);
    std::vector<std::uint8_t> buffer;
    std::string why;
    const auto* w = schema::send_ext(reg, fbb, wire::ExtBody::EngineHello, hello.Union(), 0)
                        ? schema::recv_ext(reg, std::chrono::seconds(10), buffer, why)
                        : nullptr;
    if (!w || w->body_type() != wire::ExtBody::EngineWelcome) {
      std::fprintf(stderr, "nexus-rollout: nexusd did not welcome us (%s)\n", w ? "out of protocol" : why.c_str());
      return 1;
    }
    const auto* welcome = w->body_as_EngineWelcome();
    if (welcome->error() && welcome->error()->size() > 0) {
      std::fprintf(stderr, "nexus-rollout: nexusd refused this engine: %s\n", welcome->error()->c_str());
      return 2;
    }
    std::printf("nexus-rollout: %s attached as engine %llu (%s), %d sessions at most\n", o.name.c_str(),
                static_cast<unsigned long long>(welcome->id()),
                welcome->shared() ? "shared: serves every tenant" : "private: serves its user's tenants only",
                o.capacity);
    std::fflush(stdout);
  }
  std::map<int, SessionServer> sessions;  // our end of each session's socket pair
  std::vector<std::uint8_t> buffer;
  std::string why;
  bool drain_sent = false;
  Clock::time_point drain_started{};
  const auto leave = [&](int code, const char* how) {
    for (auto& [fd, server] : sessions) ::close(fd);
    ::close(reg);
    std::printf("nexus-rollout: %s (%ld steps served)\n", how, faults.steps.load());
    std::fflush(stdout);
    return code;
  };
  for (;;) {
    if (drain && !drain_sent) {
      flatbuffers::FlatBufferBuilder fbb(64);
      if (!schema::send_ext(reg, fbb, wire::ExtBody::EngineDrain, wire::CreateEngineDrain(fbb).Union(), 0))
        return leave(0, "nexusd is gone; leaving");
      drain_sent = true;
      drain_started = Clock::now();
      std::printf("nexus-rollout: draining (%zu sessions to move)\n", sessions.size());
      std::fflush(stdout);
    }
    if (drain_sent && Clock::now() - drain_started > o.drain_timeout)
      return leave(0, "drain timed out; the remaining sessions are cut short");
    std::vector<pollfd> fds{{reg, POLLIN, 0}};
    for (const auto& [fd, server] : sessions) fds.push_back({fd, POLLIN, 0});
    ::poll(fds.data(), fds.size(), 200);
    if (fds[0].revents) {
      std::vector<int> passed;
      const auto* m = schema::recv_ext(reg, std::chrono::seconds(5), buffer, why, &passed);
      if (!m) return leave(drain_sent ? 0 : 1, "nexusd closed the registration; leaving");
      if (m->body_type() == wire::ExtBody::EngineDrain) return leave(0, "drained: nexusd released this engine");
      if (m->body_type() == wire::ExtBody::EngineAssign && passed.size() == 1) {
        sessions.emplace(passed.front(), SessionServer(faults));
      } else {
        for (int fd : passed) ::close(fd);
        return leave(1, "nexusd sent something this engine does not understand");
      }
    }
    for (std::size_t k = 1; k < fds.size(); ++k) {
      if (!fds[k].revents) continue;
      const int fd = fds[k].fd;
      const auto* m = schema::recv_ext(fd, std::chrono::seconds(10), buffer, why);
      if (!m || !sessions.at(fd).answer(fd, *m)) {  // nexusd closed the session (or broke protocol)
        ::close(fd);
        sessions.erase(fd);
      }
    }
  }
}

}  // namespace nexus::rollout
