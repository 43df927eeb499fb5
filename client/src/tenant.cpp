// Client side of the model requests (nexus/tenant.hpp).
#include "client_state.hpp"
#include "nexus/client.hpp"
#include "schema/tokenizer.hpp"

namespace nexus {
namespace {

flatbuffers::Offset<wire::TensorRef> ref_of(flatbuffers::FlatBufferBuilder& fbb, const Tensor* t) {
  if (t == nullptr) return 0;
  return wire::CreateTensorRef(fbb, t->offset(), t->bytes(), static_cast<wire::DType>(t->dtype()),
                               fbb.CreateVector(t->shape()), t->region());
}

flatbuffers::Offset<wire::Observation> observation(flatbuffers::FlatBufferBuilder& fbb, const Observation& o) {
  if (!o.images || !o.tokens || !o.token_mask)
    throw Error(ErrorCode::BadBatch, "an observation needs images, tokens and token_mask");
  auto images = ref_of(fbb, o.images), tokens = ref_of(fbb, o.tokens), mask = ref_of(fbb, o.token_mask),
       state = ref_of(fbb, o.state);
  return wire::CreateObservation(fbb, images, tokens, mask, state);
}

}  // namespace

void tokenize(std::string_view text, const Tensor& tokens, const Tensor& token_mask, std::int64_t row) {
  if (tokens.dtype() != DType::Int32 || token_mask.dtype() != DType::UInt8 || tokens.shape().size() != 2 ||
      token_mask.shape() != tokens.shape() || row < 0 || row >= tokens.shape()[0])
    throw Error(ErrorCode::BadTensor, "tokenize needs int32 tokens and uint8 mask of one shape [n, max_tokens]");
  if (tokens.device() >= 0 || token_mask.device() >= 0)
    throw Error(ErrorCode::BadTensor, "tokenize writes host memory: tokenize into the arena or a host region, then copy");
  const std::int64_t t = tokens.shape()[1];
  auto tok = tokens.as<std::int32_t>().subspan(static_cast<std::size_t>(row * t), static_cast<std::size_t>(t));
  auto mask = token_mask.as<std::uint8_t>().subspan(static_cast<std::size_t>(row * t), static_cast<std::size_t>(t));
  schema::tokenize_bytes(text, tok.data(), mask.data(), t);
}

BackboneInfo Client::register_tenant(const TenantSpec& spec) {
  const auto id = state_->submit(wire::Body::RegisterRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    const auto& h = spec.head;
    const auto& a = h.adapter;
    const bool adapted = a.rank != 0 || a.alpha != 0 || a.targets != 0 || a.blocks != 0;
    auto adapter = adapted ? wire::CreateAdapterSpec(fbb, a.rank, a.alpha, a.targets, a.blocks) : 0;
    auto head = wire::CreateHeadSpec(fbb, fbb.CreateString(h.kind), h.state_dim, h.action_dim, h.chunk, h.hidden,
                                     h.flow_steps, h.flow_noise, h.token_queries, adapter);
    const auto& o = spec.optimizer;
    auto opt = wire::CreateOptimizerSpec(fbb, o.lr, o.beta1, o.beta2, o.weight_decay, o.grad_clip);
    return wire::CreateRegisterRequest(fbb, spec.views, head, opt, spec.seed).Union();
  });
  return Future<BackboneInfo>(state_.get(), id).get();
}

BackboneInfo Client::backbone() {
  const auto id = state_->submit(wire::Body::BackboneRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    return wire::CreateBackboneRequest(fbb).Union();
  });
  return Future<BackboneInfo>(state_.get(), id).get();
}

Future<SftResult> Client::sft_step_async(const Observation& obs, const Tensor& actions) {
  const auto id = state_->submit(wire::Body::SftStepRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    auto o = observation(fbb, obs);
    auto a = ref_of(fbb, &actions);
    return wire::CreateSftStepRequest(fbb, o, a).Union();
  });
  return Future<SftResult>(state_.get(), id);
}

SftResult Client::sft_step(const Observation& obs, const Tensor& actions) { return sft_step_async(obs, actions).get(); }

Future<Prediction> Client::predict_async(const Observation& obs, std::uint64_t version, const std::string& dataset) {
  const auto id = state_->submit(wire::Body::PredictRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    auto o = observation(fbb, obs);
    const auto d = dataset.empty() ? flatbuffers::Offset<flatbuffers::String>() : fbb.CreateString(dataset);
    return wire::CreatePredictRequest(fbb, o, version, d).Union();
  });
  return Future<Prediction>(state_.get(), id);
}

Prediction Client::predict(const Observation& obs, std::uint64_t version, const std::string& dataset) {
  return predict_async(obs, version, dataset).get();
}

Future<FeaturesResult> Client::features_async(const Observation& obs, const Tensor& out) {
  const auto id = state_->submit(wire::Body::FeaturesRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    auto o = observation(fbb, obs);
    auto r = ref_of(fbb, &out);
    return wire::CreateFeaturesRequest(fbb, o, r).Union();
  });
  return Future<FeaturesResult>(state_.get(), id);
}

FeaturesResult Client::features(const Observation& obs, const Tensor& out) { return features_async(obs, out).get(); }

std::uint64_t Client::publish() {
  const auto id = state_->submit(wire::Body::PublishRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    return wire::CreatePublishRequest(fbb).Union();
  });
  return Future<std::uint64_t>(state_.get(), id).get();
}

SlotDigest Client::slot_digest() {
  const auto id = state_->submit(wire::Body::SlotDigestRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    return wire::CreateSlotDigestRequest(fbb).Union();
  });
  return Future<SlotDigest>(state_.get(), id).get();
}

std::uint64_t Client::save(const std::string& tag) {
  const auto id = state_->submit(wire::Body::SaveRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    return wire::CreateSaveRequest(fbb, fbb.CreateString(tag)).Union();
  });
  return Future<std::uint64_t>(state_.get(), id).get();
}

std::uint64_t Client::load(const std::string& tag) {
  const auto id = state_->submit(wire::Body::LoadRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    return wire::CreateLoadRequest(fbb, fbb.CreateString(tag)).Union();
  });
  return Future<std::uint64_t>(state_.get(), id).get();
}

}  // namespace nexus
