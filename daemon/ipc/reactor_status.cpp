// What nexusctl reads over the control socket: status (tenants, accounting, jobs), the
// Prometheus exposition, and job cancellation (root or the job's owner, by SO_PEERCRED).
#include <unistd.h>

#include <flatbuffers/flatbuffers.h>

#include <map>
#include <set>

#include "daemon/ipc/reactor.hpp"
#include "daemon/log/log.hpp"
#include "daemon/log/log_text.hpp"
#include "daemon/ipc/job_wire.hpp"
#include "daemon/metrics/prometheus.hpp"
#include "schema/protocol.hpp"

namespace nexus::daemon {
namespace {

std::span<const std::uint8_t> finish_control(flatbuffers::FlatBufferBuilder& fbb, wire::ControlBody type,
                                             flatbuffers::Offset<void> body) {
  fbb.Finish(wire::CreateControlMessage(fbb, type, body));
  return {fbb.GetBufferPointer(), fbb.GetSize()};
}

}  // namespace

void Reactor::send_status(Connection& c, double usage_since_s) {
  flatbuffers::FlatBufferBuilder fbb(4096);
  const auto now = std::chrono::steady_clock::now();
  std::vector<flatbuffers::Offset<wire::TenantInfo>> tenants;
  std::set<std::string> attached;
  for (const auto& [id, s] : sessions_) {
    attached.insert(s->name);
    tenants.push_back(wire::CreateTenantInfo(fbb, fbb.CreateString(s->name), s->peer.uid, s->peer.pid, s->session_id,
                                             s->segment->layout().total_bytes, s->served, s->errors,
                                             std::chrono::duration<double>(now - s->attached_at).count()));
  }
  ServiceStatus st;
  if (services_) st = services_->status(usage_since_s > 0 ? std::optional<double>(usage_since_s) : std::nullopt);
  std::vector<flatbuffers::Offset<wire::TenantUsage>> usage;
  for (const auto& [name, u] : st.usage.tenants) {
    const auto tw = st.usage.train_wait.count(name) ? st.usage.train_wait.at(name) : metrics::WaitStats{};
    const auto iw = st.usage.infer_wait.count(name) ? st.usage.infer_wait.at(name) : metrics::WaitStats{};
    const double weight = st.weights.count(name) ? st.weights.at(name) : 1.0;
    usage.push_back(wire::CreateTenantUsage(fbb, fbb.CreateString(name), u.train_s, u.infer_s, u.samples, u.steps,
                                            u.predictions, u.env_steps, tw.p50_us, tw.p99_us, iw.p50_us, iw.p99_us,
                                            weight, attached.count(name) > 0,
                                            st.adapters.count(name) ? fbb.CreateString(st.adapters.at(name)) : 0));
  }
  std::vector<flatbuffers::Offset<wire::JobInfo>> jobs;
  for (const auto& j : st.jobs) jobs.push_back(job_info(fbb, j));
  const auto version = fbb.CreateString(schema::kDaemonVersion);
  const auto backbone = fbb.CreateString(st.backbone);
  const auto tv = fbb.CreateVector(tenants);
  const auto uv = fbb.CreateVector(usage);
  const auto jv = fbb.CreateVector(jobs);
  const auto hv = fbb.CreateVectorOfStrings(st.health);
  std::vector<flatbuffers::Offset<wire::ReplicaInfo>> replicas;
  for (const auto& r : st.replicas)
    replicas.push_back(wire::CreateReplicaInfo(fbb, fbb.CreateString(r.device), static_cast<std::uint32_t>(r.tenants),
                                               r.groups, r.samples));
  const auto rv = fbb.CreateVector(replicas);
  // Per Unix user: names from our registry, slots and checkpoints from the services.
  std::map<std::uint32_t, UserStatus> users;
  for (const auto& u : st.users) users[u.uid] = u;
  for (const auto& [uid, names] : registry_.names_by_uid()) users[uid].uid = uid, users[uid].names = names;
  std::vector<flatbuffers::Offset<wire::UserUsage>> user_usage;
  for (const auto& [uid, u] : users)
    user_usage.push_back(wire::CreateUserUsage(fbb, uid, u.names, registry_.limits().names_per_uid, u.slots,
                                               st.user_bounds.slots, u.checkpoints, st.user_bounds.checkpoints,
                                               u.checkpoint_bytes, st.user_bounds.checkpoint_bytes, u.rl_observation_bytes,
                                               st.user_bounds.rl_observation_bytes));
  const auto users_vector = fbb.CreateVector(user_usage);
  std::vector<flatbuffers::Offset<wire::EngineInfo>> engines;
  for (const auto& e : st.engines)
    engines.push_back(wire::CreateEngineInfo(fbb, e.id, fbb.CreateString(e.name), e.uid, e.shared, e.capacity, e.sessions,
                                             e.steps, e.draining, fbb.CreateVectorOfStrings(e.tasks)));
  const auto engines_vector = fbb.CreateVector(engines);
  const auto scaling = fbb.CreateString(st.rollout_scaling);
  wire::StatusReplyBuilder r(fbb);
  r.add_daemon_version(version);
  r.add_protocol_version(schema::kProtocolVersion);
  r.add_pid(::getpid());
  r.add_uptime_s(std::chrono::duration<double>(now - started_).count());
  r.add_tenants(tv);
  r.add_message_bytes_copied(message_bytes_copied_);
  r.add_tensor_bytes_copied(st.input_bytes_packed);  // transport requests copy no tensor data
  r.add_backbone(backbone);
  r.add_model_groups(st.groups);
  r.add_model_requests(st.requests);
  r.add_model_samples(st.samples);
  r.add_usage(uv);
  r.add_usage_wall_s(st.usage.wall_s);
  r.add_training_busy_s(st.usage.busy_s[0]);
  r.add_inference_busy_s(st.usage.busy_s[1]);
  r.add_environment_busy_s(st.usage.busy_s[2]);
  r.add_jobs(jv);
  r.add_inference_queued(st.inference_queued);
  r.add_training_queued(st.training_queued);
  r.add_slots_resident(st.slots_resident);
  r.add_slots_evicted(st.slots_evicted);
  r.add_env_sessions(st.env_sessions);
  r.add_dataset_bytes(st.dataset_bytes);
  r.add_rerun_groups(st.rerun_groups);
  r.add_split_steps(st.split_steps);
  r.add_replicas(rv);
  r.add_longest_training_turn_s(st.longest_training_turn_s);
  r.add_longest_shared_training_turn_s(st.longest_shared_training_turn_s);
  r.add_health_restarts(st.health_restarts);
  r.add_health(hv);
  r.add_users(users_vector);
  r.add_engines(engines_vector);
  r.add_rollout_scaling(scaling);
  send_control(c, finish_control(fbb, wire::ControlBody::StatusReply, r.Finish().Union()));
}

std::string Reactor::metrics_text() const {
  metrics::DaemonFacts f;
  f.uptime_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  f.tenants_attached = sessions_.size();
  f.message_bytes_copied = message_bytes_copied_;
  if (!services_) return metrics::render_prometheus(f, nullptr);
  const auto st = services_->status(std::nullopt);
  return metrics::render_prometheus(f, &st);
}

void Reactor::send_metrics(Connection& c) {
  flatbuffers::FlatBufferBuilder fbb(8192);
  const auto text = fbb.CreateString(metrics_text());
  send_control(c, finish_control(fbb, wire::ControlBody::MetricsReply, wire::CreateMetricsReply(fbb, text).Union()));
}

// Rendered here (in memory), written on the IoPool: a slow or full disk never stalls the reactor.
void Reactor::write_metrics_textfile() {
  next_textfile_ = std::chrono::steady_clock::now() + config_.metrics_interval;
  if (textfile_busy_->exchange(true)) return;  // the last write is still going: skip a turn, never pile up
  io_->post(0, [busy = textfile_busy_, path = config_.metrics_textfile, text = metrics_text()] {
    if (const auto why = metrics::write_textfile(path, text); !why.empty())
      log_text(LogLevel::Warn, "metrics_textfile_failed", "path=" + path + " reason=\"" + why + "\"");
    busy->store(false);
  });
}

void Reactor::cancel_job(Connection& c, std::uint64_t job) {
  flatbuffers::FlatBufferBuilder fbb(256);
  if (!services_) return refuse(c, false, wire::ErrorCode::UnknownJob, "this nexusd runs no jobs");
  const auto r = services_->cancel_job(job, c.peer.uid);
  if (!r.ok) return refuse(c, false, r.code, r.state_or_reason);
  NEXUS_LOG(info, "job_cancel", "job={} by_uid={}", job, c.peer.uid);
  send_control(c, finish_control(fbb, wire::ControlBody::CancelJobReply,
                                 wire::CreateCancelJobReply(fbb, job, fbb.CreateString(r.state_or_reason)).Union()));
}

void Reactor::scale(Connection& c, const wire::ScaleRequest& r) {
  if (c.peer.uid != 0 && c.peer.uid != ::geteuid())
    return refuse(c, false, wire::ErrorCode::PermissionDenied, "only root or nexusd's own user may scale it");
  if (!services_) return refuse(c, false, wire::ErrorCode::BadMessage, "this nexusd runs no services");
  const std::string what = r.what() ? r.what()->str() : "";
  const auto result = services_->scale(what, r.count());
  if (!result.ok) return refuse(c, false, result.code, result.message);
  NEXUS_LOG(info, "scale", "what={} count={} before={} after={} by_uid={}", what, r.count(), result.before, result.after,
            c.peer.uid);
  flatbuffers::FlatBufferBuilder fbb(256);
  send_control(c, finish_control(fbb, wire::ControlBody::ScaleReply,
                                 wire::CreateScaleReply(fbb, fbb.CreateString(what), result.before, result.after,
                                                        fbb.CreateString(result.message))
                                     .Union()));
}

void Reactor::drain(Connection& c) {
  if (c.peer.uid != 0 && c.peer.uid != ::geteuid())
    return refuse(c, false, wire::ErrorCode::PermissionDenied, "only root or nexusd's own user may drain it");
  NEXUS_LOG(info, "drain", "by_uid={} tenants={}", c.peer.uid, sessions_.size());
  flatbuffers::FlatBufferBuilder fbb(64);
  send_control(c, finish_control(fbb, wire::ControlBody::DrainReply,
                                 wire::CreateDrainReply(fbb, static_cast<std::uint32_t>(sessions_.size())).Union()));
  request_stop();  // the loop ends at its next turn; main then stops the services (checkpoints) and exits
}

void Reactor::release_tenant(Connection& c, const std::string& name) {
  const auto r = registry_.unbind(name, c.peer.uid);
  if (r.code != wire::ErrorCode::None) return refuse(c, false, r.code, r.reason);
  if (services_) services_->tenant_released(name);
  NEXUS_LOG(info, "tenant_released", "tenant={} by_uid={}", name, c.peer.uid);
  flatbuffers::FlatBufferBuilder fbb(128);
  send_control(c, finish_control(fbb, wire::ControlBody::ReleaseTenantReply,
                                 wire::CreateReleaseTenantReply(fbb, fbb.CreateString(name)).Union()));
}

}  // namespace nexus::daemon
