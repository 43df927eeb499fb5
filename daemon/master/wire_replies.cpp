#include "daemon/master/wire_replies.hpp"

#include "daemon/ipc/decode/reply_builder.hpp"
#include "schema/protocol.hpp"

namespace nexus::daemon {
namespace {

ReplyBuilder& builder() {
  thread_local ReplyBuilder b;  // one per thread: replies are built on executor, lanes and jobs
  return b;
}
Bytes copy(std::span<const std::uint8_t> s) { return Bytes(s.begin(), s.end()); }

template <class... F>
struct Overload : F... {
  using F::operator()...;
};
template <class... F>
Overload(F...) -> Overload<F...>;

}  // namespace

Bytes error_reply(std::uint64_t request_id, wire::ErrorCode code, const std::string& reason) {
  return copy(builder().error(request_id, code, reason));
}

Bytes finish_reply(flatbuffers::FlatBufferBuilder& fbb, std::uint64_t request_id, wire::Body type,
                   flatbuffers::Offset<void> body) {
  fbb.Finish(wire::CreateMessage(fbb, schema::kProtocolVersion, request_id, type, body));
  return Bytes(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

wire::ErrorCode wire_code(model::Fault fault) {
  switch (fault) {
    case model::Fault::NotRegistered: return wire::ErrorCode::NotRegistered;
    case model::Fault::BadRequest: return wire::ErrorCode::BadMessage;
    case model::Fault::BadBatch: return wire::ErrorCode::BadBatch;
    case model::Fault::UnknownVersion: return wire::ErrorCode::UnknownVersion;
    case model::Fault::OverBudget: return wire::ErrorCode::OverBudget;
    case model::Fault::NoCheckpoint: return wire::ErrorCode::BadMessage;
    case model::Fault::OverQuota: return wire::ErrorCode::QuotaExceeded;
    case model::Fault::Internal: return wire::ErrorCode::Internal;
  }
  return wire::ErrorCode::Internal;
}

Bytes model_reply(std::uint64_t id, const model::Result& result) {
  auto& b = builder();
  return std::visit(
      Overload{
          [&](const model::Failure& f) { return copy(b.error(id, wire_code(f.fault), f.reason)); },
          [&](const model::BackboneInfo& i) {
            return copy(b.registered(id, i.name, static_cast<std::int32_t>(i.image_size),
                                     static_cast<std::int32_t>(i.max_views), static_cast<std::int32_t>(i.max_tokens),
                                     static_cast<std::int32_t>(i.dim)));
          },
          [&](const model::Stepped& s) { return copy(b.sft_step(id, s.loss, s.grad_norm, s.step)); },
          [&](const model::Predicted& p) { return copy(b.predict(id, p.actions, p.shape)); },
          [&](const model::Published& p) { return copy(b.published(id, p.version)); },
          [&](const model::Saved& s) { return copy(b.saved(id, s.step)); },
          [&](const model::Loaded& l) { return copy(b.loaded(id, l.step)); },
          [&](const model::SlotDigest& d) { return copy(b.slot_digest(id, d.parameters, d.optimizer, d.step, d.latest_version)); },
          [&](const model::FeaturesWritten& f) { return copy(b.features(id, f.samples, f.dim)); }},
      result);
}

}  // namespace nexus::daemon
