#include "daemon/ipc/decode/request_decoder.hpp"

#include <flatbuffers/flatbuffers.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <string_view>
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

}  // namespace

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
  if (msg->body() == nullptr)
    return error(id, wire::ErrorCode::WrongMessageType, "message has no body");

  DecodedRequest req;
  req.request_id = id;
  req.type = msg->body_type();
  req.message = msg;
  switch (msg->body_type()) {
    case wire::Body::PingRequest: {
      const auto* payload = msg->body_as_PingRequest()->payload();
      const std::uint64_t cap = std::min<std::uint64_t>(kMaxPingPayload, limits.max_reply_payload);
      if (payload && payload->size() > cap)
        return error(id, wire::ErrorCode::MessageTooLarge,
                     "ping payload " + std::to_string(payload->size()) + " bytes > " +
                         std::to_string(cap));
      return req;
    }
    case wire::Body::DigestRequest: {
      if (auto e = arena_only(id, msg->body_as_DigestRequest()->input())) return *e;
      req.input = schema::check_tensor_ref(msg->body_as_DigestRequest()->input(), limits.client_arena_bytes);
      if (!req.input) return error(id, req.input.code, req.input.reason);
      return req;
    }
    case wire::Body::RegisterRequest:
      if (msg->body_as_RegisterRequest()->head() == nullptr ||
          msg->body_as_RegisterRequest()->head()->kind() == nullptr)
        return error(id, wire::ErrorCode::BadMessage, "RegisterRequest needs a head with a kind");
      return req;
    case wire::Body::PublishRequest:
    case wire::Body::SlotDigestRequest:
    case wire::Body::BackboneRequest:
    case wire::Body::EnvCloseRequest:
    case wire::Body::RlStatusRequest:
    case wire::Body::JobStatusRequest:
    case wire::Body::OutputRelease:
      return req;
    case wire::Body::JobStartRequest: {
      const auto* spec = msg->body_as_JobStartRequest()->spec();
      if (spec == nullptr || spec->kind() == nullptr)
        return error(id, wire::ErrorCode::BadMessage, "JobStartRequest needs a spec with a kind");
      if (!optional_label(spec->dataset())) return error(id, wire::ErrorCode::BadMessage, name_rule("dataset names"));
      if (spec->task() && spec->task()->size() > 256) return error(id, wire::ErrorCode::BadMessage, "task name too long");
      return req;
    }
    case wire::Body::EnvOpenRequest:
      if (msg->body_as_EnvOpenRequest()->task() == nullptr)
        return error(id, wire::ErrorCode::BadMessage, "EnvOpenRequest needs a task");
      return req;
    case wire::Body::RlStartRequest:
      if (msg->body_as_RlStartRequest()->task() == nullptr || msg->body_as_RlStartRequest()->algorithm() == nullptr)
        return error(id, wire::ErrorCode::BadMessage, "RlStartRequest needs an algorithm and a task");
      if (!optional_label(msg->body_as_RlStartRequest()->demo_dataset()))
        return error(id, wire::ErrorCode::BadMessage, name_rule("dataset names"));
      return req;
    case wire::Body::EnvStepRequest: {
      // Observations are written into the tenant's arena: both tensors must lie inside it.
      const auto* r = msg->body_as_EnvStepRequest();
      if (r->sessions() == nullptr || r->images() == nullptr || r->state() == nullptr)
        return error(id, wire::ErrorCode::BadMessage, "EnvStepRequest needs sessions, images and state");
      for (const auto* ref : {r->images(), r->state()}) {
        if (auto e = arena_only(id, ref)) return *e;
        auto check = schema::check_tensor_ref(ref, limits.client_arena_bytes);
        if (!check) return error(id, check.code, check.reason);
      }
      return req;
    }
    case wire::Body::SaveRequest:
    case wire::Body::LoadRequest:
    case wire::Body::DatasetLoadRequest:
    case wire::Body::DatasetSftStepRequest: {
      // Checkpoint tags and dataset names: labels, never paths.
      const flatbuffers::String* tag = nullptr;
      switch (msg->body_type()) {
        case wire::Body::SaveRequest: tag = msg->body_as_SaveRequest()->tag(); break;
        case wire::Body::LoadRequest: tag = msg->body_as_LoadRequest()->tag(); break;
        case wire::Body::DatasetLoadRequest: tag = msg->body_as_DatasetLoadRequest()->name(); break;
        default: tag = msg->body_as_DatasetSftStepRequest()->name(); break;
      }
      if (!label(tag)) return error(id, wire::ErrorCode::BadMessage, name_rule("checkpoint tags and dataset names"));
      if (msg->body_type() == wire::Body::DatasetLoadRequest) {
        const auto* q = msg->body_as_DatasetLoadRequest();
        if (!key_list(q->views()) || !key_list(q->state_keys()))
          return error(id, wire::ErrorCode::BadMessage, "views and state_keys are at most 16 names of 1-255 bytes");
        if (q->instruction() && q->instruction()->size() > 4096)
          return error(id, wire::ErrorCode::BadMessage, "instruction over 4096 bytes");
      }
      return req;
    }
    case wire::Body::RegisterRegionRequest: {
      const auto* q = msg->body_as_RegisterRegionRequest();
      if (q->bytes() == 0) return error(id, wire::ErrorCode::BadMessage, "a region needs bytes > 0");
      if (static_cast<unsigned>(q->kind()) > static_cast<unsigned>(wire::RegionKind::MAX))
        return error(id, wire::ErrorCode::BadMessage, "unknown region kind");
      return req;
    }
    case wire::Body::UnregisterRegionRequest:
      return req;
    case wire::Body::SftStepRequest:
    case wire::Body::PredictRequest:
    case wire::Body::FeaturesRequest: {
      const bool sft = msg->body_type() == wire::Body::SftStepRequest;
      const bool features = msg->body_type() == wire::Body::FeaturesRequest;
      const wire::Observation* obs = sft        ? msg->body_as_SftStepRequest()->obs()
                                     : features ? msg->body_as_FeaturesRequest()->obs()
                                                : msg->body_as_PredictRequest()->obs();
      if (obs == nullptr) return error(id, wire::ErrorCode::BadMessage, "request without an observation");
      if (!sft && !features && !optional_label(msg->body_as_PredictRequest()->dataset()))
        return error(id, wire::ErrorCode::BadMessage, name_rule("dataset names"));
      // Every tensor named must lie inside the arena (or, for a region, be well formed: its
      // bounds are checked where it is routed); shapes are the model service's to judge.
      const wire::TensorRef* extra = sft ? msg->body_as_SftStepRequest()->actions()
                                     : features ? msg->body_as_FeaturesRequest()->out()
                                                : nullptr;
      const std::pair<const wire::TensorRef*, const char*> refs[] = {
          {obs->images(), "images"}, {obs->tokens(), "tokens"}, {obs->token_mask(), "token_mask"},
          {obs->state(), "state"}, {extra, sft ? "actions" : "out"}};
      for (const auto& [ref, name] : refs) {
        const bool required = std::string_view(name) != "state" && (sft || features || std::string_view(name) != "out");
        if (ref == nullptr) {
          if (required) return error(id, wire::ErrorCode::BadMessage, std::string("missing tensor ") + name);
          continue;
        }
        auto check = check_ref(ref, limits);
        if (!check) return error(id, check.code, std::string(name) + ": " + check.reason);
      }
      return req;
    }
    case wire::Body::NONE:
      return error(id, wire::ErrorCode::WrongMessageType, "message has no body");
    default:
      return error(id, wire::ErrorCode::WrongMessageType,
                   std::string("a client may not send ") +
                       (static_cast<unsigned>(msg->body_type()) <= static_cast<unsigned>(wire::Body::MAX)
                            ? wire::EnumNameBody(msg->body_type())
                            : "an unknown body type"));
  }
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
