// Client calls for datasets, Environment Service sessions and RL jobs (nexus/env.hpp).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <mutex>

#include "client_state.hpp"
#include "nexus/client.hpp"
#include "schema/control_frame.hpp"

namespace nexus {
namespace {

using detail::reply_message;

flatbuffers::Offset<wire::TensorRef> ref_to(flatbuffers::FlatBufferBuilder& fbb, const Tensor& t) {
  return wire::CreateTensorRef(fbb, t.offset(), t.bytes(), static_cast<wire::DType>(t.dtype()),
                               fbb.CreateVector(t.shape()), t.region());
}

template <class V>
std::vector<bool> flags(const V* v) {
  std::vector<bool> out;
  if (v) for (auto x : *v) out.push_back(x != 0);
  return out;
}

std::vector<std::string> strings(const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* v) {
  std::vector<std::string> out;
  if (v)
    for (const auto* s : *v) out.push_back(s ? s->str() : "");
  return out;
}

EnvStepResult step_result(const std::vector<std::uint8_t>& bytes) {
  const auto* r = reply_message(bytes, wire::Body::EnvStepReply)->body_as_EnvStepReply();
  EnvStepResult out;
  if (r->reward()) out.reward.assign(r->reward()->begin(), r->reward()->end());
  out.done = flags(r->done());
  out.success = flags(r->success());
  out.failed = flags(r->failed());
  out.truncated = flags(r->truncated());
  if (r->instructions()) for (const auto* s : *r->instructions()) out.instructions.push_back(s ? s->str() : "");
  if (r->errors()) for (const auto* s : *r->errors()) out.errors.push_back(s ? s->str() : "");
  out.engines = strings(r->engines());
  out.interrupted = strings(r->interrupted());
  out.engines.resize(out.reward.size());  // an older nexusd names none
  out.interrupted.resize(out.reward.size());
  return out;
}


std::vector<float> floats(const flatbuffers::Vector<float>* v) {
  return v ? std::vector<float>(v->begin(), v->end()) : std::vector<float>{};
}

DatasetInfo dataset_info(const wire::DatasetLoadReply& r) {
  DatasetInfo d;
  d.episodes = r.episodes();
  d.train_episodes = r.train_episodes();
  d.valid_episodes = r.valid_episodes();
  d.samples = r.samples();
  d.state_dim = r.state_dim();
  d.action_dim = r.action_dim();
  d.layout = r.layout() ? r.layout()->str() : "";
  d.views = strings(r.views());
  d.state_keys = strings(r.state_keys());
  d.source_image_size = r.source_image_size();
  d.normalized = r.normalized();
  d.action_mean = floats(r.action_mean());
  d.action_std = floats(r.action_std());
  d.state_mean = floats(r.state_mean());
  d.state_std = floats(r.state_std());
  return d;
}

}  // namespace

DatasetInfo Client::dataset_load(const std::string& name, const std::string& path, std::uint64_t seed) {
  DatasetOptions options;
  options.seed = seed;
  return dataset_load(name, path, options);
}

DatasetInfo Client::dataset_load(const std::string& name, const std::string& path, const DatasetOptions& options) {
  // Opened here, so that the kernel checks *your* permissions; nexusd only ever gets the file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    throw Error(e == EACCES || e == EPERM ? ErrorCode::PermissionDenied : ErrorCode::BadDataset,
                "cannot read " + path + ": " + std::strerror(e));
  }
  // One descriptor-carrying request at a time, until its reply: nexusd pairs it with the newest
  // descriptor, which must be this one.
  std::lock_guard lock(state_->descriptor_mu);
  const std::uint8_t marker = 0;
  const bool sent = schema::send_frame(state_->attachment->socket, {&marker, 1}, {&fd, 1});
  ::close(fd);  // nexusd holds its own copy now
  if (!sent) throw Error(ErrorCode::DaemonGone, "the control socket closed");
  const auto id = state_->submit(wire::Body::DatasetLoadRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    const auto n = fbb.CreateString(name);
    const auto views = fbb.CreateVectorOfStrings(options.views), keys = fbb.CreateVectorOfStrings(options.state_keys);
    const auto instruction = fbb.CreateString(options.instruction);
    return wire::CreateDatasetLoadRequest(fbb, n, options.seed, views, keys, options.normalize, instruction).Union();
  });
  try {
    const auto bytes = state_->wait_reply(id, std::chrono::steady_clock::now() + state_->options.timeout);
    const auto* r = reply_message(bytes, wire::Body::DatasetLoadReply)->body_as_DatasetLoadReply();
    return dataset_info(*r);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::BadDataset) throw Error(ErrorCode::BadDataset, path + ": " + e.what());
    throw;
  }
}

Future<SftResult> Client::dataset_sft_step_async(const std::string& name, std::int32_t batch, std::int32_t chunk) {
  const auto id = state_->submit(wire::Body::DatasetSftStepRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    return wire::CreateDatasetSftStepRequest(fbb, fbb.CreateString(name), batch, chunk).Union();
  });
  return Future<SftResult>(state_.get(), id);
}

SftResult Client::dataset_sft_step(const std::string& name, std::int32_t batch, std::int32_t chunk) {
  return dataset_sft_step_async(name, batch, chunk).get();
}

EnvSessions Client::env_open(const std::string& task, std::int32_t count, std::int32_t max_steps) {
  const auto id = state_->submit(wire::Body::EnvOpenRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    return wire::CreateEnvOpenRequest(fbb, fbb.CreateString(task), count, max_steps).Union();
  });
  const auto bytes = state_->wait_reply(id, std::chrono::steady_clock::now() + state_->options.timeout);
  const auto* r = reply_message(bytes, wire::Body::EnvOpenReply)->body_as_EnvOpenReply();
  EnvSessions s;
  if (r->sessions()) s.ids.assign(r->sessions()->begin(), r->sessions()->end());
  s.image_size = r->image_size(), s.state_dim = r->state_dim(), s.action_dim = r->action_dim(), s.max_steps = r->max_steps();
  return s;
}

EnvStepResult Client::env_reset(std::span<const std::uint64_t> ids, std::span<const std::uint64_t> seeds,
                                const Tensor& images, const Tensor& state) {
  const auto id = state_->submit(wire::Body::EnvStepRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    auto i = fbb.CreateVector(ids.data(), ids.size());
    auto sd = fbb.CreateVector(seeds.data(), seeds.size());
    auto im = ref_to(fbb, images);
    auto st = ref_to(fbb, state);
    return wire::CreateEnvStepRequest(fbb, i, 0, sd, im, st).Union();
  });
  return step_result(state_->wait_reply(id, std::chrono::steady_clock::now() + state_->options.timeout));
}

EnvStepResult Client::env_step(std::span<const std::uint64_t> ids, std::span<const float> actions, const Tensor& images,
                               const Tensor& state) {
  const auto id = state_->submit(wire::Body::EnvStepRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    auto i = fbb.CreateVector(ids.data(), ids.size());
    auto a = fbb.CreateVector(actions.data(), actions.size());
    auto im = ref_to(fbb, images);
    auto st = ref_to(fbb, state);
    return wire::CreateEnvStepRequest(fbb, i, a, 0, im, st).Union();
  });
  return step_result(state_->wait_reply(id, std::chrono::steady_clock::now() + state_->options.timeout));
}

std::uint32_t Client::env_close(std::span<const std::uint64_t> ids) {
  const auto id = state_->submit(wire::Body::EnvCloseRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    return wire::CreateEnvCloseRequest(fbb, fbb.CreateVector(ids.data(), ids.size())).Union();
  });
  const auto bytes = state_->wait_reply(id, std::chrono::steady_clock::now() + state_->options.timeout);
  return reply_message(bytes, wire::Body::EnvCloseReply)->body_as_EnvCloseReply()->closed();
}

std::uint64_t Client::rl_start(const RlOptions& o) {
  const auto id = state_->submit(wire::Body::RlStartRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    return wire::CreateRlStartRequest(fbb, fbb.CreateString(o.algorithm), fbb.CreateString(o.task), o.sessions, o.horizon,
                                      o.group_size, o.iterations, o.max_steps, o.seed, o.epochs, o.minibatch, o.clip,
                                      o.gamma, o.lambda, o.entropy, o.value_lr, o.max_staleness, o.downweight_stale,
                                      o.queue_capacity, fbb.CreateString(o.demo_dataset), o.demo_weight, o.demo_batch,
                                      o.synchronous)
        .Union();
  });
  const auto bytes = state_->wait_reply(id, std::chrono::steady_clock::now() + state_->options.timeout);
  return reply_message(bytes, wire::Body::RlStartReply)->body_as_RlStartReply()->first_version();
}

RlStatus Client::rl_status(bool stop) {
  const auto id = state_->submit(wire::Body::RlStatusRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    return wire::CreateRlStatusRequest(fbb, stop).Union();
  });
  const auto bytes = state_->wait_reply(id, std::chrono::steady_clock::now() + state_->options.timeout);
  const auto* r = reply_message(bytes, wire::Body::RlStatusReply)->body_as_RlStatusReply();
  RlStatus s;
  s.state = r->state() ? r->state()->str() : "";
  s.error = r->error() ? r->error()->str() : "";
  s.iterations = r->iterations(), s.version = r->version(), s.first_version = r->first_version();
  s.env_steps = r->env_steps(), s.episodes = r->episodes();
  s.recent_success = r->recent_success(), s.recent_return = r->recent_return();
  s.policy_loss = r->policy_loss(), s.value_loss = r->value_loss(), s.entropy = r->entropy();
  s.records_dropped = r->records_dropped(), s.records_downweighted = r->records_downweighted();
  s.seconds = r->seconds();
  s.demo_loss = r->demo_loss();
  s.records_behind = r->records_behind();
  if (r->engines() && r->engine_steps() && r->engines()->size() == r->engine_steps()->size())
    for (flatbuffers::uoffset_t i = 0; i < r->engines()->size(); ++i)
      s.engine_steps[r->engines()->Get(i)->str()] = r->engine_steps()->Get(i);
  s.interrupted_episodes = r->interrupted_episodes();
  s.split_minibatches = r->split_minibatches(), s.observation_bytes = r->observation_bytes();
  return s;
}

namespace {

JobInfo job_of(const wire::JobInfo* j) {
  auto str = [](const flatbuffers::String* s) { return s ? s->str() : std::string(); };
  return {j->id(), str(j->tenant()), str(j->kind()), str(j->state()), str(j->error()), j->done(), j->total(),
          j->loss(), j->success_rate(), j->mean_return(), j->version(), j->seconds()};
}

std::vector<JobInfo> jobs_of(const std::vector<std::uint8_t>& bytes) {
  const auto* r = detail::reply_message(bytes, wire::Body::JobStatusReply)->body_as_JobStatusReply();
  std::vector<JobInfo> out;
  if (r->jobs())
    for (const auto* j : *r->jobs()) out.push_back(job_of(j));
  return out;
}

}  // namespace

std::uint64_t Client::job_start(const JobSpec& s) {
  const auto id = state_->submit(wire::Body::JobStartRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    auto spec = wire::CreateJobSpec(fbb, fbb.CreateString(s.kind), fbb.CreateString(s.dataset), s.steps, s.batch,
                                    s.chunk, fbb.CreateString(s.task), s.version, s.episodes, s.seed);
    return wire::CreateJobStartRequest(fbb, spec).Union();
  });
  const auto bytes = state_->wait_reply(id, std::chrono::steady_clock::now() + state_->options.timeout);
  return detail::reply_message(bytes, wire::Body::JobStartReply)->body_as_JobStartReply()->job();
}

namespace {
std::vector<JobInfo> job_request(detail::ClientState& state, std::uint64_t job, bool cancel) {
  const auto id = state.submit(wire::Body::JobStatusRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    return wire::CreateJobStatusRequest(fbb, job, cancel).Union();
  });
  return jobs_of(state.wait_reply(id, std::chrono::steady_clock::now() + state.options.timeout));
}
}  // namespace

JobInfo Client::job(std::uint64_t id) {
  auto j = job_request(*state_, id, false);
  if (j.size() != 1) throw Error(ErrorCode::BadMessage, "a job status reply without its job");
  return j.front();
}
std::vector<JobInfo> Client::jobs() { return job_request(*state_, 0, false); }
JobInfo Client::job_cancel(std::uint64_t id) {
  auto j = job_request(*state_, id, true);
  if (j.size() != 1) throw Error(ErrorCode::BadMessage, "a job status reply without its job");
  return j.front();
}

}  // namespace nexus
