#include "daemon/model/request_binding.hpp"

#include "daemon/model/slot_registry.hpp"

namespace nexus::model::detail {
namespace {

torch::ScalarType scalar(DType d) {
  return d == DType::UInt8 ? torch::kUInt8 : d == DType::Int32 ? torch::kInt32 : torch::kFloat32;
}
const char* dtype_name(DType d) { return d == DType::UInt8 ? "uint8" : d == DType::Int32 ? "int32" : "float32"; }

// A view of the tensor where it lies, if dtype and shape are as required; else the reason.
// `written`: nexusd writes the result there (a features request's `out`), so a tensor in a CUDA
// region stays on its device; an input comes to the host.
std::string view(const HostTensor& t, const char* name, DType dtype, const std::vector<std::int64_t>& shape,
                 torch::Tensor& out, bool written = false) {
  if (!t.present() || t.dtype != dtype || t.shape != shape) {
    std::string want = std::string(name) + " must be " + dtype_name(dtype) + " [";
    for (std::size_t i = 0; i < shape.size(); ++i) want += (i ? ", " : "") + std::to_string(shape[i]);
    return want + "]";
  }
  // Read only, except a features request's `out`; the caller checked the bytes lie inside the
  // memory the request keeps alive, which nexusd may write for `out` (model_routes.cpp).
  auto options = torch::TensorOptions().dtype(scalar(dtype));
  if (t.cuda_device < 0) {
    out = torch::from_blob(const_cast<void*>(t.data), shape, options);
    return "";
  }
  // A tenant's CUDA region: `out` is written there in place; inputs come to the host with one
  // copy each, because the batch is packed and checked on the host (the device-side pack is
  // not built: docs/design/gpu.md).
  if (!torch::cuda::is_available() || t.cuda_device >= static_cast<int>(torch::cuda::device_count()))
    return std::string(name) + " is in a CUDA region on device " + std::to_string(t.cuda_device) +
           ", which this nexusd's LibTorch cannot reach";
  try {  // from_blob checks the address's device with the runtime; a copy may meet a CUDA error
    out = torch::from_blob(const_cast<void*>(t.data), shape,
                           options.device(torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(t.cuda_device))));
    if (!written) out = out.to(torch::kCPU);  // synchronous
  } catch (const std::exception& e) {
    return std::string(name) + " in a CUDA region: " + e.what();
  }
  return "";
}

std::int64_t head_parameters(const HeadSpec& s, std::int64_t d) {
  const std::int64_t in = d + s.state_dim, out = s.chunk * s.action_dim, h = s.hidden;
  std::int64_t p = in * h + h * h + h * out;  // the MLP trunk every head has
  if (s.kind == "flow") p += 2 * d * d + out * h;  // attention pooling and the noisy chunk's input
  // Token queries: each widens the trunk's input by d and attends over the tokens (2 d per
  // token), counted at more tokens than the built-in backbones' sequences have.
  constexpr std::int64_t kTokensCounted = 256;
  p += s.token_queries * (d * h + 2 * d * kTokensCounted);
  return p;
}

}  // namespace

CostModel make_cost_model(Backbone& backbone, const BackboneConfig& c, double budget_gflop, bool builtin) {
  (void)backbone;
  // A transformer's forward costs about 2 x parameters x tokens FLOPs; the built-in one has
  // 12 x dim^2 parameters per layer (attention 4 d^2, MLP 2 x ratio x d^2 with ratio 4).
  const double per_layer = static_cast<double>((4 + 2 * c.mlp_ratio) * c.dim * c.dim);
  const double params = per_layer * static_cast<double>(c.layers);
  const double tokens = static_cast<double>(c.sequence_length(c.max_views));
  return {2.0 * params * tokens / 1e9, budget_gflop, builtin ? kByteVocabulary : 0};
}

double head_gflop(const HeadSpec& spec, std::int64_t feature_dim, std::int64_t n, bool training) {
  double per_sample = 2.0 * static_cast<double>(head_parameters(spec, feature_dim));
  if (training) per_sample *= 3;  // forward and backward
  else if (spec.kind == "flow") per_sample *= static_cast<double>(spec.flow_steps);
  return per_sample * static_cast<double>(n) / 1e9;
}

std::optional<Failure> check_registration(const op::Register& r, const BackboneConfig& bb) {
  const auto& h = r.head;
  auto out_of = [](std::int64_t v, std::int64_t lo, std::int64_t hi) { return v < lo || v > hi; };
  if (out_of(r.views, 1, bb.max_views) || out_of(h.action_dim, 1, kMaxActionDim) || out_of(h.chunk, 1, kMaxChunk) ||
      out_of(h.state_dim, 0, kMaxStateDim) || out_of(h.hidden, 1, kMaxHidden) || out_of(h.flow_steps, 1, kMaxFlowSteps) ||
      !(h.flow_noise > 0 && h.flow_noise <= 100) || out_of(h.token_queries, 0, kMaxTokenQueries) ||
      (h.kind == "flow" && h.token_queries != 0))
    return Failure{Fault::BadRequest, "schema out of range: views 1.." + std::to_string(bb.max_views) +
                                          ", action_dim 1..64, chunk 1..64, state_dim 0..1024, hidden 1..4096, "
                                          "flow_steps 1..100, flow_noise (0, 100], token_queries 0..16 (0 for flow)"};
  const auto& a = h.adapter;
  if (a.rank != 0 || a.alpha != 0 || a.targets != 0 || a.blocks != 0) {
    if (out_of(a.rank, 1, AdapterSpec::kMaxRank) || !(a.alpha >= 0 && a.alpha <= 1024) ||
        (a.targets & ~AdapterSpec::kAdaptAll) != 0 || (bb.layers < 32 && (a.blocks >> bb.layers) != 0))
      return Failure{Fault::BadRequest, "adapter out of range: rank 1..64, alpha [0, 1024] (0: = rank), targets of "
                                        "q k v o mlp_in mlp_out, blocks 0.." + std::to_string(bb.layers - 1)};
  }
  const auto& o = r.optimizer;
  if (!(o.lr > 0 && o.lr < 10) || !(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1) ||
      !(o.weight_decay >= 0) || !(o.grad_clip >= 0))
    return Failure{Fault::BadRequest, "optimizer settings out of range"};
  return std::nullopt;
}

Bound micro_bound(Work& w, SlotEntry* slot) {
  auto& m = std::get<MicroWork>(w);
  StepChain& c = *m.chain;
  Bound b;
  b.kind = Bound::Kind::Micro;
  b.work = &w;
  b.slot = slot;
  b.tenant = m.tenant;
  b.chain = m.chain;
  b.offset = c.next;
  b.n = std::min(c.micro, c.n - c.next);
  c.next += b.n;
  auto rows = [&](const torch::Tensor& t) { return t.defined() ? t.narrow(0, b.offset, b.n) : t; };
  b.images = rows(c.images), b.tokens = rows(c.tokens), b.mask = rows(c.mask);
  b.state = rows(c.state), b.actions = rows(c.actions);
  b.gflop = c.gflop * static_cast<double>(b.n) / static_cast<double>(c.n);
  return b;
}

std::optional<Failure> bind(Work& w, SlotEntry* slot, const BackboneConfig& bb, const CostModel& cost, Bound& b) {
  const HeadSpec* spec = slot ? &slot->trainer->head().spec() : nullptr;
  b.work = &w;
  b.slot = slot;
  b.tenant = tenant_of(w);
  if (auto* act = std::get_if<ActWork>(&w)) {  // the daemon's own tensors, shaped by the RL job
    b.kind = Bound::Kind::Act;
    b.images = act->images, b.tokens = act->tokens, b.mask = act->mask.to(torch::kBool), b.state = act->state;
    b.n = b.images.size(0);
    // Checked here, on the host, so the slot need not read a device tensor back to check it.
    if (b.state.defined() && !torch::isfinite(b.state).all().item<bool>())
      return Failure{Fault::BadBatch, "state holds NaN or Inf"};
    b.gflop = b.n * cost.backbone_gflop_per_sample + head_gflop(*spec, bb.dim, b.n, false);
    return std::nullopt;
  }
  const Request& r = std::get<TenantWork>(w).request;
  const Observation* obs = nullptr;
  const HostTensor* actions = nullptr;
  const HostTensor* out = nullptr;
  if (const auto* s = std::get_if<op::SftStep>(&r.op)) b.kind = Bound::Kind::Sft, obs = &s->obs, actions = &s->actions;
  if (const auto* p = std::get_if<op::Predict>(&r.op)) b.kind = Bound::Kind::Predict, obs = &p->obs, b.version = p->version;
  if (const auto* f = std::get_if<op::Features>(&r.op)) b.kind = Bound::Kind::Features, obs = &f->obs, out = &f->out;
  if (!obs || (!spec && b.kind != Bound::Kind::Features)) return Failure{Fault::Internal, "not a batchable request"};
  const auto& img = obs->images.shape;
  if (img.size() != 5 || img[0] < 1 || img[0] > kMaxSamplesPerRequest)
    return Failure{Fault::BadBatch, "images must be uint8 [n, views, H, W, 3] with 1 <= n <= " +
                                        std::to_string(kMaxSamplesPerRequest)};
  b.n = img[0];
  const auto n = b.n;
  // A head's views are its registration's; features take any count the backbone does.
  const std::int64_t views = slot ? slot->views : img[1];
  if (views < 1 || views > bb.max_views)
    return Failure{Fault::BadBatch, "images must have 1 to " + std::to_string(bb.max_views) + " views"};
  torch::Tensor tokens, mask, state, acts;
  std::string e = view(obs->images, "images", DType::UInt8, {n, views, bb.image_size, bb.image_size, 3}, b.images);
  if (e.empty()) e = view(obs->tokens, "tokens", DType::Int32, {n, bb.max_tokens}, tokens);
  if (e.empty()) e = view(obs->mask, "token_mask", DType::UInt8, {n, bb.max_tokens}, mask);
  if (e.empty() && spec && spec->state_dim > 0) {
    if (!obs->state.present()) return Failure{Fault::BadBatch, "this tenant's schema has state_dim " +
                                                                   std::to_string(spec->state_dim) + ": state missing"};
    e = view(obs->state, "state", DType::Float32, {n, spec->state_dim}, state);
  }
  if (e.empty() && actions) e = view(*actions, "actions", DType::Float32, {n, spec->chunk, spec->action_dim}, acts);
  if (e.empty() && out) e = view(*out, "out", DType::Float32, {n, bb.dim}, b.out, true);  // written in the pass
  if (!e.empty()) return Failure{Fault::BadBatch, e};
  // Private copies: what is checked below is exactly what the backbone and the head will read.
  b.tokens = tokens.clone();
  b.mask = mask.to(torch::kBool);  // a copy (dtype change)
  if (state.defined()) b.state = state.clone();
  if (acts.defined()) b.actions = acts.clone();
  if (cost.vocabulary > 0) {
    const auto lo = b.tokens.min().item<std::int64_t>(), hi = b.tokens.max().item<std::int64_t>();
    if (lo < 0 || hi >= cost.vocabulary)
      return Failure{Fault::BadBatch, "token ids must be in [0, " + std::to_string(cost.vocabulary) + "), got " +
                                          std::to_string(lo < 0 ? lo : hi)};
  }
  if (b.state.defined() && !torch::isfinite(b.state).all().item<bool>())
    return Failure{Fault::BadBatch, "state holds NaN or Inf"};
  if (b.actions.defined() && !torch::isfinite(b.actions).all().item<bool>())
    return Failure{Fault::BadBatch, "actions hold NaN or Inf"};
  b.gflop = static_cast<double>(n) * cost.backbone_gflop_per_sample +
            (spec ? head_gflop(*spec, bb.dim, n, b.kind == Bound::Kind::Sft) : 0.0);
  // Training an adapter runs the backward through the backbone too: about twice its forward.
  if (spec && spec->adapter.rank > 0 && b.kind == Bound::Kind::Sft)
    b.gflop += 2.0 * static_cast<double>(n) * cost.backbone_gflop_per_sample;
  if (cost.budget_gflop > 0 && b.gflop > cost.budget_gflop)
    return Failure{Fault::OverBudget, "request over budget: an estimated " + std::to_string(static_cast<long>(b.gflop)) +
                                          " GFLOP against the per-request limit of " +
                                          std::to_string(static_cast<long>(cost.budget_gflop)) +
                                          " GFLOP ([model] max_request_gflop); send fewer samples per request"};
  return std::nullopt;
}

}  // namespace nexus::model::detail
