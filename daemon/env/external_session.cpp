#include "daemon/env/external_session.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <optional>

#include "daemon/env/builtin_session.hpp"
#include "schema/ext_frame.hpp"

namespace nexus::env {
namespace {

int connect_to(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof(addr.sun_path)) throw std::runtime_error("socket path too long: " + path);
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error("socket(): " + std::string(std::strerror(errno)));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    const int e = errno;
    ::close(fd);
    throw std::runtime_error("cannot reach the external environment at " + path + ": " + std::strerror(e));
  }
  return fd;
}

class ExternalSession final : public EnvSession {
 public:
  ExternalSession(std::string path, const std::string& task, int image_size, int max_steps,
                  const ExternalTimeouts& timeouts)
      : path_(std::move(path)), timeout_(timeouts.step), fd_(connect_to(path_)) {
    flatbuffers::FlatBufferBuilder fbb(128);
    const auto open = wire::CreateExtOpen(fbb, fbb.CreateString(task), image_size, max_steps, schema::kExtProtocol);
    if (!schema::send_ext(fd_, fbb, wire::ExtBody::ExtOpen, open.Union(), ++sent_)) gone("the connection closed");
    const auto* m = receive(timeouts.open);
    if (m->body_type() != wire::ExtBody::ExtSpec) gone("it answered ExtOpen with something other than ExtSpec");
    const auto* s = m->body_as_ExtSpec();
    if (s->protocol() != schema::kExtProtocol)
      gone("it speaks external-environment protocol " + std::to_string(s->protocol()) + ", nexusd speaks " +
           std::to_string(schema::kExtProtocol) + " (docs/design/env-rl.md)");
    if (s->error() && s->error()->size() > 0) throw BadInput(s->error()->str());
    spec_ = {s->image_size(), s->state_dim(), s->action_dim(), s->max_steps()};
    if (spec_.image_size != image_size || spec_.state_dim < 0 || spec_.state_dim > 1024 || spec_.action_dim < 1 ||
        spec_.action_dim > 64 || spec_.max_steps < 1)
      gone("its spec is out of range (image_size must be " + std::to_string(image_size) +
           ", state_dim 0..1024, action_dim 1..64, max_steps >= 1)");
    image_.assign(static_cast<std::size_t>(image_size) * image_size * 3, 0);
    state_.assign(static_cast<std::size_t>(spec_.state_dim), 0.f);
  }
  ~ExternalSession() override { ::close(fd_); }

  const SessionSpec& spec() const override { return spec_; }
  void reset(std::uint64_t seed) override {
    flatbuffers::FlatBufferBuilder fbb(64);
    if (!schema::send_ext(fd_, fbb, wire::ExtBody::ExtReset, wire::CreateExtReset(fbb, seed).Union(), ++sent_))
      gone("the connection closed");
    take(receive());
  }
  StepOutcome step(std::span<const float> action) override {
    if (action.size() != static_cast<std::size_t>(spec_.action_dim))
      throw BadInput("actions must have " + std::to_string(spec_.action_dim) + " values");
    flatbuffers::FlatBufferBuilder fbb(128);
    if (!schema::send_ext(fd_, fbb, wire::ExtBody::ExtStep,
                          wire::CreateExtStep(fbb, fbb.CreateVector(action.data(), action.size())).Union(), ++sent_))
      gone("the connection closed");
    return take(receive());
  }
  void observe(std::uint8_t* rgb, float* state) override {
    std::memcpy(rgb, image_.data(), image_.size());
    std::copy(state_.begin(), state_.end(), state);
  }
  std::string instruction() const override { return instruction_; }

 private:
  [[noreturn]] void gone(const std::string& why) const {
    throw std::runtime_error("external environment at " + path_ + ": " + why);
  }
  const wire::ExtMessage* receive(std::optional<std::chrono::milliseconds> timeout = std::nullopt) {
    std::string why;
    const auto* m = schema::recv_ext(fd_, timeout.value_or(timeout_), buffer_, why);
    if (!m) gone(why);
    // A reply to an earlier request (one that timed out) or an extra frame: the session is out of
    // step and stays broken, rather than every later reply answering the wrong request.
    if (m->id() != sent_)
      gone("it answered request " + std::to_string(m->id()) + " when request " + std::to_string(sent_) +
           " was asked (a late or extra reply)");
    return m;
  }
  // Checks an observation against the spec and keeps it; the outcome, or the typed refusal.
  StepOutcome take(const wire::ExtMessage* m) {
    if (m->body_type() != wire::ExtBody::ExtObservation) gone("expected an ExtObservation");
    const auto* o = m->body_as_ExtObservation();
    if (o->error() && o->error()->size() > 0) {
      if (o->bad_input()) throw BadInput(o->error()->str());
      gone(o->error()->str());
    }
    if (!o->image() || o->image()->size() != image_.size())
      gone("an image of " + std::to_string(o->image() ? o->image()->size() : 0) + " bytes, not " +
           std::to_string(image_.size()));
    if (!o->state() || o->state()->size() != state_.size()) gone("a state of the wrong size");
    for (float v : *o->state())
      if (!std::isfinite(v)) gone("a non-finite state");
    if (!std::isfinite(o->reward())) gone("a non-finite reward");
    if (o->truncated() && !o->done()) gone("an observation truncated but not done");
    std::memcpy(image_.data(), o->image()->data(), image_.size());
    std::copy(o->state()->begin(), o->state()->end(), state_.begin());
    instruction_ = o->instruction() ? o->instruction()->str().substr(0, 1024) : "";
    return {o->reward(), o->done(), o->success(), o->truncated()};
  }

  std::string path_;
  std::chrono::milliseconds timeout_;
  int fd_;
  std::uint64_t sent_ = 0;  // the id of the last request: the one its reply must carry
  SessionSpec spec_;
  std::vector<std::uint8_t> buffer_, image_;
  std::vector<float> state_;
  std::string instruction_;
};

}  // namespace

std::unique_ptr<EnvSession> open_external(const std::string& socket_path, const std::string& task, int image_size,
                                          int max_steps, const ExternalTimeouts& timeout) {
  return std::make_unique<ExternalSession>(socket_path, task, image_size, max_steps, timeout);
}

SessionFactory session_factory(std::map<std::string, std::string> external, ExternalTimeouts timeout) {
  return [external = std::move(external), timeout](const std::string& task, int image_size, int max_steps) {
    const auto colon = task.find(':');
    if (colon == std::string::npos) return make_builtin_session(task, image_size, max_steps);
    auto it = external.find(task.substr(0, colon));
    if (it == external.end()) throw BadInput("no external environment named '" + task.substr(0, colon) + "'");
    return open_external(it->second, task.substr(colon + 1), image_size, max_steps, timeout);
  };
}

}  // namespace nexus::env
