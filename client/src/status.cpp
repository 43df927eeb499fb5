// Control-socket queries (any local user may ask; cancel is checked against the caller's uid):
// status with accounting and jobs, the Prometheus exposition, job cancellation.
#include "nexus/status.hpp"

#include <unistd.h>

#include <flatbuffers/flatbuffers.h>

#include "attachment.hpp"
#include "schema/control_frame.hpp"

namespace nexus {
namespace {

std::string str(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

// Sends one control request and returns the verified reply of type `expected`; `frame` holds
// the bytes the result points into.
const wire::ControlMessage* control_call(const std::string& socket_path, std::chrono::milliseconds timeout,
                                         flatbuffers::FlatBufferBuilder& fbb, wire::ControlBody type,
                                         flatbuffers::Offset<void> body, wire::ControlBody expected,
                                         std::vector<std::uint8_t>& frame) {
  const int fd = detail::connect_control_socket(socket_path);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  fbb.Finish(wire::CreateControlMessage(fbb, type, body));
  if (!schema::send_frame(fd, {fbb.GetBufferPointer(), fbb.GetSize()}))
    throw Error(ErrorCode::DaemonGone, "daemon closed the socket");
  std::vector<int> fds;
  const auto st = schema::recv_frame(fd, timeout, frame, fds);
  for (int f : fds) ::close(f);
  if (st == schema::RecvStatus::TimedOut) throw Error(ErrorCode::Timeout, "no reply on the control socket");
  if (st != schema::RecvStatus::Ok) throw Error(ErrorCode::DaemonGone, "daemon closed the socket");
  flatbuffers::Verifier v(frame.data(), frame.size());
  if (!v.VerifyBuffer<wire::ControlMessage>(nullptr)) throw Error(ErrorCode::BadMessage, "reply failed verification");
  const auto* msg = flatbuffers::GetRoot<wire::ControlMessage>(frame.data());
  if (msg->body() == nullptr) throw Error(ErrorCode::BadMessage, "reply without a body");
  if (msg->body_type() == wire::ControlBody::Error) throw detail::error_from_wire(msg->body_as_Error(), "control");
  if (msg->body_type() != expected)
    throw Error(ErrorCode::WrongMessageType, std::string("expected a ") + wire::EnumNameControlBody(expected));
  return msg;
}

}  // namespace

DaemonStatus query_status(const std::string& socket_path, std::chrono::milliseconds timeout, double usage_since_s) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<std::uint8_t> frame;
  const auto* msg = control_call(socket_path, timeout, fbb, wire::ControlBody::StatusRequest,
                                 wire::CreateStatusRequest(fbb, schema::kProtocolVersion, usage_since_s).Union(),
                                 wire::ControlBody::StatusReply, frame);
  const auto* r = msg->body_as_StatusReply();
  DaemonStatus s;
  s.daemon_version = str(r->daemon_version());
  s.protocol_version = r->protocol_version();
  s.pid = r->pid();
  s.uptime_s = r->uptime_s();
  s.message_bytes_copied = r->message_bytes_copied();
  s.tensor_bytes_copied = r->tensor_bytes_copied();
  s.backbone = str(r->backbone());
  if (r->replicas())
    for (const auto* x : *r->replicas()) s.replicas.push_back({str(x->device()), x->tenants(), x->groups(), x->samples()});
  if (r->engines())
    for (const auto* e : *r->engines()) {
      EngineStatus x{e->id(), str(e->name()), e->uid(), e->shared(), e->draining(), e->capacity(), e->sessions(), e->steps(), {}};
      if (e->tasks())
        for (const auto* t : *e->tasks()) x.tasks.push_back(str(t));
      s.engines.push_back(std::move(x));
    }
  s.rollout_scaling = str(r->rollout_scaling());
  s.model_groups = r->model_groups();
  s.model_requests = r->model_requests();
  s.model_samples = r->model_samples();
  if (r->tenants())
    for (const auto* t : *r->tenants())
      s.tenants.push_back(TenantStatus{str(t->name()), t->uid(), t->pid(), t->session_id(), t->segment_bytes(),
                                       t->requests(), t->errors(), t->attached_s()});
  if (r->usage())
    for (const auto* u : *r->usage())
      s.usage.push_back(TenantUsage{str(u->name()), u->train_s(), u->infer_s(), u->samples(), u->steps(),
                                    u->predictions(), u->env_steps(), u->train_wait_p50_us(), u->train_wait_p99_us(),
                                    u->infer_wait_p50_us(), u->infer_wait_p99_us(), u->weight(), u->attached(),
                                    str(u->adapter())});
  s.usage_wall_s = r->usage_wall_s();
  s.training_busy_s = r->training_busy_s();
  s.inference_busy_s = r->inference_busy_s();
  s.environment_busy_s = r->environment_busy_s();
  if (r->jobs())
    for (const auto* j : *r->jobs())
      s.jobs.push_back(JobInfo{j->id(), str(j->tenant()), str(j->kind()), str(j->state()), str(j->error()), j->done(),
                               j->total(), j->loss(), j->success_rate(), j->mean_return(), j->version(), j->seconds()});
  s.inference_queued = r->inference_queued();
  s.training_queued = r->training_queued();
  s.slots_resident = r->slots_resident();
  s.slots_evicted = r->slots_evicted();
  s.env_sessions = r->env_sessions();
  s.dataset_bytes = r->dataset_bytes();
  s.rerun_groups = r->rerun_groups();
  s.split_steps = r->split_steps();
  s.longest_training_turn_s = r->longest_training_turn_s();
  s.longest_shared_training_turn_s = r->longest_shared_training_turn_s();
  s.health_restarts = r->health_restarts();
  if (r->health())
    for (const auto* h : *r->health()) s.health.push_back(h->str());
  if (r->users())
    for (const auto* u : *r->users())
      s.users.push_back(UserUsage{u->uid(), u->names(), u->names_max(), u->slots(), u->slots_max(), u->checkpoints(),
                                  u->checkpoints_max(), u->checkpoint_bytes(), u->checkpoint_bytes_max(),
                                  u->rl_observation_bytes(), u->rl_observation_bytes_max()});
  return s;
}

std::string query_metrics(const std::string& socket_path, std::chrono::milliseconds timeout) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<std::uint8_t> frame;
  const auto* msg = control_call(socket_path, timeout, fbb, wire::ControlBody::MetricsRequest,
                                 wire::CreateMetricsRequest(fbb, schema::kProtocolVersion).Union(),
                                 wire::ControlBody::MetricsReply, frame);
  return str(msg->body_as_MetricsReply()->text());
}

void release_tenant(const std::string& socket_path, const std::string& tenant, std::chrono::milliseconds timeout) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<std::uint8_t> frame;
  control_call(socket_path, timeout, fbb, wire::ControlBody::ReleaseTenantRequest,
               wire::CreateReleaseTenantRequest(fbb, schema::kProtocolVersion, fbb.CreateString(tenant)).Union(),
               wire::ControlBody::ReleaseTenantReply, frame);
}

std::uint32_t drain_daemon(const std::string& socket_path, std::chrono::milliseconds timeout) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<std::uint8_t> frame;
  const auto* msg = control_call(socket_path, timeout, fbb, wire::ControlBody::DrainRequest,
                                 wire::CreateDrainRequest(fbb, schema::kProtocolVersion).Union(),
                                 wire::ControlBody::DrainReply, frame);
  return msg->body_as_DrainReply()->tenants();
}

ScaleResult scale_daemon(const std::string& socket_path, const std::string& what, int count,
                         std::chrono::milliseconds timeout) {
  flatbuffers::FlatBufferBuilder fbb(128);
  std::vector<std::uint8_t> frame;
  const auto* msg = control_call(
      socket_path, timeout, fbb, wire::ControlBody::ScaleRequest,
      wire::CreateScaleRequest(fbb, schema::kProtocolVersion, fbb.CreateString(what), count).Union(),
      wire::ControlBody::ScaleReply, frame);
  const auto* r = msg->body_as_ScaleReply();
  return {r->before(), r->after(), str(r->message())};
}

std::string cancel_job(const std::string& socket_path, std::uint64_t job, std::chrono::milliseconds timeout) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<std::uint8_t> frame;
  const auto* msg = control_call(socket_path, timeout, fbb, wire::ControlBody::CancelJobRequest,
                                 wire::CreateCancelJobRequest(fbb, schema::kProtocolVersion, job).Union(),
                                 wire::ControlBody::CancelJobReply, frame);
  return str(msg->body_as_CancelJobReply()->state());
}

}  // namespace nexus
