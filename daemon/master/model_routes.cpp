#include "daemon/master/model_routes.hpp"

#include "schema/tensor_ref.hpp"

namespace nexus::daemon {

std::optional<model::HostTensor> arena_tensor(const ServiceRequest& r, const wire::TensorRef* ref, std::string& why,
                                              std::vector<std::shared_ptr<void>>* regions_held, wire::ErrorCode* code) {
  if (ref == nullptr) return model::HostTensor{};  // absent (state of a stateless head)
  model::HostTensor t;
  auto refuse = [&](wire::ErrorCode c, std::string reason) -> std::optional<model::HostTensor> {
    why = std::move(reason);
    if (code) *code = c;
    return std::nullopt;
  };
  if (ref->region() != 0) {  // a region the tenant registered: checked against its own size
    if (!r.regions || !regions_held)
      return refuse(wire::ErrorCode::BadMessage, "this request takes tensors in the client arena only (region 0)");
    auto resolved = r.regions->resolve(ref);
    if (auto* refusal = std::get_if<RegionRefusal>(&resolved)) return refuse(refusal->code, refusal->reason);
    auto& region = std::get<RegionTable::Resolved>(resolved);
    t.data = region.data;
    t.cuda_device = region.cuda_device;  // a device address: the model service must not read it on the host
    regions_held->push_back(std::move(region.holder));  // mapped until the request is done
  } else {
    const auto check = schema::check_tensor_ref(ref, r.segment->layout().client_arena_bytes);
    if (!check) return refuse(check.code, check.reason);
    // The writable view: features mode writes here (the tenant's own arena, bounds checked).
    t.data = r.segment->client_arena_for_results() + check.offset;
  }
  switch (ref->dtype()) {
    case wire::DType::UInt8: t.dtype = model::DType::UInt8; break;
    case wire::DType::Int32: t.dtype = model::DType::Int32; break;
    case wire::DType::Float32: t.dtype = model::DType::Float32; break;
    default:
      return refuse(wire::ErrorCode::BadTensor,
                    std::string("dtype ") + schema::dtype_name(ref->dtype()) + " is not one a model input takes");
  }
  t.shape.assign(ref->shape()->begin(), ref->shape()->end());
  return t;
}

namespace {

// What a model request keeps alive: the tenant's segment and the regions its tensors are in.
struct Held {
  std::shared_ptr<const TenantSegment> segment;
  std::vector<std::shared_ptr<void>> regions;
};

std::optional<model::Observation> observation(const ServiceRequest& r, const wire::Observation* o, std::string& why,
                                              Held& held, wire::ErrorCode& code) {
  model::Observation obs;
  const std::pair<const wire::TensorRef*, model::HostTensor*> refs[] = {
      {o->images(), &obs.images}, {o->tokens(), &obs.tokens}, {o->token_mask(), &obs.mask}, {o->state(), &obs.state}};
  for (const auto& [ref, out] : refs) {
    auto t = arena_tensor(r, ref, why, &held.regions, &code);
    if (!t) return std::nullopt;
    *out = std::move(*t);
  }
  return obs;
}

}  // namespace

std::variant<model::Request, ModelRouteError> to_model_request(const ServiceRequest& r,
                                                               std::function<void(model::Result)> done) {
  model::Request m;
  m.tenant = r.tenant;
  m.uid = r.uid;
  auto held = std::make_shared<Held>();
  held->segment = r.segment;
  m.keepalive = held;
  m.alive = r.alive;
  m.arrival = r.arrival;
  m.done = std::move(done);
  const auto* msg = r.wire_message();
  std::string why;
  wire::ErrorCode code = wire::ErrorCode::TensorOutOfBounds;
  switch (r.type) {
    case wire::Body::RegisterRequest: {
      const auto* q = msg->body_as_RegisterRequest();
      const auto* h = q->head();  // presence checked by the decoder
      model::op::Register reg;
      reg.views = q->views();
      reg.head = {h->kind()->str(), h->state_dim(), h->action_dim(), h->chunk(), h->hidden(), h->flow_steps(),
                  h->flow_noise(), h->token_queries()};
      if (const auto* a = h->adapter()) reg.head.adapter = {a->rank(), a->alpha(), a->targets(), a->blocks()};
      if (const auto* o = q->optimizer())
        reg.optimizer = {o->lr(), o->beta1(), o->beta2(), o->weight_decay(), o->grad_clip()};
      reg.seed = q->seed();
      m.op = std::move(reg);
      return m;
    }
    case wire::Body::SftStepRequest: {
      const auto* q = msg->body_as_SftStepRequest();
      auto obs = observation(r, q->obs(), why, *held, code);
      auto actions = obs ? arena_tensor(r, q->actions(), why, &held->regions, &code) : std::nullopt;
      if (!actions) return ModelRouteError{code, why};
      m.op = model::op::SftStep{std::move(*obs), std::move(*actions)};
      return m;
    }
    case wire::Body::PredictRequest: {
      const auto* q = msg->body_as_PredictRequest();
      auto obs = observation(r, q->obs(), why, *held, code);
      if (!obs) return ModelRouteError{code, why};
      m.op = model::op::Predict{std::move(*obs), q->version()};
      return m;
    }
    case wire::Body::FeaturesRequest: {
      const auto* q = msg->body_as_FeaturesRequest();
      auto obs = observation(r, q->obs(), why, *held, code);
      auto out = obs ? arena_tensor(r, q->out(), why, &held->regions, &code) : std::nullopt;
      if (!out) return ModelRouteError{code, why};
      obs->state = {};  // features need no state
      m.op = model::op::Features{std::move(*obs), std::move(*out)};
      return m;
    }
    case wire::Body::PublishRequest: m.op = model::op::Publish{}; return m;
    case wire::Body::SlotDigestRequest: m.op = model::op::Digest{}; return m;
    case wire::Body::BackboneRequest: m.op = model::op::Backbone{}; return m;
    case wire::Body::SaveRequest: m.op = model::op::Save{msg->body_as_SaveRequest()->tag()->str()}; return m;
    case wire::Body::LoadRequest: m.op = model::op::Load{msg->body_as_LoadRequest()->tag()->str()}; return m;
    default: return ModelRouteError{wire::ErrorCode::Internal, "not a model request"};
  }
}

}  // namespace nexus::daemon
