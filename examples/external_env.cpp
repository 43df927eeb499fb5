// external_env: a simulator in its own process, serving nexusd's Environment Service over the
// external-environment protocol (nexus.fbs, ExtMessage; docs/design/env-rl.md). It serves the
// built-in MuJoCo tasks, which proves the protocol; a Python LIBERO or ManiSkill wrapper would
// speak the same frames. Run it, then start nexusd with --external-env NAME=SOCKET; tenants open
// "NAME:reach". One thread per connection; one connection per session. Every reply carries the id
// of the request it answers (protocol 2, schema/ext_frame.hpp).
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <thread>

#include <CLI/CLI.hpp>

#include "schema/ext_frame.hpp"
#include "sim/task.hpp"

namespace {

using nexus::schema::recv_ext;
using nexus::schema::send_ext;
namespace wire = nexus::wire;

bool send_observation(int fd, std::uint64_t id, nexus::sim::Task* task, nexus::sim::StepResult r,
                      const std::string& error, bool bad_input) {
  flatbuffers::FlatBufferBuilder fbb(16 * 1024);
  std::vector<std::uint8_t> image;
  std::vector<float> state;
  if (error.empty()) {
    image = task->render();
    state = task->proprio();
  }
  auto body = wire::CreateExtObservation(fbb, r.reward, r.done, r.success, fbb.CreateVector(image),
                                         fbb.CreateVector(state), fbb.CreateString(task ? task->instruction() : ""),
                                         fbb.CreateString(error), bad_input, r.truncated);
  return send_ext(fd, fbb, wire::ExtBody::ExtObservation, body.Union(), id);
}

// Fault tests: --hang-after N stops answering after N steps in all (a simulator that hangs);
// --extra-reply-after N sends one reply twice after N steps (a buggy one); --protocol P claims
// another protocol version.
std::atomic<long> g_hang_after{-1}, g_extra_after{-1};
std::atomic<long> g_steps{0};
std::uint32_t g_protocol = nexus::schema::kExtProtocol;

void serve(int fd) {
  std::vector<std::uint8_t> buffer;
  std::string why;
  std::unique_ptr<nexus::sim::Task> task;
  const auto* m = recv_ext(fd, std::chrono::seconds(30), buffer, why);
  if (m && m->body_type() == wire::ExtBody::ExtOpen) {
    const auto* o = m->body_as_ExtOpen();
    flatbuffers::FlatBufferBuilder fbb(256);
    try {
      task = nexus::sim::make_task(o->task() ? o->task()->str() : "",
                                   {.image_size = o->image_size(), .max_steps = o->max_steps()});
      send_ext(fd, fbb, wire::ExtBody::ExtSpec,
               wire::CreateExtSpec(fbb, task->image_size(), nexus::sim::Task::kStateDim, nexus::sim::Task::kActionDim,
                                   task->max_steps(), 0, g_protocol)
                   .Union(),
               m->id());
    } catch (const std::exception& e) {
      send_ext(fd, fbb, wire::ExtBody::ExtSpec,
               wire::CreateExtSpec(fbb, 0, 0, 0, 0, fbb.CreateString(e.what()), g_protocol).Union(), m->id());
    }
  }
  while (task) {
    m = recv_ext(fd, std::chrono::hours(24), buffer, why);
    if (!m) break;  // nexusd closed the session
    const auto id = m->id();
    if (m->body_type() == wire::ExtBody::ExtReset) {
      task->reset(m->body_as_ExtReset()->seed());
      if (!send_observation(fd, id, task.get(), {}, "", false)) break;
    } else if (m->body_type() == wire::ExtBody::ExtStep) {
      const long step_no = g_steps++;
      if (g_hang_after >= 0 && step_no >= g_hang_after)
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));  // hung: never answers again
      const auto* a = m->body_as_ExtStep()->action();
      try {
        const auto r = task->step(a ? std::span<const float>(a->data(), a->size()) : std::span<const float>{});
        if (!send_observation(fd, id, task.get(), r, "", false)) break;
        if (g_extra_after >= 0 && step_no + 1 >= g_extra_after && g_extra_after.exchange(-1) >= 0)
          send_observation(fd, id, task.get(), r, "", false);  // the same reply again, unasked
      } catch (const nexus::sim::TaskError& e) {
        if (!send_observation(fd, id, task.get(), {}, e.what(), true)) break;
      }
    } else {
      break;
    }
  }
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"external_env: built-in MuJoCo tasks served as an external environment"};
  std::string path;
  long hang_after = -1, extra_after = -1;
  app.add_option("-s,--socket", path, "Unix socket to listen on")->required();
  app.add_option("--hang-after", hang_after, "stop answering after this many steps in all (fault tests)");
  app.add_option("--extra-reply-after", extra_after, "send one reply twice after this many steps (fault tests)");
  app.add_option("--protocol", g_protocol, "claim this protocol version (fault tests)");
  CLI11_PARSE(app, argc, argv);
  g_hang_after = hang_after;
  g_extra_after = extra_after;
  std::signal(SIGPIPE, SIG_IGN);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) return 2;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  ::unlink(path.c_str());
  const int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(listener, 64) != 0) {
    std::fprintf(stderr, "external_env: cannot listen on %s: %s\n", path.c_str(), std::strerror(errno));
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
