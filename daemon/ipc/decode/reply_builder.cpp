#include "daemon/ipc/decode/reply_builder.hpp"

#include "schema/protocol.hpp"

namespace nexus::daemon {

std::span<const std::uint8_t> ReplyBuilder::finish(std::uint64_t request_id, wire::Body type,
                                                   flatbuffers::Offset<void> body) {
  auto msg = wire::CreateMessage(fbb_, schema::kProtocolVersion, request_id, type, body);
  fbb_.Finish(msg);
  return {fbb_.GetBufferPointer(), fbb_.GetSize()};
}

std::span<const std::uint8_t> ReplyBuilder::error(std::uint64_t request_id, wire::ErrorCode code,
                                                  std::string_view reason) {
  fbb_.Clear();
  auto body = wire::CreateError(fbb_, code, fbb_.CreateString(reason.data(), reason.size()));
  return finish(request_id, wire::Body::Error, body.Union());
}

std::span<const std::uint8_t> ReplyBuilder::ping(std::uint64_t request_id,
                                                 std::span<const std::uint8_t> payload) {
  fbb_.Clear();
  auto body = wire::CreatePingReply(fbb_, fbb_.CreateVector(payload.data(), payload.size()));
  return finish(request_id, wire::Body::PingReply, body.Union());
}

std::span<const std::uint8_t> ReplyBuilder::digest(std::uint64_t request_id, std::uint64_t fnv1a,
                                                   std::uint64_t bytes) {
  fbb_.Clear();
  auto body = wire::CreateDigestReply(fbb_, fnv1a, bytes);
  return finish(request_id, wire::Body::DigestReply, body.Union());
}

std::span<const std::uint8_t> ReplyBuilder::registered(std::uint64_t request_id, std::string_view backbone,
                                                       std::int32_t image_size, std::int32_t max_views,
                                                       std::int32_t max_tokens, std::int32_t feature_dim) {
  fbb_.Clear();
  auto body = wire::CreateRegisterReply(fbb_, fbb_.CreateString(backbone.data(), backbone.size()), image_size,
                                        max_views, max_tokens, feature_dim);
  return finish(request_id, wire::Body::RegisterReply, body.Union());
}

std::span<const std::uint8_t> ReplyBuilder::sft_step(std::uint64_t request_id, double loss, double grad_norm,
                                                     std::uint64_t step) {
  fbb_.Clear();
  return finish(request_id, wire::Body::SftStepReply, wire::CreateSftStepReply(fbb_, loss, grad_norm, step).Union());
}

std::span<const std::uint8_t> ReplyBuilder::predict(std::uint64_t request_id, std::span<const float> actions,
                                                    std::span<const std::int64_t> shape) {
  fbb_.Clear();
  auto a = fbb_.CreateVector(actions.data(), actions.size());
  auto s = fbb_.CreateVector(shape.data(), shape.size());
  return finish(request_id, wire::Body::PredictReply, wire::CreatePredictReply(fbb_, a, s).Union());
}

std::span<const std::uint8_t> ReplyBuilder::slot_digest(std::uint64_t request_id, std::uint64_t parameters,
                                                       std::uint64_t optimizer, std::uint64_t step,
                                                       std::uint64_t latest_version) {
  fbb_.Clear();
  return finish(request_id, wire::Body::SlotDigestReply,
                wire::CreateSlotDigestReply(fbb_, parameters, optimizer, step, latest_version).Union());
}

std::span<const std::uint8_t> ReplyBuilder::published(std::uint64_t request_id, std::uint64_t version) {
  fbb_.Clear();
  return finish(request_id, wire::Body::PublishReply, wire::CreatePublishReply(fbb_, version).Union());
}

std::span<const std::uint8_t> ReplyBuilder::saved(std::uint64_t request_id, std::uint64_t step) {
  fbb_.Clear();
  return finish(request_id, wire::Body::SaveReply, wire::CreateSaveReply(fbb_, step).Union());
}

std::span<const std::uint8_t> ReplyBuilder::loaded(std::uint64_t request_id, std::uint64_t step) {
  fbb_.Clear();
  return finish(request_id, wire::Body::LoadReply, wire::CreateLoadReply(fbb_, step).Union());
}

std::span<const std::uint8_t> ReplyBuilder::region_registered(std::uint64_t request_id, std::uint32_t region,
                                                              std::uint64_t bytes) {
  fbb_.Clear();
  auto body = wire::CreateRegisterRegionReply(fbb_, region, bytes);
  return finish(request_id, wire::Body::RegisterRegionReply, body.Union());
}

std::span<const std::uint8_t> ReplyBuilder::region_unregistered(std::uint64_t request_id, std::uint32_t region) {
  fbb_.Clear();
  auto body = wire::CreateUnregisterRegionReply(fbb_, region);
  return finish(request_id, wire::Body::UnregisterRegionReply, body.Union());
}

std::span<const std::uint8_t> ReplyBuilder::features(std::uint64_t request_id, std::uint32_t samples, std::uint32_t dim) {
  fbb_.Clear();
  auto body = wire::CreateFeaturesReply(fbb_, samples, dim);
  return finish(request_id, wire::Body::FeaturesReply, body.Union());
}

}  // namespace nexus::daemon
