// The Master's routing (see master.hpp): model requests straight to the model service, the rest
// onto the tenant's lane.
#include "daemon/master/master.hpp"

#include <unistd.h>

#include <mutex>
#include <system_error>

#include "daemon/master/dataset_routes.hpp"
#include "daemon/master/env_routes.hpp"
#include "daemon/master/job_requests.hpp"
#include "daemon/master/master_impl.hpp"
#include "daemon/master/model_routes.hpp"
#include "daemon/master/wire_replies.hpp"

namespace nexus::daemon {

Master::Impl::Impl(const MasterConfig& c, Completion done)
    : config(c),
      complete(std::move(done)),
      accounting(std::make_shared<metrics::Accounting>()),
      model(c.model, accounting, &health),
      engines(c.rollout_listener >= 0 ? std::make_unique<env::EngineRegistry>(c.rollout_listener, c.engines, ::geteuid())
                                      : nullptr),
      autoscaler(engines ? std::make_unique<env::RolloutAutoscaler>(*engines, c.autoscale, c.autoscale_spawn,
                                                                    c.rollout_socket)
                         : nullptr),
      envs(c.env, env::session_factory(c.external_envs, c.external_timeouts, engines.get()), accounting.get(), &health),
      datasets(c.datasets),
      jobs(model, envs, datasets, c.jobs, &health) {
  accounting->record_timeline(c.record_timeline);
}

bool Master::Impl::charge(std::uint64_t session, const std::string& tenant, std::uint64_t bytes) {
  std::lock_guard lk(memory_mu);
  std::uint64_t total = 0;
  for (const auto& [s, held] : memory)
    if (held.first == tenant) total += held.second;
  if (total + bytes > config.request_bytes_per_tenant) return false;
  auto& held = memory[session];
  held.first = tenant;
  held.second += bytes;
  return true;
}

void Master::Impl::release(std::uint64_t session, std::uint64_t bytes) {
  std::lock_guard lk(memory_mu);
  auto it = memory.find(session);
  if (it == memory.end()) return;  // the tenant left: its charges went with it
  it->second.second -= std::min(bytes, it->second.second);
}

Master::Master(const MasterConfig& config, Completion complete)
    : impl_(std::make_unique<Impl>(config, std::move(complete))) {}

Master::~Master() = default;

void Master::submit(ServiceRequest r) {
  Impl* impl = impl_.get();
  // What the request holds while it waits: its message, and the batch a dataset step samples.
  std::uint64_t bytes = r.message.size();
  if (r.type == wire::Body::DatasetSftStepRequest) {
    const auto& bb = impl->model.backbone();
    const auto n = static_cast<std::uint64_t>(
        std::max(0, r.wire_message()->body_as_DatasetSftStepRequest()->batch()));
    bytes += n * static_cast<std::uint64_t>(bb.max_views * bb.image_size * bb.image_size * 3 + bb.max_tokens * 5);
  }
  const auto session = r.session_id, id = r.request_id;
  if (!impl->charge(session, r.tenant, bytes))
    return impl->complete(session, error_reply(id, wire::ErrorCode::QuotaExceeded,
                                               "this tenant's queued requests hold over " +
                                                   std::to_string(impl->config.request_bytes_per_tenant >> 20) +
                                                   " MiB ([daemon] request_mib_per_tenant): wait for replies"));
  auto answer = [impl, session, bytes](std::vector<std::uint8_t> reply) {
    impl->release(session, bytes);
    impl->complete(session, std::move(reply));
  };
  if (r.route == Route::Model) {
    auto done = [answer, id](model::Result res) { answer(model_reply(id, res)); };
    const auto* predict = r.type == wire::Body::PredictRequest
                              ? r.wire_message()->body_as_PredictRequest()
                              : nullptr;
    auto m = predict && predict->dataset() ? normalized_predict(impl->datasets, r, std::move(done))
                                           : to_model_request(r, std::move(done));
    if (auto* e = std::get_if<ModelRouteError>(&m)) return answer(error_reply(id, e->code, e->reason));
    impl->model.submit(std::move(std::get<model::Request>(m)));
    return;
  }
  const std::string tenant = r.tenant;
  auto shared = std::make_shared<ServiceRequest>(std::move(r));
  try {
    impl->lanes.post(tenant, [impl, shared, answer] { impl->on_lane(*shared, answer); });
  } catch (const std::system_error& e) {  // no thread for a new lane: this request fails, nothing else
    answer(error_reply(id, wire::ErrorCode::Internal, std::string("nexusd cannot start a thread: ") + e.what()));
  }
}

// A tenant's blocking work, in order, on its own lane.
void Master::Impl::on_lane(const ServiceRequest& r, const std::function<void(std::vector<std::uint8_t>)>& answer) {
  if (!r.alive->load()) return;  // the tenant left before its turn
  const auto image_size = static_cast<int>(model.backbone().image_size);
  switch (r.route) {  // the table of request kinds' (daemon/ipc/decode/request_decoder.cpp)
    case Route::Env: return answer(handle_env_request(envs, r, image_size));
    case Route::Dataset:
      if (r.type == wire::Body::DatasetLoadRequest)
        return answer(handle_dataset_load(datasets, r, image_size, model.backbone().max_views));
      return submit_dataset_sft_step(datasets, model, r, answer);
    case Route::Job: return answer(on_job_request(r));
    case Route::Model:    // submit() sent it to the model service
    case Route::Reactor:  // the front door answered it
      break;
  }
  answer(error_reply(r.request_id, wire::ErrorCode::Internal, "no service takes this request"));
}

// Jobs: start (SFT, evaluation, RL), status and cancellation, for the tenant that asks.
std::vector<std::uint8_t> Master::Impl::on_job_request(const ServiceRequest& r) {
  const auto* msg = r.wire_message();
  switch (r.type) {
    case wire::Body::RlStartRequest: {
      auto started = jobs.start_rl(r.tenant, r.uid, rl_job_spec(*msg->body_as_RlStartRequest()));
      if (auto* refused = std::get_if<JobRefused>(&started))
        return error_reply(r.request_id, wire_code(refused->code), refused->reason);
      flatbuffers::FlatBufferBuilder fbb(64);
      const auto first = std::get<std::pair<std::uint64_t, std::uint64_t>>(started).second;
      return finish_reply(fbb, r.request_id, wire::Body::RlStartReply, wire::CreateRlStartReply(fbb, first).Union());
    }
    case wire::Body::RlStatusRequest: return rl_status(r, msg->body_as_RlStatusRequest()->stop());
    case wire::Body::JobStartRequest: {
      auto started = jobs.start(r.tenant, r.uid, job_request(*msg->body_as_JobStartRequest()->spec()));
      if (auto* refused = std::get_if<JobRefused>(&started))
        return error_reply(r.request_id, wire_code(refused->code), refused->reason);
      flatbuffers::FlatBufferBuilder fbb(64);
      return finish_reply(fbb, r.request_id, wire::Body::JobStartReply,
                          wire::CreateJobStartReply(fbb, std::get<std::uint64_t>(started)).Union());
    }
    case wire::Body::JobStatusRequest: return job_status(r, *msg->body_as_JobStatusRequest());
    default: return error_reply(r.request_id, wire::ErrorCode::Internal, "no job request of this type");
  }
}

std::vector<std::uint8_t> Master::Impl::rl_status(const ServiceRequest& r, bool stop) {
  auto job = jobs.latest_rl(r.tenant);
  if (!job) return error_reply(r.request_id, wire::ErrorCode::JobFailed, "this tenant has no RL job");
  if (stop) {
    auto after = jobs.cancel(job->id, r.tenant, r.uid);
    if (auto* info = std::get_if<JobInfo>(&after)) job = *info;
  }
  const std::string state = rl_state_name(job->state);
  flatbuffers::FlatBufferBuilder fbb(256);
  const auto& rl = job->rl;
  std::vector<std::string> engines;
  std::vector<std::uint64_t> engine_steps;
  for (const auto& [name, steps] : rl.engine_steps) engines.push_back(name), engine_steps.push_back(steps);
  const auto engines_vector = fbb.CreateVectorOfStrings(engines);
  const auto steps_vector = fbb.CreateVector(engine_steps);
  auto body = wire::CreateRlStatusReply(fbb, fbb.CreateString(state), fbb.CreateString(job->error),
                                        static_cast<std::int32_t>(job->done), job->version, rl.first_version,
                                        rl.env_steps, rl.episodes, job->success_rate, job->mean_return, job->loss,
                                        rl.value_loss, rl.entropy, rl.records_dropped, rl.records_downweighted,
                                        job->seconds, rl.demo_loss, rl.records_behind, engines_vector, steps_vector,
                                        rl.interrupted_episodes, rl.split_minibatches, rl.observation_bytes);
  return finish_reply(fbb, r.request_id, wire::Body::RlStatusReply, body.Union());
}

std::vector<std::uint8_t> Master::Impl::job_status(const ServiceRequest& r, const wire::JobStatusRequest& q) {
  std::vector<JobInfo> found;
  if (q.job() == 0) {
    for (const auto& j : jobs.list(r.tenant))
      found.push_back(q.cancel() ? std::get<JobInfo>(jobs.cancel(j.id, r.tenant, r.uid)) : j);
  } else {
    auto job = q.cancel() ? jobs.cancel(q.job(), r.tenant, r.uid) : [&]() -> std::variant<JobInfo, JobRefused> {
      auto j = jobs.find(q.job());
      if (!j || j->tenant != r.tenant) return JobRefused{JobRefusal::UnknownJob, "no job " + std::to_string(q.job()) + " of yours"};
      return *j;
    }();
    if (auto* refused = std::get_if<JobRefused>(&job)) return error_reply(r.request_id, wire_code(refused->code), refused->reason);
    found.push_back(std::get<JobInfo>(job));
  }
  flatbuffers::FlatBufferBuilder fbb(256 + 128 * found.size());
  std::vector<flatbuffers::Offset<wire::JobInfo>> infos;
  for (const auto& j : found) infos.push_back(job_info(fbb, j));
  return finish_reply(fbb, r.request_id, wire::Body::JobStatusReply,
                      wire::CreateJobStatusReply(fbb, fbb.CreateVector(infos)).Union());
}

void Master::tenant_attached(const std::string& tenant, uid_t uid) {
  impl_->model.tenant_attached(tenant, uid);
  impl_->envs.tenant_attached(tenant, uid);
  impl_->jobs.tenant_attached(tenant);
}

void Master::tenant_detached(const std::string& tenant) {
  // Nobody waits for the tenant's answers any more: its lane's queue, jobs, sessions, datasets
  // and request charges go; its slot stays (for a reattach) until the idle eviction.
  impl_->lanes.close(tenant);
  impl_->jobs.tenant_detached(tenant);
  impl_->model.tenant_detached(tenant);
  impl_->envs.tenant_detached(tenant);
  impl_->datasets.tenant_detached(tenant);
  std::lock_guard lk(impl_->memory_mu);
  for (auto it = impl_->memory.begin(); it != impl_->memory.end();)
    it = it->second.first == tenant ? impl_->memory.erase(it) : std::next(it);
}

void Master::tenant_released(const std::string& tenant) { impl_->model.tenant_released(tenant); }

ServiceStatus Master::status(std::optional<double> usage_since_s) const {
  const auto m = impl_->model.stats();
  ServiceStatus s;
  s.backbone = impl_->model.backbone().name;
  for (const auto& r : m.replicas) {
    s.replicas.push_back({r.device, r.tenants, r.groups, r.samples, {}});
    for (const auto& l : r.lanes)
      s.replicas.back().lanes.push_back(
          {l.serves, l.turns_s, l.backbone_s, l.copy_s, l.heads_s, l.optimizer_s, l.lease_s, l.narrow_s});
  }
  s.groups = m.groups, s.requests = m.grouped_requests, s.samples = m.samples;
  s.input_bytes_packed = m.input_bytes_packed, s.rerun_groups = m.rerun_groups;
  s.split_steps = m.split_steps;
  s.adapters = m.adapters;
  const auto& fc = m.feature_cache;
  s.feature_cache = {fc.hits,    fc.misses, fc.disk_hits,    fc.inserts,    fc.evictions,
                     fc.entries, fc.bytes,  fc.disk_entries, fc.disk_bytes, impl_->config.model.feature_cache.bytes};
  s.inference_queued = m.inference_queued, s.training_queued = m.training_queued;
  s.slots_resident = m.slots_resident, s.slots_evicted = m.slots_evicted;
  s.longest_training_turn_s = m.longest_training_turn_s;
  s.longest_shared_training_turn_s = m.longest_shared_training_turn_s;
  s.env_sessions = impl_->envs.sessions();
  if (impl_->engines)
    for (const auto& e : impl_->engines->engines())
      s.engines.push_back({e.id, e.name, e.uid, e.shared, e.draining, e.capacity, e.sessions, e.steps, e.tasks});
  if (impl_->autoscaler) s.rollout_scaling = impl_->autoscaler->log().last;
  s.dataset_bytes = impl_->datasets.bytes();
  s.usage = impl_->accounting->snapshot(usage_since_s);
  for (const auto& [name, p] : impl_->config.model.tenants) s.weights[name] = p.weight;
  s.jobs = impl_->jobs.list();
  for (const auto& r : impl_->health.roles())
    if (r.failed)
      s.health.push_back(r.name + ": failed after " + std::to_string(r.restarts) + " restart(s): " + r.last_reason);
    else if (r.restarts > 0)
      s.health.push_back(r.name + ": " + std::to_string(r.restarts) + " restart(s), last: " + r.last_reason);
  s.health_restarts = impl_->health.restarts();
  for (const auto& u : impl_->model.user_usage()) s.users.push_back({u.uid, 0, u.slots, u.checkpoints, u.checkpoint_bytes});
  for (const auto& [uid, bytes] : impl_->jobs.observations_held()) {
    auto it = std::find_if(s.users.begin(), s.users.end(), [uid = uid](const UserStatus& u) { return u.uid == uid; });
    if (it == s.users.end()) it = s.users.insert(s.users.end(), UserStatus{static_cast<std::uint32_t>(uid)});
    it->rl_observation_bytes = bytes;
  }
  const auto& b = impl_->config.model.users;
  s.user_bounds = {0, b.slots, b.checkpoints, b.checkpoint_bytes, impl_->config.jobs.observation_bytes_per_uid};
  return s;
}

ServicePort::CancelResult Master::cancel_job(std::uint64_t job, uid_t requester) {
  auto r = impl_->jobs.cancel(job, "", requester);
  if (auto* refused = std::get_if<JobRefused>(&r)) return {false, wire_code(refused->code), refused->reason};
  return {true, wire::ErrorCode::None, job_state_name(std::get<JobInfo>(r).state)};
}

ServicePort::ScaleResult Master::scale(const std::string& what, int count) {
  using wire::ErrorCode;
  if (what == "infer" || what == "train")
    return {false, ErrorCode::BadMessage, 0, 0,
            "executor lanes are set at start ([model] inference_lanes, training_lanes; [model] devices adds "
            "replicas); changing them while nexusd runs is not built"};
  if (what != "rollout") return {false, ErrorCode::BadMessage, 0, 0, "nexusctl scale knows: rollout"};
  if (!impl_->engines) return {false, ErrorCode::BadMessage, 0, 0, "rollout engines are off ([rollout] socket = \"none\")"};
  const int most = impl_->config.engines.max_engines;
  if (count < 0 || count > most)
    return {false, ErrorCode::BadMessage, 0, 0, "count must be 0.." + std::to_string(most) + " ([rollout] max_engines)"};
  auto& scaler = *impl_->autoscaler;
  const int before = impl_->engines->live_engines() + scaler.starting();
  std::string done;
  if (count < before) {
    const int drained = impl_->engines->drain_least_busy(before - count);
    done = "draining " + std::to_string(drained) + " engine(s): their sessions move at their next episode, then they leave";
  } else if (count > before) {
    if (!scaler.can_start())
      return {false, ErrorCode::BadMessage, before, before,
              "nexusd has no command to start engines ([rollout] spawn, or nexus-rollout beside nexusd): start "
              "nexus-rollout@N units instead"};
    scaler.start(count - before, "nexusctl scale rollout " + std::to_string(count));
    done = "starting " + std::to_string(count - before) + " engine(s)";
  } else {
    done = "already " + std::to_string(count) + " engine(s)";
  }
  if (impl_->config.autoscale.max_engines > 0)
    done += "; autoscaling is on (" + std::to_string(impl_->config.autoscale.min_engines) + ".." +
            std::to_string(impl_->config.autoscale.max_engines) + " engines) and may change this";
  scaler.record("nexusctl scale rollout " + std::to_string(count) + ": " + done);
  return {true, ErrorCode::None, before, count, done};
}

std::vector<metrics::Interval> Master::timeline() const { return impl_->accounting->timeline(); }

}  // namespace nexus::daemon
