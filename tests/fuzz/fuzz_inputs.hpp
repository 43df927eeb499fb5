// What the fuzz targets share: the limits the daemon decodes a tenant's message with, the
// checks that must hold on whatever decode_request accepts (a violation traps: a finding), a
// valid request to mutate from, and a ring drained to its end. Header-only; fuzz builds only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "daemon/ipc/decode/request_decoder.hpp"
#include "schema/protocol.hpp"
#include "schema/ring.hpp"

namespace nexus::fuzz {


inline daemon::RequestLimits limits() {
  daemon::RequestLimits l;
  l.client_arena_bytes = 1 << 20;
  l.max_reply_payload = 2000;
  return l;
}

inline void decode(const std::uint8_t* data, std::size_t size) {
  auto r = daemon::decode_request({data, size}, limits());
  if (auto* ok = std::get_if<daemon::DecodedRequest>(&r)) {
    if (ok->type == wire::Body::SftStepRequest) {  // what the model service reads next
      const auto* obs = ok->message->body_as_SftStepRequest()->obs();
      // Arena references (region 0) must lie in the arena once decoded; a reference into a
      // registered region is checked against that region where the request is routed
      // (request_decoder.cpp), so its offset may be anything here.
      for (const auto* t : {obs->images(), obs->tokens(), obs->token_mask(), obs->state()})
        if (t && t->region() == 0 &&
            (t->offset() > limits().client_arena_bytes || t->bytes() > limits().client_arena_bytes - t->offset()))
          __builtin_trap();
    }
    if (ok->type == wire::Body::DigestRequest &&
        (ok->input.offset > limits().client_arena_bytes ||
         ok->input.bytes > limits().client_arena_bytes - ok->input.offset))
      __builtin_trap();  // a reference outside the arena got through
  }
}

inline std::vector<std::uint8_t> valid_request(std::uint8_t which) {
  flatbuffers::FlatBufferBuilder fbb;
  flatbuffers::Offset<void> body;
  wire::Body type;
  auto ref = [&](std::uint64_t offset, wire::DType dtype, std::vector<std::int64_t> shape, std::uint64_t bytes) {
    return wire::CreateTensorRef(fbb, offset, bytes, dtype, fbb.CreateVector(shape));
  };
  if (which % 3 == 0) {
    body = wire::CreatePingRequest(fbb, fbb.CreateVector(std::vector<std::uint8_t>(16, 1))).Union();
    type = wire::Body::PingRequest;
  } else if (which % 3 == 2) {
    auto obs = wire::CreateObservation(fbb, ref(0, wire::DType::UInt8, {1, 1, 8, 8, 3}, 192),
                                       ref(256, wire::DType::Int32, {1, 4}, 16), ref(512, wire::DType::UInt8, {1, 4}, 4),
                                       ref(1024, wire::DType::Float32, {1, 3}, 12));
    body = wire::CreateSftStepRequest(fbb, obs, ref(2048, wire::DType::Float32, {1, 2, 2}, 16)).Union();
    type = wire::Body::SftStepRequest;
  } else {
    auto ref = wire::CreateTensorRef(fbb, 4096, 24, wire::DType::Float32,
                                     fbb.CreateVector(std::vector<std::int64_t>{2, 3}));
    body = wire::CreateDigestRequest(fbb, ref).Union();
    type = wire::Body::DigestRequest;
  }
  fbb.Finish(wire::CreateMessage(fbb, schema::kProtocolVersion, 7, type, body));
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}


// A whole request ring from the input (8-byte tail index, then its bytes), drained to the end
// with RingReader, every record decoded: what the reactor does with a tenant's ring.
inline void drain_ring(const std::uint8_t* data, std::size_t size) {
  constexpr std::uint64_t kCap = 4096;
  alignas(64) static std::uint8_t region[sizeof(schema::RingControl) + kCap];
  std::memset(region, 0, sizeof region);
  schema::init_ring(region);
  std::uint64_t tail = 0;
  if (size >= 8) std::memcpy(&tail, data, 8);
  const std::size_t body = size >= 8 ? std::min<std::size_t>(size - 8, kCap) : 0;
  if (body > 0) std::memcpy(region + sizeof(schema::RingControl), data + 8, body);
  static_cast<schema::RingControl*>(static_cast<void*>(region))->tail.store(tail % (2 * kCap));
  schema::RingReader reader(region, kCap);
  std::vector<std::uint8_t> out;
  for (int i = 0; i < 1000; ++i) {
    const auto st = reader.try_pop(out, kCap / 2);
    if (st == schema::PopStatus::Empty) break;
    if (st == schema::PopStatus::Ok) decode(out.data(), out.size());
  }
}

// One control-socket frame's bytes, as the reactor decodes them before an attach.
inline void control_frame(const std::uint8_t* data, std::size_t size) {
  std::vector<std::uint8_t> copy(data, data + size);  // exact-size buffer for ASan
  auto r = daemon::decode_control(copy);
  if (auto* ok = std::get_if<daemon::ControlRequest>(&r)) {
    if (ok->type == wire::ControlBody::AttachRequest) {
      const auto* a = ok->message->body_as_AttachRequest();
      if (a->tenant()) (void)a->tenant()->str();  // what attach() reads
    }
  }
}

}  // namespace nexus::fuzz
