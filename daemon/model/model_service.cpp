#include "daemon/model/model_service.hpp"

#include <torch/torch.h>

#include <condition_variable>
#include <deque>
#include <filesystem>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include "daemon/env/env_requests.hpp"
#include "datasets/demo_file.hpp"
#include "daemon/env/env_service.hpp"
#include "daemon/env/external_session.hpp"
#include "daemon/rl/rl_job.hpp"

#include "daemon/ipc/decode/reply_builder.hpp"
#include "daemon/log/log_text.hpp"
#include "daemon/model/backbone.hpp"
#include "daemon/model/tenant_slot.hpp"
#include "daemon/model/torchscript_backbone.hpp"
#include "schema/protocol.hpp"
#include "schema/tensor_ref.hpp"

namespace nexus::daemon {

// The daemon's own work on the executor: an RL job's rollout step (grouped with the tenants'
// requests like a PredictRequest) or a function on the tenant's slot (an update).
struct InternalWork {
  torch::Tensor images, tokens, mask, state;  // act, or an SFT step with `actions`
  torch::Tensor actions;
  std::promise<rl::PolicyPort::Acted> acted;
  std::function<void(model::TenantSlot&)> on_slot;  // slot work
  std::promise<void> slot_done;
  // An SFT step on a batch the daemon sampled: its result, or the error code and reason.
  std::function<void(const model::StepResult&, wire::ErrorCode, const std::string&)> sft_done;
  void fail(const std::string& why, wire::ErrorCode code = wire::ErrorCode::Internal) {
    if (sft_done) return sft_done({}, code, why);
    auto e = std::make_exception_ptr(std::runtime_error(why));
    if (on_slot) slot_done.set_exception(e); else acted.set_exception(e);
  }
};

namespace {

bool is_front_work(wire::Body t) {
  return t == wire::Body::EnvOpenRequest || t == wire::Body::EnvStepRequest || t == wire::Body::EnvCloseRequest ||
         t == wire::Body::RlStartRequest || t == wire::Body::RlStatusRequest || t == wire::Body::DatasetLoadRequest ||
         t == wire::Body::DatasetSftStepRequest;
}

using Clock = sched::Clock;

bool batchable(wire::Body t) { return t == wire::Body::SftStepRequest || t == wire::Body::PredictRequest; }

const wire::Observation* observation_of(const wire::Message* m) {
  if (m->body_type() == wire::Body::SftStepRequest) return m->body_as_SftStepRequest()->obs();
  if (m->body_type() == wire::Body::PredictRequest) return m->body_as_PredictRequest()->obs();
  return nullptr;
}

// Limits on what a tenant may register (heads are small by design; this bounds daemon memory).
constexpr std::int32_t kMaxActionDim = 64, kMaxChunk = 64, kMaxStateDim = 1024, kMaxHidden = 4096, kMaxFlowSteps = 100;
constexpr std::int64_t kMaxSamplesPerRequest = 4096;

struct Slot {
  std::unique_ptr<model::TenantSlot> trainer;
  std::int64_t views = 1;
};

// A request's tensors, bound in place to the tenant's arena.
struct Bound {
  ModelWork* work = nullptr;
  const wire::Message* msg = nullptr;
  Slot* slot = nullptr;
  std::int64_t n = 0;
  torch::Tensor images, tokens, mask, state, actions;
};

}  // namespace

struct ModelService::Impl {
  Impl(const ModelConfig& c, Completion done) : config(c), complete(std::move(done)) {}

  // Rejects a request with a typed error reply.
  void fail(const ModelWork& w, wire::ErrorCode code, const std::string& reason) {
    if (w.internal) return w.internal->fail(reason, code);
    log_text(LogLevel::Debug, "model_error",
             "tenant=" + w.tenant + " request=" + std::to_string(w.request_id) + " code=" +
                 wire::EnumNameErrorCode(code) + " reason=\"" + reason + "\"");
    reply(w, replies.error(w.request_id, code, reason));
  }
  void reply(const ModelWork& w, std::span<const std::uint8_t> bytes) {
    complete(w.session_id, std::vector<std::uint8_t>(bytes.begin(), bytes.end()));
  }

  sched::PendingRequest view_of(const ModelWork& w) const {
    sched::PendingRequest v;
    v.tenant = std::hash<std::string>{}(w.tenant);
    v.batchable = batchable(w.type);
    v.arrival = w.arrival;
    v.samples = 1;
    if (w.internal) {
      if (v.batchable) v.samples = static_cast<std::uint32_t>(w.internal->images.size(0)), v.key = 1;
      return v;
    }
    if (v.batchable) {
      const auto* obs = observation_of(wire::GetMessage(w.message.data()));
      const auto* shape = obs && obs->images() ? obs->images()->shape() : nullptr;
      if (shape && shape->size() == 5) {
        v.samples = static_cast<std::uint32_t>(std::clamp<std::int64_t>(shape->Get(0), 1, kMaxSamplesPerRequest));
        v.key = static_cast<std::uint64_t>(std::clamp<std::int64_t>(shape->Get(1), 0, 64));  // views
      }
    }
    return v;
  }

  void run() {
    // A fixed thread count for the daemon's life: reductions split across threads the same way
    // in every pass (deterministic mode relies on it).
    torch::set_num_threads(config.torch_threads > 0 ? config.torch_threads
                                                    : static_cast<int>(std::thread::hardware_concurrency()));
    if (config.deterministic) at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
    for (;;) {
      std::vector<ModelWork> batch;
      {
        std::unique_lock lk(mu);
        cv.wait(lk, [&] { return stop || !queue.empty(); });
        if (stop) return;
        std::vector<sched::PendingRequest> views;
        views.reserve(queue.size());
        for (const auto& w : queue) views.push_back(view_of(w));
        const auto d = sched::decide(views, Clock::now(), config.batch, std::max<std::size_t>(1, active.size()));
        if (d.take.empty()) {
          cv.wait_for(lk, d.wait);
          continue;
        }
        for (auto i : d.take) batch.push_back(std::move(queue[i]));
        for (auto it = d.take.rbegin(); it != d.take.rend(); ++it) queue.erase(queue.begin() + static_cast<long>(*it));
      }
      // run_group and run_single answer every live request exactly once, errors included.
      if (batchable(batch.front().type))
        run_group(batch);
      else
        run_single(batch.front());
    }
  }

  void run_single(ModelWork& w) {
    if (!w.alive->load()) return;
    if (w.internal) {
      auto it = slots.find(w.tenant);
      if (it == slots.end()) return w.internal->fail("the tenant has no slot: register it first");
      try {
        w.internal->on_slot(*it->second.trainer);
        w.internal->slot_done.set_value();
      } catch (const std::exception& e) {
        w.internal->fail(e.what());
      }
      return;
    }
    const auto* msg = wire::GetMessage(w.message.data());
    if (w.type == wire::Body::RegisterRequest) return register_tenant(w, *msg->body_as_RegisterRequest());
    if (w.type == wire::Body::LoadRequest) return load(w, msg->body_as_LoadRequest()->tag()->str());
    if (w.type == wire::Body::BackboneRequest) return reply(w, backbone_info(w.request_id));
    auto it = slots.find(w.tenant);
    if (it == slots.end()) return fail(w, wire::ErrorCode::NotRegistered, "register the tenant first");
    if (w.type == wire::Body::SaveRequest) return save(w, it->second, msg->body_as_SaveRequest()->tag()->str());
    if (w.type == wire::Body::SlotDigestRequest) {
      const auto d = it->second.trainer->digest();
      return reply(w, replies.slot_digest(w.request_id, d.parameters, d.optimizer, static_cast<std::uint64_t>(d.step)));
    }
    reply(w, replies.published(w.request_id, it->second.trainer->publish()));
  }

  // Tags are checked by the decoder ([A-Za-z0-9._-], no ".."); tenant names by the registry.
  std::filesystem::path checkpoint_path(const std::string& tenant, const std::string& tag) const {
    return std::filesystem::path(config.state_dir) / "checkpoints" / tenant / tag;
  }

  void save(ModelWork& w, Slot& slot, const std::string& tag) {
    const auto path = checkpoint_path(w.tenant, tag);
    try {
      std::filesystem::create_directories(path.parent_path());
      slot.trainer->save(path.string(), {{"tenant", w.tenant}, {"views", slot.views}});
    } catch (const std::exception& e) {
      return fail(w, wire::ErrorCode::Internal, std::string("cannot save checkpoint: ") + e.what());
    }
    log_text(LogLevel::Info, "checkpoint_saved", "tenant=" + w.tenant + " path=" + path.string());
    reply(w, replies.saved(w.request_id, static_cast<std::uint64_t>(slot.trainer->steps())));
  }

  void load(ModelWork& w, const std::string& tag) {
    const auto path = checkpoint_path(w.tenant, tag);
    if (!std::filesystem::exists(path.string() + ".safetensors"))
      return fail(w, wire::ErrorCode::BadMessage, "no checkpoint '" + tag + "' for this tenant");
    try {
      auto loaded = model::TenantSlot::load(path.string(), backbone->config().dim);
      const std::int64_t views = loaded.manifest.at("extra").value("views", 1);
      const auto step = loaded.slot->steps();
      slots[w.tenant] = Slot{std::move(loaded.slot), views};
      {
        std::lock_guard lk(mu);
        active.insert(w.tenant);
      }
      reply(w, replies.loaded(w.request_id, static_cast<std::uint64_t>(step)));
    } catch (const std::exception& e) {
      fail(w, wire::ErrorCode::BadMessage, e.what());
    }
  }

  void register_tenant(ModelWork& w, const wire::RegisterRequest& r) {
    const auto& bb = backbone->config();
    const auto* h = r.head();  // presence checked by the decoder
    model::HeadSpec spec{h->kind()->str(), h->state_dim(), h->action_dim(), h->chunk(), h->hidden(), h->flow_steps(),
                         h->flow_noise()};
    auto out_of = [](std::int64_t v, std::int64_t lo, std::int64_t hi) { return v < lo || v > hi; };
    if (out_of(r.views(), 1, bb.max_views) || out_of(spec.action_dim, 1, kMaxActionDim) ||
        out_of(spec.chunk, 1, kMaxChunk) || out_of(spec.state_dim, 0, kMaxStateDim) ||
        out_of(spec.hidden, 1, kMaxHidden) || out_of(spec.flow_steps, 1, kMaxFlowSteps) ||
        !(spec.flow_noise > 0 && spec.flow_noise <= 100))
      return fail(w, wire::ErrorCode::BadMessage,
                  "schema out of range: views 1.." + std::to_string(bb.max_views) + ", action_dim 1..64, chunk 1..64, "
                  "state_dim 0..1024, hidden 1..4096, flow_steps 1..100, flow_noise (0, 100]");
    model::OptimizerConfig opt;
    if (const auto* o = r.optimizer()) opt = {o->lr(), o->beta1(), o->beta2(), o->weight_decay(), o->grad_clip()};
    if (!(opt.lr > 0 && opt.lr < 10) || !(opt.beta1 >= 0 && opt.beta1 < 1) || !(opt.beta2 >= 0 && opt.beta2 < 1) ||
        !(opt.weight_decay >= 0) || !(opt.grad_clip >= 0))
      return fail(w, wire::ErrorCode::BadMessage, "optimizer settings out of range");
    try {
      Slot slot{std::make_unique<model::TenantSlot>(spec, opt, bb.dim, r.seed()), r.views()};
      slots[w.tenant] = std::move(slot);
    } catch (const std::invalid_argument& e) {
      return fail(w, wire::ErrorCode::BadMessage, e.what());
    }
    {
      std::lock_guard lk(mu);
      active.insert(w.tenant);
    }
    log_text(LogLevel::Info, "register",
             "tenant=" + w.tenant + " head=" + spec.kind + " views=" + std::to_string(r.views()) +
                 " state_dim=" + std::to_string(spec.state_dim) + " action_dim=" + std::to_string(spec.action_dim) +
                 " chunk=" + std::to_string(spec.chunk));
    reply(w, backbone_info(w.request_id));
  }

  std::span<const std::uint8_t> backbone_info(std::uint64_t request_id) {
    const auto& bb = backbone->config();
    return replies.registered(request_id, bb.name, static_cast<std::int32_t>(bb.image_size),
                              static_cast<std::int32_t>(bb.max_views), static_cast<std::int32_t>(bb.max_tokens),
                              static_cast<std::int32_t>(bb.dim));
  }

  // Binds a tensor reference to the arena without copying; "" or the reason it does not fit.
  std::string bind(const wire::TensorRef* ref, const char* name, wire::DType dtype,
                   const std::vector<std::int64_t>& shape, const TenantSegment& seg, torch::Tensor& out) {
    const auto check = schema::check_tensor_ref(ref, seg.layout().client_arena_bytes);
    if (!check) return std::string(name) + ": " + check.reason;
    std::vector<std::int64_t> got(ref->shape()->begin(), ref->shape()->end());
    if (ref->dtype() != dtype || got != shape) {
      std::string want = schema::dtype_name(dtype) + std::string(" [");
      for (std::size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
      return std::string(name) + " must be " + want + "]";
    }
    const auto type = dtype == wire::DType::UInt8   ? torch::kUInt8
                      : dtype == wire::DType::Int32 ? torch::kInt32
                                                    : torch::kFloat32;
    // The arena is the tenant's: we only read it. A tenant that writes while we read harms itself.
    out = torch::from_blob(const_cast<std::uint8_t*>(seg.client_arena()) + check.offset, shape,
                           torch::TensorOptions().dtype(type));
    return "";
  }

  std::string bind_request(Bound& b) {
    const auto& bb = backbone->config();
    const auto& spec = b.slot->trainer->head().spec();
    const auto* obs = observation_of(b.msg);
    const auto* img_shape = obs->images()->shape();
    if (!img_shape || img_shape->size() != 5 || img_shape->Get(0) < 1 || img_shape->Get(0) > kMaxSamplesPerRequest)
      return "images must be uint8 [n, views, H, W, 3] with 1 <= n <= " + std::to_string(kMaxSamplesPerRequest);
    b.n = img_shape->Get(0);
    const auto& seg = *b.work->segment;
    std::string e = bind(obs->images(), "images", wire::DType::UInt8, {b.n, b.slot->views, bb.image_size, bb.image_size, 3},
                         seg, b.images);
    if (e.empty()) e = bind(obs->tokens(), "tokens", wire::DType::Int32, {b.n, bb.max_tokens}, seg, b.tokens);
    if (e.empty()) e = bind(obs->token_mask(), "token_mask", wire::DType::UInt8, {b.n, bb.max_tokens}, seg, b.mask);
    if (e.empty() && spec.state_dim > 0) {
      if (!obs->state()) return "this tenant's schema has state_dim " + std::to_string(spec.state_dim) + ": state missing";
      e = bind(obs->state(), "state", wire::DType::Float32, {b.n, spec.state_dim}, seg, b.state);
    }
    if (e.empty() && b.msg->body_type() == wire::Body::SftStepRequest)
      e = bind(b.msg->body_as_SftStepRequest()->actions(), "actions", wire::DType::Float32,
               {b.n, spec.chunk, spec.action_dim}, seg, b.actions);
    return e;
  }

  void run_group(std::vector<ModelWork>& group) {
    std::vector<Bound> bound;
    for (auto& w : group) {
      if (!w.alive->load()) continue;  // detached meanwhile: cancelled, nobody to answer
      Bound b;
      b.work = &w;
      auto it = slots.find(w.tenant);
      if (it == slots.end()) {
        fail(w, wire::ErrorCode::NotRegistered, "register the tenant (head and data schema) first");
        continue;
      }
      b.slot = &it->second;
      if (w.internal) {  // the daemon's own tensors: shaped by the RL job for this backbone
        b.images = w.internal->images, b.tokens = w.internal->tokens, b.mask = w.internal->mask;
        b.state = w.internal->state, b.actions = w.internal->actions, b.n = b.images.size(0);
        bound.push_back(std::move(b));
        continue;
      }
      b.msg = wire::GetMessage(w.message.data());
      if (auto e = bind_request(b); !e.empty()) {
        fail(w, wire::ErrorCode::BadBatch, e);
        continue;
      }
      bound.push_back(std::move(b));
    }
    if (bound.empty()) return;
    if (!config.deterministic) return run_pass(bound);
    // Deterministic mode: each request gets a backbone pass of its own, so its features are
    // computed by exactly the same operations on exactly the same shapes whoever else is queued.
    // The price is the grouping itself (nexus-bench group measures it): see docs/design/model.md.
    for (auto& b : bound) run_pass({&b, 1});
  }

  // One backbone pass over the concatenated requests, then each request's head on its rows.
  void run_pass(std::span<Bound> bound) {
    std::vector<torch::Tensor> images, tokens, masks;
    std::int64_t samples = 0;
    for (auto& b : bound) {
      images.push_back(b.images);
      tokens.push_back(b.tokens);
      masks.push_back(b.mask);
      samples += b.n;
    }
    const auto t0 = Clock::now();
    model::VLAFeature features;
    try {
      torch::NoGradGuard no_grad;
      auto img = torch::cat(images);  // the one copy: packing the group batch
      features = backbone->forward(img, torch::cat(tokens), torch::cat(masks).to(torch::kBool));
      std::lock_guard lk(stats_mu);
      // images, tokens (int32) and mask (uint8) of every sample: packed once into the group batch
      stats.input_bytes_packed += static_cast<std::uint64_t>(img.numel()) +
                                  static_cast<std::uint64_t>(samples) * 5 * static_cast<std::uint64_t>(backbone->config().max_tokens);
    } catch (const std::exception& e) {
      for (auto& b : bound) fail(*b.work, wire::ErrorCode::Internal, std::string("backbone: ") + e.what());
      return;
    }
    const auto t1 = Clock::now();
    {
      // Counted before any reply goes out: a tenant that has its answer sees it in the status.
      std::lock_guard lk(stats_mu);
      stats.groups += 1;
      stats.grouped_requests += bound.size();
      stats.samples += static_cast<std::uint64_t>(samples);
      stats.backbone_seconds += std::chrono::duration<double>(t1 - t0).count();
    }

    // Partition: each request gets narrow() views of the group's features, no copy.
    std::int64_t offset = 0;
    for (auto& b : bound) {
      model::VLAFeature f{features.tokens.narrow(0, offset, b.n), features.pooled.narrow(0, offset, b.n),
                          features.mask.narrow(0, offset, b.n)};
      offset += b.n;
      run_head(b, f);
    }
    std::lock_guard lk(stats_mu);
    stats.head_seconds += std::chrono::duration<double>(Clock::now() - t1).count();
  }

  // A head's failure is its tenant's alone: typed error, the group's others go on.
  void run_head(Bound& b, const model::VLAFeature& f) {
    const ModelWork& w = *b.work;
    if (w.internal && w.internal->sft_done) {
      try {
        w.internal->sft_done(b.slot->trainer->sft_step(f, b.state, b.actions), wire::ErrorCode::None, "");
      } catch (const model::SlotError& e) {
        w.internal->fail(e.what(), wire::ErrorCode::BadBatch);
      } catch (const std::exception& e) {
        w.internal->fail(e.what());
      }
      return;
    }
    if (w.internal) {
      try {
        auto a = b.slot->trainer->act(f, b.state);
        w.internal->acted.set_value({f.pooled.clone(), a.actions, a.log_prob, a.version});
      } catch (const std::exception& e) {
        w.internal->fail(e.what());
      }
      return;
    }
    try {
      if (b.msg->body_type() == wire::Body::SftStepRequest) {
        const auto r = b.slot->trainer->sft_step(f, b.state, b.actions);
        reply(w, replies.sft_step(w.request_id, r.loss, r.grad_norm, static_cast<std::uint64_t>(r.step)));
      } else {
        const auto version = b.msg->body_as_PredictRequest()->version();
        auto a = b.slot->trainer->predict(f, b.state, version).contiguous();
        const auto shape = a.sizes().vec();
        reply(w, replies.predict(w.request_id, {a.data_ptr<float>(), static_cast<std::size_t>(a.numel())}, shape));
      }
    } catch (const model::SlotError& e) {
      fail(w, wire::ErrorCode::BadBatch, e.what());
    } catch (const std::out_of_range& e) {
      fail(w, wire::ErrorCode::UnknownVersion, e.what());
    } catch (const std::exception& e) {
      fail(w, wire::ErrorCode::Internal, e.what());
    }
  }

  // ---- internal work: what RL jobs ask of the executor ----
  // batched: grouped with tenants' requests (act, SFT) rather than run alone (slot work).
  // alive: whose departure cancels the work (RL jobs: never; a tenant's sampled SFT step: its own).
  void submit_internal(const std::string& tenant, std::shared_ptr<InternalWork> work, bool batched,
                       std::shared_ptr<const std::atomic<bool>> alive = nullptr) {
    static const auto always = std::make_shared<const std::atomic<bool>>(true);
    ModelWork w;
    w.tenant = tenant;
    w.type = batched ? wire::Body::PredictRequest : wire::Body::NONE;
    w.alive = alive ? std::move(alive) : always;
    w.arrival = Clock::now();
    w.internal = std::move(work);
    {
      std::lock_guard lk(mu);
      queue.push_back(std::move(w));
    }
    cv.notify_one();
  }

  // ---- the front desk: Environment Service messages and RL jobs, off the executor ----
  void run_front() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock lk(front_mu);
        front_cv.wait(lk, [&] { return front_stop || !front_queue.empty(); });
        if (front_queue.empty()) return;
        task = std::move(front_queue.front());
        front_queue.pop_front();
      }
      task();
    }
  }
  void post_front(std::function<void()> task) {
    {
      std::lock_guard lk(front_mu);
      front_queue.push_back(std::move(task));
    }
    front_cv.notify_one();
  }

  void handle_front(ModelWork& w) {
    if (!w.alive->load()) return;
    if (w.type == wire::Body::RlStartRequest) return start_job(w, *wire::GetMessage(w.message.data())->body_as_RlStartRequest());
    if (w.type == wire::Body::RlStatusRequest) return job_status(w, wire::GetMessage(w.message.data())->body_as_RlStatusRequest()->stop());
    if (w.type == wire::Body::DatasetLoadRequest) return load_dataset(w, *wire::GetMessage(w.message.data())->body_as_DatasetLoadRequest());
    if (w.type == wire::Body::DatasetSftStepRequest)
      return dataset_sft_step(w, *wire::GetMessage(w.message.data())->body_as_DatasetSftStepRequest());
    auto bytes = env::handle_env_request(envs, w, static_cast<int>(backbone->config().image_size));
    complete(w.session_id, std::move(bytes));
  }

  // Finishes a reply body built in `fbb` and sends it (any thread: complete() only queues).
  void answer(std::uint64_t session, std::uint64_t request, flatbuffers::FlatBufferBuilder& fbb, wire::Body type,
              flatbuffers::Offset<void> body) {
    fbb.Finish(wire::CreateMessage(fbb, schema::kProtocolVersion, request, type, body));
    complete(session, std::vector<std::uint8_t>(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()));
  }
  void answer_error(std::uint64_t session, std::uint64_t request, wire::ErrorCode code, const std::string& reason) {
    flatbuffers::FlatBufferBuilder fbb(256);
    answer(session, request, fbb, wire::Body::Error, wire::CreateError(fbb, code, fbb.CreateString(reason)).Union());
  }
  void front_error(const ModelWork& w, wire::ErrorCode code, const std::string& reason) {
    answer_error(w.session_id, w.request_id, code, reason);
  }

  void start_job(ModelWork& w, const wire::RlStartRequest& r) {
    auto& job = jobs[w.tenant];
    if (job && !job->finished())
      return front_error(w, wire::ErrorCode::JobFailed, "an RL job of this tenant is running: stop it first");
    job.reset();  // a finished one's sessions close here
    rl::RlConfig c;
    c.algorithm = r.algorithm()->str();
    c.task = r.task()->str();
    c.sessions = r.sessions(), c.horizon = r.horizon(), c.group_size = r.group_size(), c.iterations = r.iterations();
    c.max_steps = r.max_steps(), c.seed = r.seed(), c.queue_capacity = std::clamp(r.queue_capacity(), 1, 8);
    c.staleness = {std::max(0, r.max_staleness()), r.downweight_stale() ? rl::StalePolicy::Downweight : rl::StalePolicy::Drop};
    c.update = {r.epochs(), r.minibatch(), r.clip(), r.gamma(), r.lambda(), r.entropy(), 0.5, r.value_lr()};
    if (c.iterations > 100000 || c.update.epochs > 32 || c.update.minibatch > 4096)
      return front_error(w, wire::ErrorCode::JobFailed, "iterations <= 100000, epochs <= 32, minibatch <= 4096");
    try {
      auto port = std::make_unique<Policy>(*this, w.tenant);
      auto made = std::make_unique<rl::RlJob>(w.tenant, c, *port, envs);
      job = std::move(made);
      policies[w.tenant] = std::move(port);  // outlives its job: jobs are reset first
    } catch (const std::exception& e) {
      return front_error(w, wire::ErrorCode::JobFailed, e.what());
    }
    log_text(LogLevel::Info, "rl_job", "tenant=" + w.tenant + " algorithm=" + c.algorithm + " task=" + c.task +
                                           " sessions=" + std::to_string(c.sessions) + " iterations=" + std::to_string(c.iterations));
    flatbuffers::FlatBufferBuilder fbb(128);
    answer(w.session_id, w.request_id, fbb, wire::Body::RlStartReply,
           wire::CreateRlStartReply(fbb, job->progress().first_version).Union());
  }

  void job_status(ModelWork& w, bool stop_it) {
    auto it = jobs.find(w.tenant);
    if (it == jobs.end() || !it->second) return front_error(w, wire::ErrorCode::JobFailed, "this tenant has no RL job");
    if (stop_it) it->second->stop();
    const auto p = it->second->progress();
    flatbuffers::FlatBufferBuilder fbb(256);
    auto body = wire::CreateRlStatusReply(fbb, fbb.CreateString(p.state), fbb.CreateString(p.error), p.iterations, p.version,
                                          p.first_version, p.env_steps, p.episodes, p.recent_success, p.recent_return,
                                          p.policy_loss, p.value_loss, p.entropy, p.records_dropped,
                                          p.records_downweighted, p.seconds);
    answer(w.session_id, w.request_id, fbb, wire::Body::RlStatusReply, body.Union());
  }

  // ---- datasets: read from the descriptor the tenant sent, sampled here into SFT batches ----
  struct Dataset {
    datasets::DemoFile file;
    std::vector<std::pair<std::size_t, std::int64_t>> index;  // (episode, step) of every sample
    std::mt19937_64 rng;
  };
  static constexpr std::size_t kMaxDatasetsPerTenant = 8;

  void load_dataset(ModelWork& w, const wire::DatasetLoadRequest& r) {
    const auto name = r.name()->str();
    auto& mine = datasets[w.tenant];
    if (!mine.count(name) && mine.size() >= kMaxDatasetsPerTenant)
      return front_error(w, wire::ErrorCode::BadDataset, "a tenant may hold 8 datasets; reuse a name to replace one");
    auto d = std::make_shared<Dataset>();
    try {
      d->file = datasets::read_demo_fd(*w.fd, "dataset '" + name + "'");
    } catch (const datasets::DatasetError& e) {
      return front_error(w, wire::ErrorCode::BadDataset, e.what());
    }
    w.fd.reset();  // read whole: the descriptor is not needed any more
    const auto& m = d->file.meta;
    const auto size = backbone->config().image_size;
    if (m.image_size != size)
      return front_error(w, wire::ErrorCode::BadDataset, "dataset '" + name + "' has " + std::to_string(m.image_size) +
                                                             "-pixel images; the backbone takes " + std::to_string(size));
    for (std::size_t e = 0; e < d->file.episodes.size(); ++e)
      for (std::int64_t t = 0; t < d->file.episodes[e].steps; ++t) d->index.emplace_back(e, t);
    if (d->index.empty()) return front_error(w, wire::ErrorCode::BadDataset, "dataset '" + name + "' has no samples");
    d->rng.seed(r.seed());
    mine[name] = d;
    log_text(LogLevel::Info, "dataset", "tenant=" + w.tenant + " name=" + name + " episodes=" +
                                            std::to_string(d->file.episodes.size()) + " samples=" + std::to_string(d->index.size()));
    flatbuffers::FlatBufferBuilder fbb(128);
    auto body = wire::CreateDatasetLoadReply(fbb, static_cast<std::uint32_t>(d->file.episodes.size()), d->index.size(),
                                             static_cast<std::int32_t>(m.state_dim), static_cast<std::int32_t>(m.action_dim));
    answer(w.session_id, w.request_id, fbb, wire::Body::DatasetLoadReply, body.Union());
  }

  // Samples a batch and hands it to the executor as an SFT step, grouped with everyone's; the
  // reply goes out when the step is done (this thread does not wait for it).
  void dataset_sft_step(ModelWork& w, const wire::DatasetSftStepRequest& r) {
    auto& mine = datasets[w.tenant];
    auto it = mine.find(r.name()->str());
    if (it == mine.end())
      return front_error(w, wire::ErrorCode::BadDataset, "no dataset '" + r.name()->str() + "' loaded by this tenant");
    const auto n = static_cast<std::int64_t>(r.batch()), chunk = static_cast<std::int64_t>(r.chunk());
    if (n < 1 || n > kMaxSamplesPerRequest || chunk < 1 || chunk > kMaxChunk)
      return front_error(w, wire::ErrorCode::BadBatch, "batch must be 1..4096 and chunk 1..64");
    auto& d = *it->second;
    const auto& bb = backbone->config();
    const auto sd = d.file.meta.state_dim, ad = d.file.meta.action_dim, hw = bb.image_size;
    auto work = std::make_shared<InternalWork>();
    work->images = torch::empty({n, 1, hw, hw, 3}, torch::kUInt8);
    work->tokens = torch::zeros({n, bb.max_tokens}, torch::kInt32);
    auto mask = torch::zeros({n, bb.max_tokens}, torch::kBool);
    work->state = torch::empty({n, sd});
    work->actions = torch::empty({n, chunk, ad});
    const auto image_bytes = static_cast<std::size_t>(hw * hw * 3);
    for (std::int64_t i = 0; i < n; ++i) {
      const auto [e, t] = d.index[d.rng() % d.index.size()];
      const auto& ep = d.file.episodes[e];
      std::memcpy(work->images[i].data_ptr<std::uint8_t>(), ep.images.data() + t * image_bytes, image_bytes);
      model::tokenize_into(ep.instruction, work->tokens, mask, i);
      std::memcpy(work->state[i].data_ptr<float>(), ep.proprio.data() + t * sd, sd * sizeof(float));
      for (std::int64_t k = 0; k < chunk; ++k)  // the chunk runs on past the end as its last action
        std::memcpy(work->actions[i][k].data_ptr<float>(), ep.actions.data() + std::min(t + k, ep.steps - 1) * ad,
                    ad * sizeof(float));
    }
    work->mask = mask.to(torch::kUInt8);
    if (sd == 0) work->state = torch::Tensor();
    const auto session = w.session_id, request = w.request_id;
    work->sft_done = [this, session, request](const model::StepResult& r, wire::ErrorCode code, const std::string& why) {
      if (code != wire::ErrorCode::None) return answer_error(session, request, code, why);
      flatbuffers::FlatBufferBuilder fbb(128);
      answer(session, request, fbb, wire::Body::SftStepReply,
             wire::CreateSftStepReply(fbb, r.loss, r.grad_norm, static_cast<std::uint64_t>(r.step)).Union());
    };
    submit_internal(w.tenant, std::move(work), /*act=*/true, w.alive);
  }

  // A tenant that leaves takes its jobs, sessions and datasets with it.
  void detach_front(const std::string& tenant) {
    datasets.erase(tenant);
    jobs.erase(tenant);
    envs.tenant_detached(tenant);
  }

  // An RL job's view of the model service: its rollout steps and updates go through the executor
  // queue like any tenant request, so they are grouped and take turns with everyone's.
  class Policy final : public rl::PolicyPort {
   public:
    Policy(Impl& impl, std::string tenant) : impl_(impl), tenant_(std::move(tenant)) {}
    Acted act(const torch::Tensor& images, const torch::Tensor& tokens, const torch::Tensor& mask,
              const torch::Tensor& state) override {
      auto w = std::make_shared<InternalWork>();
      w->images = images, w->tokens = tokens, w->mask = mask, w->state = state;
      auto done = w->acted.get_future();
      impl_.submit_internal(tenant_, std::move(w), true);
      return done.get();
    }
    void with_slot(const std::function<void(model::TenantSlot&)>& fn) override {
      auto w = std::make_shared<InternalWork>();
      w->on_slot = fn;
      auto done = w->slot_done.get_future();
      impl_.submit_internal(tenant_, std::move(w), false);
      done.get();
    }
    std::int64_t image_size() const override { return impl_.backbone->config().image_size; }
    std::int64_t max_tokens() const override { return impl_.backbone->config().max_tokens; }
    std::int64_t feature_dim() const override { return impl_.backbone->config().dim; }

   private:
    Impl& impl_;
    std::string tenant_;
  };

  const ModelConfig config;
  const Completion complete;
  std::unique_ptr<model::Backbone> backbone;
  std::map<std::string, Slot> slots;  // executor thread only; kept across reattach
  ReplyBuilder replies;               // executor thread only

  std::mutex mu;
  std::condition_variable cv;
  std::deque<ModelWork> queue;     // GUARDED_BY(mu)
  std::set<std::string> active;    // GUARDED_BY(mu): registered and attached
  bool stop = false;               // GUARDED_BY(mu)

  mutable std::mutex stats_mu;
  ModelStats stats;  // GUARDED_BY(stats_mu)
  std::thread thread;

  // Front desk (front thread only, after construction): sessions, jobs and their policy ports.
  env::EnvService envs{{.workers = 1}, env::session_factory(config.external_envs, std::chrono::seconds(10))};
  std::map<std::string, std::unique_ptr<Policy>> policies;
  std::map<std::string, std::unique_ptr<rl::RlJob>> jobs;
  std::map<std::string, std::map<std::string, std::shared_ptr<Dataset>>> datasets;  // tenant -> name ->
  std::mutex front_mu;
  std::condition_variable front_cv;
  std::deque<std::function<void()>> front_queue;  // GUARDED_BY(front_mu)
  bool front_stop = false;                        // GUARDED_BY(front_mu)
  std::thread front;
};

ModelService::ModelService(const ModelConfig& config, Completion complete)
    : impl_(std::make_unique<Impl>(config, std::move(complete))) {
  if (config.backbone == "torchscript") {
    if (config.weights.empty()) throw std::runtime_error("--backbone torchscript needs --weights FILE.pt");
    impl_->backbone = model::load_torchscript_backbone(config.weights);
  } else {
    auto bc = model::named_backbone(config.backbone);
    if (!bc) throw std::runtime_error("unknown backbone '" + config.backbone + "' (tiny, small, torchscript)");
    impl_->backbone = model::make_builtin_backbone(*bc, config.weights);
  }
  const auto& bc = impl_->backbone->config();
  log_text(config.weights.empty() ? LogLevel::Warn : LogLevel::Info, "backbone",
           "name=" + bc.name + " weights=" + (config.weights.empty() ? "none(seeded_init_not_pretrained)" : config.weights) +
               " dim=" + std::to_string(bc.dim) + " image_size=" + std::to_string(bc.image_size) +
               " deterministic=" + (config.deterministic ? "true" : "false"));
  impl_->thread = std::thread([this] { impl_->run(); });
  impl_->front = std::thread([this] { impl_->run_front(); });
}

ModelService::~ModelService() {
  {
    std::lock_guard lk(impl_->front_mu);
    impl_->front_stop = true;
  }
  impl_->front_cv.notify_all();
  impl_->front.join();
  impl_->jobs.clear();  // joins their loops while the executor still answers them
  {
    std::lock_guard lk(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  impl_->thread.join();
}

void ModelService::submit(ModelWork work) {
  if (is_front_work(work.type)) {
    auto shared = std::make_shared<ModelWork>(std::move(work));
    return impl_->post_front([this, shared] { impl_->handle_front(*shared); });
  }
  {
    std::lock_guard lk(impl_->mu);
    impl_->queue.push_back(std::move(work));
  }
  impl_->cv.notify_one();
}

void ModelService::tenant_detached(const std::string& tenant) {
  {
    std::lock_guard lk(impl_->mu);
    impl_->active.erase(tenant);
  }
  impl_->cv.notify_one();  // a waiting group may now hold every active tenant
  impl_->post_front([this, tenant] { impl_->detach_front(tenant); });
}

ModelStats ModelService::stats() const {
  std::lock_guard lk(impl_->stats_mu);
  return impl_->stats;
}

const model::BackboneConfig& ModelService::backbone() const { return impl_->backbone->config(); }
std::string ModelService::backbone_name() const { return impl_->backbone->config().name; }

}  // namespace nexus::daemon
