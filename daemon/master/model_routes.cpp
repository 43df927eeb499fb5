#include "daemon/master/model_routes.hpp"

#include "schema/tensor_ref.hpp"

namespace nexus::daemon {

bool is_model_request(wire::Body t) {
  switch (t) {
    case wire::Body::RegisterRequest:
    case wire::Body::SftStepRequest:
    case wire::Body::PredictRequest:
    case wire::Body::PublishRequest:
    case wire::Body::SlotDigestRequest:
    case wire::Body::BackboneRequest:
    case wire::Body::SaveRequest:
    case wire::Body::LoadRequest: return true;
    default: return false;
  }
}

std::optional<model::HostTensor> arena_tensor(const ServiceRequest& r, const wire::TensorRef* ref, std::string& why) {
  if (ref == nullptr) return model::HostTensor{};  // absent (state of a stateless head)
  const auto check = schema::check_tensor_ref(ref, r.segment->layout().client_arena_bytes);
  if (!check) {
    why = check.reason;
    return std::nullopt;
  }
  model::HostTensor t;
  switch (ref->dtype()) {
    case wire::DType::UInt8: t.dtype = model::DType::UInt8; break;
    case wire::DType::Int32: t.dtype = model::DType::Int32; break;
    case wire::DType::Float32: t.dtype = model::DType::Float32; break;
    default: why = std::string("dtype ") + schema::dtype_name(ref->dtype()) + " is not one a model input takes"; return std::nullopt;
  }
  t.shape.assign(ref->shape()->begin(), ref->shape()->end());
  t.data = r.segment->client_arena() + check.offset;
  return t;
}

namespace {

std::optional<model::Observation> observation(const ServiceRequest& r, const wire::Observation* o, std::string& why) {
  model::Observation obs;
  const std::pair<const wire::TensorRef*, model::HostTensor*> refs[] = {
      {o->images(), &obs.images}, {o->tokens(), &obs.tokens}, {o->token_mask(), &obs.mask}, {o->state(), &obs.state}};
  for (const auto& [ref, out] : refs) {
    auto t = arena_tensor(r, ref, why);
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
  m.keepalive = r.segment;
  m.alive = r.alive;
  m.arrival = r.arrival;
  m.done = std::move(done);
  const auto* msg = wire::GetMessage(r.message.data());
  std::string why;
  switch (r.type) {
    case wire::Body::RegisterRequest: {
      const auto* q = msg->body_as_RegisterRequest();
      const auto* h = q->head();  // presence checked by the decoder
      model::op::Register reg;
      reg.views = q->views();
      reg.head = {h->kind()->str(), h->state_dim(), h->action_dim(), h->chunk(), h->hidden(), h->flow_steps(),
                  h->flow_noise()};
      if (const auto* o = q->optimizer())
        reg.optimizer = {o->lr(), o->beta1(), o->beta2(), o->weight_decay(), o->grad_clip()};
      reg.seed = q->seed();
      m.op = std::move(reg);
      return m;
    }
    case wire::Body::SftStepRequest: {
      const auto* q = msg->body_as_SftStepRequest();
      auto obs = observation(r, q->obs(), why);
      auto actions = obs ? arena_tensor(r, q->actions(), why) : std::nullopt;
      if (!actions) return ModelRouteError{wire::ErrorCode::TensorOutOfBounds, why};
      m.op = model::op::SftStep{std::move(*obs), std::move(*actions)};
      return m;
    }
    case wire::Body::PredictRequest: {
      const auto* q = msg->body_as_PredictRequest();
      auto obs = observation(r, q->obs(), why);
      if (!obs) return ModelRouteError{wire::ErrorCode::TensorOutOfBounds, why};
      m.op = model::op::Predict{std::move(*obs), q->version()};
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
