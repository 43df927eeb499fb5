#include "daemon/env/external_session.hpp"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <optional>

#include "daemon/env/builtin_session.hpp"
#include "daemon/env/placed_session.hpp"
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

// One connection to a simulator process, serving `count` sessions (protocol 3). Exchanges are
// one at a time (mu_); once the connection is out of step, gone or hung, it stays broken and
// every later exchange fails with the reason.
class SimulatorConnection final : public SessionBatch {
 public:
  // Takes `fd` (a connected socket) only once constructed: if this throws, the caller closes it.
  SimulatorConnection(int fd, std::string label, const std::string& task, int image_size, int max_steps, int count,
                      const ExternalTimeouts& timeouts)
      : path_(std::move(label)), timeouts_(timeouts), fd_(fd) {
    flatbuffers::FlatBufferBuilder fbb(128);
    const auto open =
        wire::CreateExtOpen(fbb, fbb.CreateString(task), image_size, max_steps, schema::kExtProtocol, count);
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
    members_.resize(static_cast<std::size_t>(count));
    for (auto& o : members_) {
      o.image.assign(static_cast<std::size_t>(image_size) * image_size * 3, 0);
      o.state.assign(static_cast<std::size_t>(spec_.state_dim), 0.f);
    }
  }
  ~SimulatorConnection() override { ::close(fd_); }

  const SessionSpec& spec() const { return spec_; }

  std::vector<Member> run(std::span<const int> indices, std::span<const std::uint64_t> seeds,
                          std::span<const float> actions) override {
    std::lock_guard lk(mu_);
    send(indices, seeds, actions);
    return answers();
  }

  // The same exchange in two halves, so that one call's exchanges with several processes
  // overlap. Only for a connection of one session (a rollout engine's), whose lock the caller
  // holds from begin() to collect(): nothing else is sent on it between them.
  void begin(std::span<const int> indices, std::span<const std::uint64_t> seeds, std::span<const float> actions) {
    std::lock_guard lk(mu_);
    send(indices, seeds, actions);
  }
  std::vector<Member> collect() {
    std::lock_guard lk(mu_);
    return answers();
  }

 private:
  // Both with mu_ held. A failure leaves the connection broken for good.
  void send(std::span<const int> indices, std::span<const std::uint64_t> seeds, std::span<const float> actions) {
    if (!broken_.empty()) throw std::runtime_error(broken_);
    if (!pending_.empty()) throw std::logic_error("an exchange is already in flight on this connection");
    try {
      std::vector<std::uint32_t> named(indices.begin(), indices.end());
      flatbuffers::FlatBufferBuilder fbb(256 + actions.size() * sizeof(float));
      const auto sessions = fbb.CreateVector(named);
      const bool ok =
          seeds.empty()
              ? schema::send_ext(fd_, fbb, wire::ExtBody::ExtStep,
                                 wire::CreateExtStep(fbb, sessions, fbb.CreateVector(actions.data(), actions.size())).Union(),
                                 ++sent_)
              : schema::send_ext(fd_, fbb, wire::ExtBody::ExtReset,
                                 wire::CreateExtReset(fbb, sessions, fbb.CreateVector(seeds.data(), seeds.size())).Union(),
                                 ++sent_);
      if (!ok) gone("the connection closed");
      pending_.assign(indices.begin(), indices.end());
    } catch (const std::runtime_error& e) {
      broken_ = e.what();
      throw;
    }
  }
  std::vector<Member> answers() {
    if (!broken_.empty()) throw std::runtime_error(broken_);
    const std::vector<int> indices = std::move(pending_);
    pending_.clear();
    if (indices.empty()) throw std::logic_error("no exchange is in flight on this connection");
    try {
      const auto* m = receive(timeouts_.exchange(indices.size()));
      if (m->body_type() != wire::ExtBody::ExtObservations) gone("expected ExtObservations");
      const auto* list = m->body_as_ExtObservations()->observations();
      if (!list || list->size() != indices.size())
        gone("it answered for " + std::to_string(list ? list->size() : 0) + " sessions, not the " +
             std::to_string(indices.size()) + " named");
      std::vector<Member> out(indices.size());
      for (std::size_t j = 0; j < indices.size(); ++j)
        out[j] = take(list->Get(static_cast<flatbuffers::uoffset_t>(j)), members_[static_cast<std::size_t>(indices[j])]);
      return out;
    } catch (const std::runtime_error& e) {
      broken_ = e.what();
      throw;
    }
  }

 public:
  // Reads member `index`'s last observation. The caller holds that session's lock, so no
  // exchange that names it runs meanwhile (others write other members only).
  void observe(int index, std::uint8_t* rgb, float* state) const {
    const auto& o = members_[static_cast<std::size_t>(index)];
    std::memcpy(rgb, o.image.data(), o.image.size());
    std::copy(o.state.begin(), o.state.end(), state);
  }
  std::string instruction(int index) const { return members_[static_cast<std::size_t>(index)].instruction; }

 private:
  struct Observed {
    std::vector<std::uint8_t> image;
    std::vector<float> state;
    std::string instruction;
  };

  [[noreturn]] void gone(const std::string& why) const {
    throw std::runtime_error(path_ + ": " + why);
  }
  const wire::ExtMessage* receive(std::chrono::milliseconds timeout) {
    std::string why;
    const auto* m = schema::recv_ext(fd_, timeout, buffer_, why);
    if (!m) gone(why);
    // A reply to an earlier request (one that timed out) or an extra frame: the connection is out
    // of step and stays broken, rather than every later reply answering the wrong request.
    if (m->id() != sent_)
      gone("it answered request " + std::to_string(m->id()) + " when request " + std::to_string(sent_) +
           " was asked (a late or extra reply)");
    return m;
  }
  // Checks one session's observation against the spec and keeps it: its outcome, or why not.
  Member take(const wire::ExtObservation* o, Observed& keep) const {
    Member r;
    if (o->error() && o->error()->size() > 0) {
      (o->bad_input() ? r.refused : r.broke) = o->error()->str();
      return r;
    }
    if (!o->image() || o->image()->size() != keep.image.size())
      gone("an image of " + std::to_string(o->image() ? o->image()->size() : 0) + " bytes, not " +
           std::to_string(keep.image.size()));
    if (!o->state() || o->state()->size() != keep.state.size()) gone("a state of the wrong size");
    for (float v : *o->state())
      if (!std::isfinite(v)) gone("a non-finite state");
    if (!std::isfinite(o->reward())) gone("a non-finite reward");
    if (o->truncated() && !o->done()) gone("an observation truncated but not done");
    std::memcpy(keep.image.data(), o->image()->data(), keep.image.size());
    std::copy(o->state()->begin(), o->state()->end(), keep.state.begin());
    keep.instruction = o->instruction() ? o->instruction()->str().substr(0, 1024) : "";
    r.outcome = {o->reward(), o->done(), o->success(), o->truncated()};
    return r;
  }

  std::string path_;  // who it is, for errors: "external environment at PATH" or the engine
  ExternalTimeouts timeouts_;
  int fd_;
  std::mutex mu_;
  std::uint64_t sent_ = 0;  // GUARDED_BY(mu_): the id of the last request, which its reply carries
  std::string broken_;      // GUARDED_BY(mu_): set once the connection failed
  std::vector<int> pending_;  // GUARDED_BY(mu_): the members a sent request named, until answered
  SessionSpec spec_;
  std::vector<std::uint8_t> buffer_;  // GUARDED_BY(mu_)
  std::vector<Observed> members_;     // one per session; see observe()
};

// One of a connection's sessions. The connection closes with the last of them.
class ExternalSession final : public EnvSession {
 public:
  ExternalSession(std::shared_ptr<SimulatorConnection> connection, int index)
      : connection_(std::move(connection)), index_(index) {}

  const SessionSpec& spec() const override { return connection_->spec(); }
  SessionBatch* batch() override { return connection_.get(); }
  int batch_index() const override { return index_; }
  void reset(std::uint64_t seed) override { alone({&seed, 1}, {}); }
  StepOutcome step(std::span<const float> action) override {
    if (action.size() != static_cast<std::size_t>(spec().action_dim))
      throw BadInput("actions must have " + std::to_string(spec().action_dim) + " values");
    return alone({}, action);
  }
  void observe(std::uint8_t* rgb, float* state) override { connection_->observe(index_, rgb, state); }
  std::string instruction() const override { return connection_->instruction(index_); }
  // In halves: only where this session has its connection to itself (a rollout engine's).
  bool begin_step(std::span<const float> action) override {
    if (action.size() != static_cast<std::size_t>(spec().action_dim))
      throw BadInput("actions must have " + std::to_string(spec().action_dim) + " values");
    const int index = index_;
    connection_->begin({&index, 1}, {}, action);
    return true;
  }
  StepOutcome collect_step() override { return outcome(connection_->collect().front()); }

 private:
  static StepOutcome outcome(const SessionBatch::Member& r) {
    if (!r.refused.empty()) throw BadInput(r.refused);
    if (!r.broke.empty()) throw std::runtime_error(r.broke);
    return r.outcome;
  }
  // This session's exchange on its own (the Environment Service batches through batch()).
  StepOutcome alone(std::span<const std::uint64_t> seed, std::span<const float> action) {
    const int index = index_;
    return outcome(connection_->run({&index, 1}, seed, action).front());
  }

  std::shared_ptr<SimulatorConnection> connection_;
  int index_;
};

}  // namespace

std::vector<std::unique_ptr<EnvSession>> open_external_on(int fd, const std::string& label, const std::string& task,
                                                          int image_size, int max_steps, int count,
                                                          const ExternalTimeouts& timeouts) {
  auto connection = std::make_shared<SimulatorConnection>(fd, label, task, image_size, max_steps, count, timeouts);
  std::vector<std::unique_ptr<EnvSession>> sessions;
  for (int i = 0; i < count; ++i) sessions.push_back(std::make_unique<ExternalSession>(connection, i));
  return sessions;
}

std::vector<std::unique_ptr<EnvSession>> open_external(const std::string& socket_path, const std::string& task,
                                                       int image_size, int max_steps, int count,
                                                       const ExternalTimeouts& timeouts) {
  const int fd = connect_to(socket_path);
  try {
    return open_external_on(fd, "external environment at " + socket_path, task, image_size, max_steps, count, timeouts);
  } catch (...) {
    ::close(fd);
    throw;
  }
}

SessionFactory session_factory(std::map<std::string, std::string> external, ExternalTimeouts timeouts,
                               EngineRegistry* engines) {
  return [external = std::move(external), timeouts, engines](const std::string& task, int image_size, int max_steps,
                                                             int count, std::optional<uid_t> owner) {
    const auto colon = task.find(':');
    if (colon == std::string::npos && engines) {
      std::vector<std::unique_ptr<EnvSession>> placed;
      for (int i = 0; i < count; ++i)
        placed.push_back(std::make_unique<PlacedSession>(*engines, task, image_size, max_steps, owner));
      return placed;
    }
    if (colon == std::string::npos) return make_builtin_sessions(task, image_size, max_steps, count);
    auto it = external.find(task.substr(0, colon));
    if (it == external.end()) throw BadInput("no external environment named '" + task.substr(0, colon) + "'");
    return open_external(it->second, task.substr(colon + 1), image_size, max_steps, count, timeouts);
  };
}

}  // namespace nexus::env
