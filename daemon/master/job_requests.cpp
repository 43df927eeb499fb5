#include "daemon/master/job_requests.hpp"

namespace nexus::daemon {
namespace {

std::string text(const flatbuffers::String* s) { return s ? s->str() : ""; }

}  // namespace

JobRequest job_request(const wire::JobSpec& s) {
  JobRequest j;
  j.kind = text(s.kind());
  j.sft = {text(s.dataset()), s.steps(), s.batch(), s.chunk()};
  j.eval = {text(s.task()), s.version(), s.episodes(), s.seed()};
  return j;
}

RlJobSpec rl_job_spec(const wire::RlStartRequest& r) {
  RlJobSpec s;
  s.algorithm = text(r.algorithm()), s.task = text(r.task());
  s.sessions = r.sessions(), s.horizon = r.horizon(), s.group_size = r.group_size(), s.iterations = r.iterations();
  s.max_steps = r.max_steps(), s.seed = r.seed();
  s.epochs = r.epochs(), s.minibatch = r.minibatch();
  s.clip = r.clip(), s.gamma = r.gamma(), s.lambda = r.lambda(), s.entropy = r.entropy(), s.value_lr = r.value_lr();
  s.max_staleness = r.max_staleness(), s.downweight_stale = r.downweight_stale(), s.queue_capacity = r.queue_capacity();
  s.demo_dataset = text(r.demo_dataset()), s.demo_weight = r.demo_weight(), s.demo_batch = r.demo_batch();
  s.synchronous = r.synchronous();
  return s;
}

wire::ErrorCode wire_code(JobRefusal refusal) {
  switch (refusal) {
    case JobRefusal::BadSpec: return wire::ErrorCode::BadMessage;
    case JobRefusal::OverBound: return wire::ErrorCode::LimitExceeded;
    case JobRefusal::OverQuota: return wire::ErrorCode::QuotaExceeded;
    case JobRefusal::CannotStart: return wire::ErrorCode::JobFailed;
    case JobRefusal::UnknownJob: return wire::ErrorCode::UnknownJob;
    case JobRefusal::Stopping: return wire::ErrorCode::Internal;
  }
  return wire::ErrorCode::Internal;
}

}  // namespace nexus::daemon
