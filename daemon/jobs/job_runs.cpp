// What sft and eval jobs do, each on its own thread: requests to the model service (waited for
// one at a time, like a tenant's own program would) and the Environment Service.
#include <future>
#include <thread>

#include "daemon/fault/fault_plan.hpp"
#include "daemon/jobs/sampled_step.hpp"
#include "daemon/jobs/job.hpp"
#include "schema/tokenizer.hpp"

namespace nexus::daemon {
namespace {

// Submits and waits: the result, or a Failure (the service answers every request it takes).
// While it waits, the loop's heartbeat is not expected: the time is the model service's (queued
// behind other tenants' work on a busy box), and a loop restarted then would redo a step the
// service was already running (a fresh root saw step 21 of a 20-step job).
model::Result call(model::ModelService& model, model::Request m, Role* role) {
  auto p = std::make_shared<std::promise<model::Result>>();
  auto f = p->get_future();
  m.done = [p](model::Result r) { p->set_value(std::move(r)); };
  RoleIdle waiting(role);
  model.submit(std::move(m));
  return f.get();
}

std::string failure_of(const model::Result& r) {
  const auto* f = std::get_if<model::Failure>(&r);
  return f ? f->reason : "";
}

// An evaluation's observation buffers for n sessions (the request holds them alive).
struct EvalBuffers {
  std::int64_t n = 0, hw = 0, tokens_per = 0, state_dim = 0;
  std::vector<std::uint8_t> images, mask;
  std::vector<std::int32_t> tokens;
  std::vector<float> state;
};

}  // namespace

void JobRegistry::run_sft(Job& job, std::uint64_t generation) {
  const auto& s = job.sft;
  const std::string tenant = job.info.tenant;
  int first;
  {
    std::lock_guard lk(job.mu);
    first = static_cast<int>(job.info.done);  // after a restart: on from the last finished step
  }
  for (int step = first; step < s.steps; ++step) {
    if (superseded(job, generation)) return;
    if (job.role) job.role->beat();
    if (step == first + 2 && fault::at(fault::Point::JobStep) == fault::Action::Hang) {  // past the heartbeat
      std::this_thread::sleep_for(limits_.heartbeat * 3);
      if (superseded(job, generation)) return;
    }
    if (job.cancelled) return finish(job, JobState::Cancelled, "");
    std::shared_ptr<const env::SampledBatch> batch;
    try {
      batch = std::make_shared<env::SampledBatch>(
          datasets_.sample(tenant, s.dataset, s.batch, s.chunk, model_.backbone().max_tokens));
    } catch (const std::exception& e) {
      return finish(job, JobState::Failed, e.what());
    }
    const auto r = call(model_, sampled_sft_request(tenant, job.owner, std::move(batch), nullptr), job.role.get());
    if (superseded(job, generation)) return;
    if (const auto why = failure_of(r); !why.empty()) return finish(job, JobState::Failed, why);
    std::lock_guard lk(job.mu);
    job.info.done = step + 1;
    job.info.loss = std::get<model::Stepped>(r).loss;
  }
  if (!superseded(job, generation)) finish(job, JobState::Finished, "");
}

void JobRegistry::run_eval(Job& job, std::uint64_t generation) {
  const auto& e = job.eval;
  const std::string tenant = job.info.tenant;
  model::Request digest;
  digest.tenant = tenant;
  digest.op = model::op::Digest{};
  const auto d = call(model_, std::move(digest), job.role.get());
  if (const auto why = failure_of(d); !why.empty()) return finish(job, JobState::Failed, why);
  const std::uint64_t version = e.version ? e.version : std::get<model::SlotDigest>(d).latest_version;
  if (version == 0) return finish(job, JobState::Failed, "no published version: publish one (evaluation never reads the live head)");
  model_.pin_version(tenant, version);  // kept published while we read it
  struct Unpin {
    model::ModelService& m;
    const std::string& t;
    std::uint64_t v;
    ~Unpin() { m.unpin_version(t, v); }
  } unpin{model_, tenant, version};
  {
    std::lock_guard lk(job.mu);
    job.info.version = version;
  }
  const auto& bb = model_.backbone();
  env::EnvService::Opened opened;
  try {
    opened = envs_.open(tenant, e.task, e.episodes, static_cast<int>(bb.image_size), 0);
  } catch (const std::exception& ex) {
    return finish(job, JobState::Failed, ex.what());
  }
  struct Close {
    env::EnvService& envs;
    const std::string& t;
    const std::vector<std::uint64_t>& ids;
    ~Close() { envs.close(t, ids); }
  } close{envs_, tenant, opened.ids};

  const auto n = static_cast<std::int64_t>(opened.ids.size());
  auto buf = std::make_shared<EvalBuffers>();
  buf->n = n, buf->hw = bb.image_size, buf->tokens_per = bb.max_tokens, buf->state_dim = opened.spec.state_dim;
  const auto image_bytes = static_cast<std::size_t>(bb.image_size * bb.image_size * 3);
  buf->images.resize(static_cast<std::size_t>(n) * image_bytes);
  buf->tokens.resize(static_cast<std::size_t>(n * bb.max_tokens));
  buf->mask.resize(buf->tokens.size());
  buf->state.resize(static_cast<std::size_t>(n * opened.spec.state_dim));
  std::vector<std::uint64_t> seeds;
  for (std::int64_t i = 0; i < n; ++i) seeds.push_back(e.seed + static_cast<std::uint64_t>(i));
  auto reset = envs_.reset(tenant, opened.ids, seeds, buf->images.data(), buf->state.data());
  for (std::int64_t i = 0; i < n; ++i) {
    if (!reset[static_cast<std::size_t>(i)].error.empty()) return finish(job, JobState::Failed, reset[static_cast<std::size_t>(i)].error);
    schema::tokenize_bytes(reset[static_cast<std::size_t>(i)].instruction, &buf->tokens[static_cast<std::size_t>(i * bb.max_tokens)],
                           &buf->mask[static_cast<std::size_t>(i * bb.max_tokens)], bb.max_tokens);
  }
  std::vector<bool> live(static_cast<std::size_t>(n), true);
  int successes = 0, ended = 0;
  double total_return = 0;
  for (int t = 0; t < opened.spec.max_steps && ended < n; ++t) {
    if (superseded(job, generation)) return;  // a restart runs the evaluation again from the start
    if (job.role) job.role->beat();
    if (job.cancelled) return finish(job, JobState::Cancelled, "");
    model::Request predict;
    predict.tenant = tenant;
    model::op::Predict p;
    p.version = version;
    p.obs.images = {buf->images.data(), model::DType::UInt8, {n, 1, bb.image_size, bb.image_size, 3}};
    p.obs.tokens = {buf->tokens.data(), model::DType::Int32, {n, bb.max_tokens}};
    p.obs.mask = {buf->mask.data(), model::DType::UInt8, {n, bb.max_tokens}};
    if (buf->state_dim > 0) p.obs.state = {buf->state.data(), model::DType::Float32, {n, buf->state_dim}};
    predict.op = std::move(p);
    predict.keepalive = buf;
    const auto r = call(model_, std::move(predict), job.role.get());
    if (const auto why = failure_of(r); !why.empty()) return finish(job, JobState::Failed, why);
    const auto& pred = std::get<model::Predicted>(r);
    const auto per_row = static_cast<std::size_t>(pred.shape[1] * pred.shape[2]);  // chunk x action_dim
    const auto adim = static_cast<std::size_t>(pred.shape[2]);
    std::vector<std::uint64_t> ids;
    std::vector<std::size_t> rows;
    std::vector<float> actions;
    for (std::size_t i = 0; i < live.size(); ++i)
      if (live[i]) {
        ids.push_back(opened.ids[i]);
        rows.push_back(i);
        actions.insert(actions.end(), pred.actions.begin() + static_cast<long>(i * per_row),
                       pred.actions.begin() + static_cast<long>(i * per_row + adim));  // the chunk's first action
      }
    std::vector<std::uint8_t> images(rows.size() * image_bytes);
    std::vector<float> state(rows.size() * static_cast<std::size_t>(buf->state_dim));
    const auto out = envs_.step(tenant, ids, actions, images.data(), state.data());
    for (std::size_t j = 0; j < rows.size(); ++j) {
      const auto i = rows[j];
      if (!out[j].error.empty()) return finish(job, JobState::Failed, out[j].error);
      std::copy_n(&images[j * image_bytes], image_bytes, &buf->images[i * image_bytes]);
      const auto sd = static_cast<std::size_t>(buf->state_dim);
      std::copy_n(&state[j * sd], sd, &buf->state[i * sd]);
      total_return += out[j].outcome.reward;
      if (out[j].outcome.done) {
        live[i] = false;
        ++ended;
        successes += out[j].outcome.success;
      }
    }
    std::lock_guard lk(job.mu);
    job.info.done = ended;
    job.info.success_rate = ended ? double(successes) / ended : 0;
    job.info.mean_return = total_return / static_cast<double>(n);
  }
  if (superseded(job, generation)) return;
  {
    std::lock_guard lk(job.mu);
    job.info.done = n;
    job.info.success_rate = double(successes) / static_cast<double>(n);
  }
  finish(job, JobState::Finished, "");
}

}  // namespace nexus::daemon
