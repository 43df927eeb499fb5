#include "daemon/master/env_routes.hpp"

#include <flatbuffers/flatbuffers.h>

#include "daemon/master/wire_replies.hpp"
#include "schema/tensor_ref.hpp"

namespace nexus::daemon {
namespace {

using env::EnvError;
using env::EnvService;
using env::SessionResult;
constexpr auto finish = finish_reply;
constexpr auto error = error_reply;

wire::ErrorCode code_of(const EnvError& e) {
  return e.kind() == EnvError::Kind::UnknownSession ? wire::ErrorCode::UnknownSession : wire::ErrorCode::EnvFailed;
}

std::vector<std::uint64_t> ids_of(const flatbuffers::Vector<std::uint64_t>* v) {
  return v ? std::vector<std::uint64_t>(v->begin(), v->end()) : std::vector<std::uint64_t>{};
}

// The arena bytes a checked tensor reference names, if its dtype and shape are as required.
std::uint8_t* target(const ServiceRequest& w, const wire::TensorRef* ref, wire::DType dtype,
                     const std::vector<std::int64_t>& shape, const char* name, std::string& why) {
  const auto check = schema::check_tensor_ref(ref, w.segment->layout().client_arena_bytes);
  std::vector<std::int64_t> got(ref->shape()->begin(), ref->shape()->end());
  if (!check || ref->dtype() != dtype || got != shape) {
    why = std::string(name) + " must be " + schema::dtype_name(dtype) + " [";
    for (std::size_t i = 0; i < shape.size(); ++i) why += (i ? ", " : "") + std::to_string(shape[i]);
    why += "] in your arena";
    return nullptr;
  }
  return w.segment->client_arena_for_results() + check.offset;
}

Bytes step(EnvService& envs, const ServiceRequest& w, const wire::EnvStepRequest& r) {
  const auto ids = ids_of(r.sessions());
  const auto spec = envs.spec_of(w.tenant, ids);  // throws for unknown sessions
  const auto n = static_cast<std::int64_t>(ids.size());
  std::string why;
  auto* images = target(w, r.images(), wire::DType::UInt8, {n, 1, spec.image_size, spec.image_size, 3}, "images", why);
  auto* state = images ? target(w, r.state(), wire::DType::Float32, {n, spec.state_dim}, "state", why) : nullptr;
  if (!state) return error(w.request_id, wire::ErrorCode::BadTensor, why);
  // The tenant's own arena: it may race our writes, which only garbles its own observation.
  std::vector<SessionResult> results;
  if (r.reset_seeds() && r.reset_seeds()->size() > 0) {
    results = envs.reset(w.tenant, ids, ids_of(r.reset_seeds()), images, reinterpret_cast<float*>(state));
  } else {
    std::vector<float> actions;
    if (r.actions()) actions.assign(r.actions()->begin(), r.actions()->end());
    results = envs.step(w.tenant, ids, actions, images, reinterpret_cast<float*>(state));
  }
  flatbuffers::FlatBufferBuilder fbb(1024 + 64 * results.size());
  std::vector<float> reward;
  std::vector<std::uint8_t> done, success, failed, truncated;
  std::vector<flatbuffers::Offset<flatbuffers::String>> instructions, errors, engines, interrupted;
  for (const auto& s : results) {
    reward.push_back(s.outcome.reward);
    done.push_back(s.outcome.done);
    success.push_back(s.outcome.success);
    failed.push_back(s.failed);
    truncated.push_back(s.outcome.truncated);
    instructions.push_back(fbb.CreateString(s.instruction));
    errors.push_back(fbb.CreateString(s.error));
    engines.push_back(fbb.CreateString(s.engine));
    interrupted.push_back(fbb.CreateString(s.interrupted));
  }
  auto body = wire::CreateEnvStepReply(fbb, fbb.CreateVector(reward), fbb.CreateVector(done), fbb.CreateVector(success),
                                       fbb.CreateVector(instructions), fbb.CreateVector(errors), fbb.CreateVector(failed),
                                       fbb.CreateVector(truncated), fbb.CreateVector(engines),
                                       fbb.CreateVector(interrupted));
  return finish(fbb, w.request_id, wire::Body::EnvStepReply, body.Union());
}

}  // namespace

std::vector<std::uint8_t> handle_env_request(EnvService& envs, const ServiceRequest& w, int image_size) {
  const auto* msg = w.wire_message();
  try {
    if (w.type == wire::Body::EnvOpenRequest) {
      const auto* r = msg->body_as_EnvOpenRequest();
      // Observations match the resident backbone's geometry: the only size a tenant can use.
      const auto opened = envs.open(w.tenant, r->task()->str(), r->count(), image_size, r->max_steps());
      flatbuffers::FlatBufferBuilder fbb(256);
      const auto& s = opened.spec;
      auto body = wire::CreateEnvOpenReply(fbb, fbb.CreateVector(opened.ids), s.image_size, s.state_dim, s.action_dim,
                                           s.max_steps);
      return finish(fbb, w.request_id, wire::Body::EnvOpenReply, body.Union());
    }
    if (w.type == wire::Body::EnvCloseRequest) {
      const auto closed = envs.close(w.tenant, ids_of(msg->body_as_EnvCloseRequest()->sessions()));
      flatbuffers::FlatBufferBuilder fbb(64);
      return finish(fbb, w.request_id, wire::Body::EnvCloseReply,
                    wire::CreateEnvCloseReply(fbb, static_cast<std::uint32_t>(closed)).Union());
    }
    return step(envs, w, *msg->body_as_EnvStepRequest());
  } catch (const EnvError& e) {
    return error(w.request_id, code_of(e), e.what());
  } catch (const std::exception& e) {
    return error(w.request_id, wire::ErrorCode::Internal, e.what());
  }
}

}  // namespace nexus::daemon
