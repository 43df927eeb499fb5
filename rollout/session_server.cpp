#include "rollout/session_server.hpp"

#include <chrono>
#include <string>
#include <thread>

#include "schema/control_frame.hpp"

namespace nexus::rollout {
namespace {

using schema::send_ext;

// One session's observation (or its refusal) for an ExtObservations reply.
flatbuffers::Offset<wire::ExtObservation> observation(flatbuffers::FlatBufferBuilder& fbb, sim::Task& task,
                                                      sim::StepResult r, const std::string& error, bool bad_input) {
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

bool reached(const std::atomic<long>& after, long steps) { return after >= 0 && steps >= after; }
bool past(const std::atomic<long>& after, long steps) { return after >= 0 && steps > after; }

}  // namespace

bool SessionServer::open(int fd, const wire::ExtMessage& m) {
  if (m.body_type() != wire::ExtBody::ExtOpen) return false;
  const auto* o = m.body_as_ExtOpen();
  flatbuffers::FlatBufferBuilder fbb(256);
  try {
    if (o->sessions() < 1 || o->sessions() > 1024) throw std::invalid_argument("sessions must be 1..1024");
    for (int i = 0; i < o->sessions(); ++i)
      tasks_.push_back(sim::make_task(o->task() ? o->task()->str() : "",
                                      {.image_size = o->image_size(), .max_steps = o->max_steps()}));
    return send_ext(fd, fbb, wire::ExtBody::ExtSpec,
                    wire::CreateExtSpec(fbb, tasks_[0]->image_size(), sim::Task::kStateDim, sim::Task::kActionDim,
                                        tasks_[0]->max_steps(), 0, faults_.protocol)
                        .Union(),
                    m.id());
  } catch (const std::exception& e) {
    tasks_.clear();
    send_ext(fd, fbb, wire::ExtBody::ExtSpec,
             wire::CreateExtSpec(fbb, 0, 0, 0, 0, fbb.CreateString(e.what()), faults_.protocol).Union(), m.id());
    return false;
  }
}

bool SessionServer::answer(int fd, const wire::ExtMessage& m) {
  if (tasks_.empty()) return open(fd, m);
  constexpr auto kActionDim = static_cast<std::size_t>(sim::Task::kActionDim);
  flatbuffers::FlatBufferBuilder fbb(64 * 1024);
  std::vector<flatbuffers::Offset<wire::ExtObservation>> out;
  long steps = faults_.steps;
  if (m.body_type() == wire::ExtBody::ExtReset) {
    const auto* r = m.body_as_ExtReset();
    if (!valid_sessions(r->sessions(), tasks_.size()) || !r->seeds() || r->seeds()->size() != r->sessions()->size())
      return false;  // nexusd out of protocol: close
    for (flatbuffers::uoffset_t j = 0; j < r->sessions()->size(); ++j) {
      auto& task = *tasks_[r->sessions()->Get(j)];
      task.reset(r->seeds()->Get(j));
      out.push_back(observation(fbb, task, {}, "", false));
    }
  } else if (m.body_type() == wire::ExtBody::ExtStep) {
    const auto* st = m.body_as_ExtStep();
    if (!valid_sessions(st->sessions(), tasks_.size())) return false;
    const std::size_t n = st->sessions()->size();
    // Sizes are the sender's claim: a wrong count is the caller's mistake, refused per session.
    const bool sized = st->actions() && st->actions()->size() == n * kActionDim;
    steps = faults_.steps.fetch_add(static_cast<long>(n)) + static_cast<long>(n);
    if (past(faults_.hang_after, steps))
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));  // hung: never answers again
    if (faults_.slow_ms_per_session > 0)
      std::this_thread::sleep_for(std::chrono::milliseconds(faults_.slow_ms_per_session * static_cast<long>(n)));
    if (past(faults_.garbage_after, steps)) {
      const std::vector<std::uint8_t> garbage(64, 0xA5);  // a frame whose bytes are no ExtMessage
      return schema::send_frame(fd, garbage);
    }
    for (flatbuffers::uoffset_t j = 0; j < n; ++j) {
      auto& task = *tasks_[st->sessions()->Get(j)];
      try {
        if (!sized) throw sim::TaskError("actions must be action_dim per named session");
        const auto r = task.step(std::span<const float>(st->actions()->data() + j * kActionDim, kActionDim));
        out.push_back(observation(fbb, task, r, "", false));
      } catch (const sim::TaskError& e) {
        out.push_back(observation(fbb, task, {}, e.what(), true));
      }
    }
  } else {
    return false;
  }
  if (reached(faults_.short_after, steps)) out.pop_back();
  const auto body = wire::CreateExtObservations(fbb, fbb.CreateVector(out));
  if (!send_ext(fd, fbb, wire::ExtBody::ExtObservations, body.Union(), m.id())) return false;
  if (m.body_type() == wire::ExtBody::ExtStep && reached(faults_.extra_after, steps) && faults_.extra_after.exchange(-1) >= 0)
    schema::send_frame(fd, {fbb.GetBufferPointer(), fbb.GetSize()});  // the same reply again, unasked
  return true;
}

}  // namespace nexus::rollout
