// external_env: a simulator in its own process, serving nexusd's Environment Service over the
// external-environment protocol (nexus.fbs, ExtMessage; docs/design/env-rl.md). It serves the
// built-in MuJoCo tasks, which proves the protocol; a Python LIBERO or ManiSkill wrapper would
// speak the same frames. Run it, then start nexusd with --external-env NAME=SOCKET; tenants open
// "NAME:reach". One thread per connection, which serves all the sessions nexusd opened on it
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

#include "schema/control_frame.hpp"
#include "schema/ext_frame.hpp"
#include "sim/task.hpp"

namespace {

using nexus::schema::recv_ext;
using nexus::schema::send_ext;
namespace wire = nexus::wire;

// One session's observation (or its refusal) for an ExtObservations reply.
flatbuffers::Offset<wire::ExtObservation> observation(flatbuffers::FlatBufferBuilder& fbb, nexus::sim::Task& task,
                                                      nexus::sim::StepResult r, const std::string& error, bool bad_input) {
  std::vector<std::uint8_t> image;
  std::vector<float> state;
  if (error.empty()) {
    image = task.render();
    state = task.proprio();
  }
  return wire::CreateExtObservation(fbb, r.reward, r.done, r.success, fbb.CreateVector(image), fbb.CreateVector(state),
                                    fbb.CreateString(task.instruction()), fbb.CreateString(error), bad_input,
                                    r.truncated);
}

// Fault tests: --hang-after N stops answering after N steps in all (a simulator that hangs);
// --extra-reply-after N sends one reply twice after N steps (a buggy one); --short-reply-after N
// leaves the last named session out of its replies after N steps; --protocol P claims another
// protocol version.
std::atomic<long> g_hang_after{-1}, g_extra_after{-1}, g_short_after{-1};
std::atomic<long> g_steps{0};
std::uint32_t g_protocol = nexus::schema::kExtProtocol;

// Whether a request's session indices are all below `count` and none is named twice.
bool valid_sessions(const flatbuffers::Vector<std::uint32_t>* named, std::size_t count) {
  if (!named || named->size() == 0) return false;
  std::vector<bool> seen(count, false);
  for (auto i : *named) {
    if (i >= count || seen[i]) return false;
    seen[i] = true;
  }
  return true;
}

void serve(int fd) {
  std::vector<std::uint8_t> buffer;
  std::string why;
  std::vector<std::unique_ptr<nexus::sim::Task>> tasks;
  const auto* m = recv_ext(fd, std::chrono::seconds(30), buffer, why);
  if (m && m->body_type() == wire::ExtBody::ExtOpen) {
    const auto* o = m->body_as_ExtOpen();
    flatbuffers::FlatBufferBuilder fbb(256);
    try {
      if (o->sessions() < 1 || o->sessions() > 1024) throw std::invalid_argument("sessions must be 1..1024");
      for (int i = 0; i < o->sessions(); ++i)
        tasks.push_back(nexus::sim::make_task(o->task() ? o->task()->str() : "",
                                              {.image_size = o->image_size(), .max_steps = o->max_steps()}));
      send_ext(fd, fbb, wire::ExtBody::ExtSpec,
               wire::CreateExtSpec(fbb, tasks[0]->image_size(), nexus::sim::Task::kStateDim,
                                   nexus::sim::Task::kActionDim, tasks[0]->max_steps(), 0, g_protocol)
                   .Union(),
               m->id());
    } catch (const std::exception& e) {
      tasks.clear();
      send_ext(fd, fbb, wire::ExtBody::ExtSpec,
               wire::CreateExtSpec(fbb, 0, 0, 0, 0, fbb.CreateString(e.what()), g_protocol).Union(), m->id());
    }
  }
  constexpr auto kActionDim = static_cast<std::size_t>(nexus::sim::Task::kActionDim);
  while (!tasks.empty()) {
    m = recv_ext(fd, std::chrono::hours(24), buffer, why);
    if (!m) break;  // nexusd closed the sessions
    const auto id = m->id();
    flatbuffers::FlatBufferBuilder fbb(64 * 1024);
    std::vector<flatbuffers::Offset<wire::ExtObservation>> out;
    if (m->body_type() == wire::ExtBody::ExtReset) {
      const auto* r = m->body_as_ExtReset();
      if (!valid_sessions(r->sessions(), tasks.size()) || !r->seeds() || r->seeds()->size() != r->sessions()->size())
        break;  // nexusd out of protocol: close
      for (flatbuffers::uoffset_t j = 0; j < r->sessions()->size(); ++j) {
        auto& task = *tasks[r->sessions()->Get(j)];
        task.reset(r->seeds()->Get(j));
        out.push_back(observation(fbb, task, {}, "", false));
      }
    } else if (m->body_type() == wire::ExtBody::ExtStep) {
      const auto* st = m->body_as_ExtStep();
      if (!valid_sessions(st->sessions(), tasks.size())) break;
      const std::size_t n = st->sessions()->size();
      // Sizes are the sender's claim: a wrong count is the caller's mistake, refused per session.
      const bool sized = st->actions() && st->actions()->size() == n * kActionDim;
      const long first = g_steps.fetch_add(static_cast<long>(n));
      if (g_hang_after >= 0 && first + static_cast<long>(n) > g_hang_after)
        for (;;) std::this_thread::sleep_for(std::chrono::hours(1));  // hung: never answers again
      for (flatbuffers::uoffset_t j = 0; j < n; ++j) {
        auto& task = *tasks[st->sessions()->Get(j)];
        try {
          if (!sized) throw nexus::sim::TaskError("actions must be action_dim per named session");
          const auto r = task.step(std::span<const float>(st->actions()->data() + j * kActionDim, kActionDim));
          out.push_back(observation(fbb, task, r, "", false));
        } catch (const nexus::sim::TaskError& e) {
          out.push_back(observation(fbb, task, {}, e.what(), true));
        }
      }
    } else {
      break;
    }
    if (g_short_after >= 0 && g_steps >= g_short_after) out.pop_back();
    const auto body = wire::CreateExtObservations(fbb, fbb.CreateVector(out));
    if (!send_ext(fd, fbb, wire::ExtBody::ExtObservations, body.Union(), id)) break;
    if (m->body_type() == wire::ExtBody::ExtStep && g_extra_after >= 0 && g_steps >= g_extra_after &&
        g_extra_after.exchange(-1) >= 0)
      nexus::schema::send_frame(fd, {fbb.GetBufferPointer(), fbb.GetSize()});  // the same reply again, unasked
  }
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"external_env: built-in MuJoCo tasks served as an external environment"};
  std::string path;
  long hang_after = -1, extra_after = -1, short_after = -1;
  app.add_option("-s,--socket", path, "Unix socket to listen on")->required();
  app.add_option("--hang-after", hang_after, "stop answering after this many steps in all (fault tests)");
  app.add_option("--extra-reply-after", extra_after, "send one reply twice after this many steps (fault tests)");
  app.add_option("--short-reply-after", short_after, "leave a session out of replies after this many steps (fault tests)");
  app.add_option("--protocol", g_protocol, "claim this protocol version (fault tests)");
  CLI11_PARSE(app, argc, argv);
  g_hang_after = hang_after;
  g_extra_after = extra_after;
  g_short_after = short_after;
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
