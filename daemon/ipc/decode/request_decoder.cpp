#include "daemon/ipc/decode/request_decoder.hpp"

#include <flatbuffers/flatbuffers.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <string_view>
#include <tuple>
#include <utility>

#include "schema/names.hpp"
#include "schema/protocol.hpp"

namespace nexus::daemon {
namespace {

DecodeError error(std::uint64_t id, wire::ErrorCode code, std::string reason) {
  return DecodeError{id, code, std::move(reason)};
}

// Checkpoint tags and dataset names: names (schema/names.hpp), never paths.
bool label(const flatbuffers::String* s) { return s && schema::valid_name(s->string_view()); }
// An optional name: absent or empty (clients send "" for none), else a valid name.
bool optional_label(const flatbuffers::String* s) { return !s || s->size() == 0 || label(s); }

std::string name_rule(const char* what) { return std::string(what) + " are " + schema::kNameRule; }

// Dataset keys (views, state): at most 16 names, each present and 1-255 bytes; the reader
// checks them against the file.
bool key_list(const flatbuffers::Vector<flatbuffers::Offset<flatbuffers::String>>* keys) {
  if (keys == nullptr) return true;
  if (keys->size() > 16) return false;
  return std::all_of(keys->begin(), keys->end(),
                     [](const flatbuffers::String* k) { return k && k->size() >= 1 && k->size() <= 255; });
}

// A tensor reference in a request that may name a registered region: an arena reference is
// checked here against the arena; a region reference only for what needs no region (dtype,
// shape, size, alignment), and against its region where the request is routed.
schema::TensorCheck check_ref(const wire::TensorRef* ref, const RequestLimits& limits) {
  if (ref->region() == 0) return schema::check_tensor_ref(ref, limits.client_arena_bytes);
  return schema::check_tensor_ref(ref, std::numeric_limits<std::uint64_t>::max());
}

// Requests whose tensors nexusd reads in place on the reactor (digest) or writes (environment
// observations) take arena tensors only.
std::optional<DecodeError> arena_only(std::uint64_t id, const wire::TensorRef* ref) {
  if (ref != nullptr && ref->region() != 0)
    return error(id, wire::ErrorCode::BadMessage, "this request takes tensors in the client arena only (region 0)");
  return std::nullopt;
}

// --- The checks of each request kind ---------------------------------------------------------
// Each takes the verified message (its body present and of the kind's type) and fills what the
// reactor needs in `req`; nullopt when the request may go on.
using Check = std::optional<DecodeError> (*)(const wire::Message& msg, const RequestLimits& limits,
                                             DecodedRequest& req);

std::optional<DecodeError> no_check(const wire::Message&, const RequestLimits&, DecodedRequest&) { return std::nullopt; }

std::optional<DecodeError> check_ping(const wire::Message& msg, const RequestLimits& limits, DecodedRequest& req) {
  const auto* payload = msg.body_as_PingRequest()->payload();
  const std::uint64_t cap = std::min<std::uint64_t>(kMaxPingPayload, limits.max_reply_payload);
  if (payload && payload->size() > cap)
    return error(req.request_id, wire::ErrorCode::MessageTooLarge,
                 "ping payload " + std::to_string(payload->size()) + " bytes > " + std::to_string(cap));
  return std::nullopt;
}

std::optional<DecodeError> check_digest(const wire::Message& msg, const RequestLimits& limits, DecodedRequest& req) {
  if (auto e = arena_only(req.request_id, msg.body_as_DigestRequest()->input())) return e;
  req.input = schema::check_tensor_ref(msg.body_as_DigestRequest()->input(), limits.client_arena_bytes);
  if (!req.input) return error(req.request_id, req.input.code, req.input.reason);
  return std::nullopt;
}

std::optional<DecodeError> check_register(const wire::Message& msg, const RequestLimits&, DecodedRequest& req) {
  const auto* head = msg.body_as_RegisterRequest()->head();
  if (head == nullptr || head->kind() == nullptr)
    return error(req.request_id, wire::ErrorCode::BadMessage, "RegisterRequest needs a head with a kind");
  return std::nullopt;
}

std::optional<DecodeError> check_job_start(const wire::Message& msg, const RequestLimits&, DecodedRequest& req) {
  const auto* spec = msg.body_as_JobStartRequest()->spec();
  if (spec == nullptr || spec->kind() == nullptr)
    return error(req.request_id, wire::ErrorCode::BadMessage, "JobStartRequest needs a spec with a kind");
  if (!optional_label(spec->dataset())) return error(req.request_id, wire::ErrorCode::BadMessage, name_rule("dataset names"));
  if (spec->task() && spec->task()->size() > 256)
    return error(req.request_id, wire::ErrorCode::BadMessage, "task name too long");
  return std::nullopt;
}

std::optional<DecodeError> check_env_open(const wire::Message& msg, const RequestLimits&, DecodedRequest& req) {
  if (msg.body_as_EnvOpenRequest()->task() == nullptr)
    return error(req.request_id, wire::ErrorCode::BadMessage, "EnvOpenRequest needs a task");
  return std::nullopt;
}

std::optional<DecodeError> check_rl_start(const wire::Message& msg, const RequestLimits&, DecodedRequest& req) {
  const auto* r = msg.body_as_RlStartRequest();
  if (r->task() == nullptr || r->algorithm() == nullptr)
    return error(req.request_id, wire::ErrorCode::BadMessage, "RlStartRequest needs an algorithm and a task");
  if (!optional_label(r->demo_dataset()))
    return error(req.request_id, wire::ErrorCode::BadMessage, name_rule("dataset names"));
  return std::nullopt;
}

// Observations are written into the tenant's arena: both tensors must lie inside it.
std::optional<DecodeError> check_env_step(const wire::Message& msg, const RequestLimits& limits, DecodedRequest& req) {
  const auto* r = msg.body_as_EnvStepRequest();
  if (r->sessions() == nullptr || r->images() == nullptr || r->state() == nullptr)
    return error(req.request_id, wire::ErrorCode::BadMessage, "EnvStepRequest needs sessions, images and state");
  for (const auto* ref : {r->images(), r->state()}) {
    if (auto e = arena_only(req.request_id, ref)) return e;
    auto check = schema::check_tensor_ref(ref, limits.client_arena_bytes);
    if (!check) return error(req.request_id, check.code, check.reason);
  }
  return std::nullopt;
}

// Checkpoint tags and dataset names: labels, never paths.
std::optional<DecodeError> check_label(const flatbuffers::String* tag, DecodedRequest& req) {
  if (!label(tag))
    return error(req.request_id, wire::ErrorCode::BadMessage, name_rule("checkpoint tags and dataset names"));
  return std::nullopt;
}
std::optional<DecodeError> check_save(const wire::Message& msg, const RequestLimits&, DecodedRequest& req) {
  return check_label(msg.body_as_SaveRequest()->tag(), req);
}
std::optional<DecodeError> check_load(const wire::Message& msg, const RequestLimits&, DecodedRequest& req) {
  return check_label(msg.body_as_LoadRequest()->tag(), req);
}
std::optional<DecodeError> check_dataset_step(const wire::Message& msg, const RequestLimits&, DecodedRequest& req) {
  return check_label(msg.body_as_DatasetSftStepRequest()->name(), req);
}
std::optional<DecodeError> check_dataset_load(const wire::Message& msg, const RequestLimits&, DecodedRequest& req) {
  const auto* q = msg.body_as_DatasetLoadRequest();
  if (auto e = check_label(q->name(), req)) return e;
  if (!key_list(q->views()) || !key_list(q->state_keys()))
    return error(req.request_id, wire::ErrorCode::BadMessage, "views and state_keys are at most 16 names of 1-255 bytes");
  if (q->instruction() && q->instruction()->size() > 4096)
    return error(req.request_id, wire::ErrorCode::BadMessage, "instruction over 4096 bytes");
  return std::nullopt;
}

std::optional<DecodeError> check_register_region(const wire::Message& msg, const RequestLimits&, DecodedRequest& req) {
  const auto* q = msg.body_as_RegisterRegionRequest();
  if (q->bytes() == 0) return error(req.request_id, wire::ErrorCode::BadMessage, "a region needs bytes > 0");
  if (static_cast<unsigned>(q->kind()) > static_cast<unsigned>(wire::RegionKind::MAX))
    return error(req.request_id, wire::ErrorCode::BadMessage, "unknown region kind");
  return std::nullopt;
}

// An observation and the request's other tensor (actions, or the features' destination): every
// tensor named must lie inside the arena (or, for a region, be well formed: its bounds are
// checked where it is routed); shapes are the model service's to judge.
std::optional<DecodeError> check_tensors(const wire::Observation* obs, const wire::TensorRef* extra,
                                         const char* extra_name, bool extra_required, const RequestLimits& limits,
                                         DecodedRequest& req) {
  if (obs == nullptr) return error(req.request_id, wire::ErrorCode::BadMessage, "request without an observation");
  const std::tuple<const wire::TensorRef*, const char*, bool> refs[] = {{obs->images(), "images", true},
                                                                        {obs->tokens(), "tokens", true},
                                                                        {obs->token_mask(), "token_mask", true},
                                                                        {obs->state(), "state", false},
                                                                        {extra, extra_name, extra_required}};
  for (const auto& [ref, name, required] : refs) {
    if (ref == nullptr) {
      if (required) return error(req.request_id, wire::ErrorCode::BadMessage, std::string("missing tensor ") + name);
      continue;
    }
    auto check = check_ref(ref, limits);
    if (!check) return error(req.request_id, check.code, std::string(name) + ": " + check.reason);
  }
  return std::nullopt;
}
std::optional<DecodeError> check_sft_step(const wire::Message& msg, const RequestLimits& limits, DecodedRequest& req) {
  const auto* r = msg.body_as_SftStepRequest();
  return check_tensors(r->obs(), r->actions(), "actions", true, limits, req);
}
std::optional<DecodeError> check_features(const wire::Message& msg, const RequestLimits& limits, DecodedRequest& req) {
  const auto* r = msg.body_as_FeaturesRequest();
  return check_tensors(r->obs(), r->out(), "out", true, limits, req);
}
std::optional<DecodeError> check_predict(const wire::Message& msg, const RequestLimits& limits, DecodedRequest& req) {
  const auto* r = msg.body_as_PredictRequest();
  if (r->obs() != nullptr && !optional_label(r->dataset()))
    return error(req.request_id, wire::ErrorCode::BadMessage, name_rule("dataset names"));
  return check_tensors(r->obs(), nullptr, "out", false, limits, req);
}

// --- The table of request kinds ----------------------------------------------------------------
// Every type a client may send, once: who answers it and what is checked before. Anything else
// (a reply type, NONE, a value past the schema's) is WrongMessageType.
struct RequestKind {
  wire::Body type;
  Route route;
  Check check;
};
constexpr RequestKind kRequestKinds[] = {
    {wire::Body::PingRequest, Route::Reactor, check_ping},
    {wire::Body::DigestRequest, Route::Reactor, check_digest},
    {wire::Body::OutputRelease, Route::Reactor, no_check},
    {wire::Body::RegisterRegionRequest, Route::Reactor, check_register_region},
    {wire::Body::UnregisterRegionRequest, Route::Reactor, no_check},
    {wire::Body::RegisterRequest, Route::Model, check_register},
    {wire::Body::SftStepRequest, Route::Model, check_sft_step},
    {wire::Body::PredictRequest, Route::Model, check_predict},
    {wire::Body::FeaturesRequest, Route::Model, check_features},
    {wire::Body::PublishRequest, Route::Model, no_check},
    {wire::Body::SlotDigestRequest, Route::Model, no_check},
    {wire::Body::BackboneRequest, Route::Model, no_check},
    {wire::Body::SaveRequest, Route::Model, check_save},
    {wire::Body::LoadRequest, Route::Model, check_load},
    {wire::Body::EnvOpenRequest, Route::Env, check_env_open},
    {wire::Body::EnvStepRequest, Route::Env, check_env_step},
    {wire::Body::EnvCloseRequest, Route::Env, no_check},
    {wire::Body::DatasetLoadRequest, Route::Dataset, check_dataset_load},
    {wire::Body::DatasetSftStepRequest, Route::Dataset, check_dataset_step},
    {wire::Body::JobStartRequest, Route::Job, check_job_start},
    {wire::Body::JobStatusRequest, Route::Job, no_check},
    {wire::Body::RlStartRequest, Route::Job, check_rl_start},
    {wire::Body::RlStatusRequest, Route::Job, no_check},
};

const RequestKind* kind_of(wire::Body type) {
  for (const auto& k : kRequestKinds)
    if (k.type == type) return &k;
  return nullptr;
}

}  // namespace

std::optional<Route> route_of(wire::Body type) {
  if (const auto* k = kind_of(type)) return k->route;
  return std::nullopt;
}

DecodeResult decode_request(std::span<const std::uint8_t> bytes, const RequestLimits& limits) {
  // Depth and table limits well under the Verifier's defaults: our messages are shallow.
  flatbuffers::Verifier verifier(bytes.data(), bytes.size(), /*max_depth=*/16,
                                 /*max_tables=*/1024);
  if (!wire::VerifyMessageBuffer(verifier))
    return error(0, wire::ErrorCode::BadMessage,
                 "message of " + std::to_string(bytes.size()) + " bytes failed verification");
  const wire::Message* msg = wire::GetMessage(bytes.data());
  const std::uint64_t id = msg->request_id();
  if (msg->protocol_version() != schema::kProtocolVersion)
    return error(id, wire::ErrorCode::UnsupportedVersion,
                 "protocol version " + std::to_string(msg->protocol_version()) +
                     ", daemon speaks " + std::to_string(schema::kProtocolVersion));

  // A union type without its table passes the Verifier: treat it as no body at all.
  if (msg->body() == nullptr || msg->body_type() == wire::Body::NONE)
    return error(id, wire::ErrorCode::WrongMessageType, "message has no body");
  const RequestKind* kind = kind_of(msg->body_type());
  if (kind == nullptr)
    return error(id, wire::ErrorCode::WrongMessageType,
                 std::string("a client may not send ") +
                     (static_cast<unsigned>(msg->body_type()) <= static_cast<unsigned>(wire::Body::MAX)
                          ? wire::EnumNameBody(msg->body_type())
                          : "an unknown body type"));
  DecodedRequest req;
  req.request_id = id;
  req.type = kind->type;
  req.route = kind->route;
  req.message = msg;
  if (auto e = kind->check(*msg, limits, req)) return *e;
  return req;
}

std::variant<ControlRequest, DecodeError> decode_control(std::span<const std::uint8_t> frame) {
  flatbuffers::Verifier verifier(frame.data(), frame.size(), 16, 1024);
  if (!verifier.VerifyBuffer<wire::ControlMessage>(nullptr))
    return error(0, wire::ErrorCode::BadMessage, "control frame failed verification");
  const auto* msg = flatbuffers::GetRoot<wire::ControlMessage>(frame.data());
  const auto type = msg->body() ? msg->body_type() : wire::ControlBody::NONE;
  if (type == wire::ControlBody::StatusRequest &&
      msg->body_as_StatusRequest()->protocol_version() != schema::kProtocolVersion)
    return error(0, wire::ErrorCode::UnsupportedVersion,
                 "protocol version " + std::to_string(msg->body_as_StatusRequest()->protocol_version()) +
                     ", daemon speaks " + std::to_string(schema::kProtocolVersion));
  std::uint32_t version = schema::kProtocolVersion;
  if (type == wire::ControlBody::MetricsRequest) version = msg->body_as_MetricsRequest()->protocol_version();
  if (type == wire::ControlBody::CancelJobRequest) version = msg->body_as_CancelJobRequest()->protocol_version();
  if (type == wire::ControlBody::ReleaseTenantRequest) version = msg->body_as_ReleaseTenantRequest()->protocol_version();
  if (type == wire::ControlBody::DrainRequest) version = msg->body_as_DrainRequest()->protocol_version();
  if (type == wire::ControlBody::ScaleRequest) version = msg->body_as_ScaleRequest()->protocol_version();
  if (version != schema::kProtocolVersion)
    return error(0, wire::ErrorCode::UnsupportedVersion,
                 "protocol version " + std::to_string(version) + ", daemon speaks " +
                     std::to_string(schema::kProtocolVersion));
  if (type != wire::ControlBody::AttachRequest && type != wire::ControlBody::StatusRequest &&
      type != wire::ControlBody::MetricsRequest && type != wire::ControlBody::CancelJobRequest &&
      type != wire::ControlBody::ReleaseTenantRequest && type != wire::ControlBody::DrainRequest &&
      type != wire::ControlBody::ScaleRequest)
    return error(0, wire::ErrorCode::WrongMessageType,
                 "the control socket accepts AttachRequest, StatusRequest, MetricsRequest, CancelJobRequest, "
                 "ReleaseTenantRequest, DrainRequest and ScaleRequest");
  return ControlRequest{type, msg};
}

}  // namespace nexus::daemon
