#include "nexus/client.hpp"

#include "client_state.hpp"
#include "schema/tensor_ref.hpp"

namespace nexus {

static_assert(static_cast<int>(ErrorCode::LimitExceeded) == static_cast<int>(wire::ErrorCode::MAX),
              "nexus::ErrorCode mirrors nexus.fbs ErrorCode");
static_assert(static_cast<int>(DType::Float64) == static_cast<int>(wire::DType::Float64),
              "nexus::DType mirrors nexus.fbs DType");

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::ArenaFull: return "ArenaFull";
    case ErrorCode::ConnectFailed: return "ConnectFailed";
    default:
      if (static_cast<int>(code) <= static_cast<int>(wire::ErrorCode::MAX))
        return wire::EnumNameErrorCode(static_cast<wire::ErrorCode>(code));
      return "Unknown";
  }
}

std::size_t dtype_size(DType dtype) { return schema::dtype_size(static_cast<wire::DType>(dtype)); }

std::uint64_t fnv1a(std::span<const std::uint8_t> bytes) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::uint8_t b : bytes) h = (h ^ b) * 0x100000001b3ull;
  return h;
}

// ---- Tensor ----

Tensor::Tensor(std::shared_ptr<detail::ArenaAllocator> arena, std::uint8_t* data,
               std::uint64_t offset, std::uint64_t bytes, DType dtype,
               std::vector<std::int64_t> shape)
    : arena_(std::move(arena)), data_(data), offset_(offset), bytes_(bytes), dtype_(dtype),
      shape_(std::move(shape)) {}

Tensor::Tensor(Tensor&& o) noexcept { *this = std::move(o); }

Tensor& Tensor::operator=(Tensor&& o) noexcept {
  if (this != &o) {
    if (arena_) arena_->release(offset_);
    arena_ = std::move(o.arena_);
    region_memory_ = std::move(o.region_memory_);
    region_ = o.region_;
    data_ = o.data_;
    offset_ = o.offset_;
    bytes_ = o.bytes_;
    dtype_ = o.dtype_;
    shape_ = std::move(o.shape_);
    device_ = o.device_;
    o.data_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

Tensor::~Tensor() {
  if (arena_) arena_->release(offset_);
}

// ---- replies ----

const wire::Message* detail::reply_message(const std::vector<std::uint8_t>& bytes, wire::Body expected) {
  const auto* msg = wire::GetMessage(bytes.data());  // verified by the progress engine
  if (msg->body() == nullptr) throw Error(ErrorCode::BadMessage, "reply without a body");
  if (msg->body_type() == wire::Body::Error)
    throw detail::error_from_wire(msg->body_as_Error(), "request failed");
  if (msg->body_type() != expected)
    throw Error(ErrorCode::WrongMessageType, std::string("expected ") + wire::EnumNameBody(expected));
  return msg;
}

namespace {
using detail::reply_message;

template <class T>
T decode_reply(const std::vector<std::uint8_t>& bytes);

template <>
std::vector<std::uint8_t> decode_reply(const std::vector<std::uint8_t>& bytes) {
  const auto* payload = reply_message(bytes, wire::Body::PingReply)->body_as_PingReply()->payload();
  return payload ? std::vector<std::uint8_t>(payload->begin(), payload->end())
                 : std::vector<std::uint8_t>{};
}

template <>
DigestResult decode_reply(const std::vector<std::uint8_t>& bytes) {
  const auto* r = reply_message(bytes, wire::Body::DigestReply)->body_as_DigestReply();
  return DigestResult{r->fnv1a(), r->bytes()};
}

template <>
BackboneInfo decode_reply(const std::vector<std::uint8_t>& bytes) {
  const auto* r = reply_message(bytes, wire::Body::RegisterReply)->body_as_RegisterReply();
  return BackboneInfo{r->backbone() ? r->backbone()->str() : "", r->image_size(), r->max_views(), r->max_tokens(),
                      r->feature_dim()};
}

template <>
SftResult decode_reply(const std::vector<std::uint8_t>& bytes) {
  const auto* r = reply_message(bytes, wire::Body::SftStepReply)->body_as_SftStepReply();
  return SftResult{r->loss(), r->grad_norm(), r->step()};
}

template <>
Prediction decode_reply(const std::vector<std::uint8_t>& bytes) {
  const auto* r = reply_message(bytes, wire::Body::PredictReply)->body_as_PredictReply();
  Prediction p;
  if (r->actions()) p.actions.assign(r->actions()->begin(), r->actions()->end());
  if (r->shape()) p.shape.assign(r->shape()->begin(), r->shape()->end());
  return p;
}

template <>
SlotDigest decode_reply(const std::vector<std::uint8_t>& bytes) {
  const auto* r = reply_message(bytes, wire::Body::SlotDigestReply)->body_as_SlotDigestReply();
  return SlotDigest{r->parameters(), r->optimizer(), r->step(), r->latest_version()};
}

template <>
FeaturesResult decode_reply(const std::vector<std::uint8_t>& bytes) {
  const auto* r = reply_message(bytes, wire::Body::FeaturesReply)->body_as_FeaturesReply();
  return FeaturesResult{r->samples(), r->dim()};
}

// publish, save and load all answer with one number.
template <>
std::uint64_t decode_reply(const std::vector<std::uint8_t>& bytes) {
  const auto* m = wire::GetMessage(bytes.data());
  switch (m->body() ? m->body_type() : wire::Body::NONE) {
    case wire::Body::SaveReply: return m->body_as_SaveReply()->step();
    case wire::Body::LoadReply: return m->body_as_LoadReply()->step();
    default: return reply_message(bytes, wire::Body::PublishReply)->body_as_PublishReply()->version();
  }
}

}  // namespace

template <class T>
bool Future<T>::ready() const {
  return state_->reply_ready(id_);
}

template <class T>
T Future<T>::get(std::optional<std::chrono::milliseconds> timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout.value_or(state_->options.timeout);
  return decode_reply<T>(state_->wait_reply(id_, deadline));
}

template class Future<std::vector<std::uint8_t>>;
template class Future<DigestResult>;
template class Future<BackboneInfo>;
template class Future<SftResult>;
template class Future<Prediction>;
template class Future<std::uint64_t>;
template class Future<SlotDigest>;
template class Future<FeaturesResult>;

// ---- Client ----

Client::Client(std::unique_ptr<detail::ClientState> state) : state_(std::move(state)) {}
Client::~Client() = default;

std::unique_ptr<Client> Client::attach(const ClientOptions& options) {
  detail::AttachParams p;
  p.socket_path = options.socket_path;
  p.tenant = options.tenant;
  p.ring_bytes = options.ring_bytes;
  p.client_arena_bytes = options.client_arena_bytes;
  p.output_arena_bytes = options.output_arena_bytes;
  p.timeout = options.timeout;
  auto att = detail::attach_raw(p);
  return std::unique_ptr<Client>(
      new Client(std::make_unique<detail::ClientState>(options, std::move(att))));
}

std::uint64_t Client::session_id() const { return state_->attachment->session_id; }
const ClientOptions& Client::options() const { return state_->options; }

Tensor Client::alloc(DType dtype, std::vector<std::int64_t> shape) {
  const std::uint64_t elem = dtype_size(dtype);
  if (elem == 0) throw Error(ErrorCode::BadTensor, "unknown dtype");
  std::uint64_t count = 1;
  for (auto d : shape) {
    if (d < 0) throw Error(ErrorCode::BadTensor, "negative dimension");
    if (d != 0 && count > UINT64_MAX / elem / static_cast<std::uint64_t>(d))
      throw Error(ErrorCode::BadTensor, "tensor size overflows");
    count *= static_cast<std::uint64_t>(d);
  }
  const std::uint64_t bytes = count * elem;
  auto offset = state_->arena->allocate(bytes);
  if (!offset)
    throw Error(ErrorCode::ArenaFull, "no room for " + std::to_string(bytes) + " bytes in the client arena (" +
                                          std::to_string(state_->arena->free_bytes()) + " free)");
  return Tensor(state_->arena, state_->arena->base() + *offset, *offset, bytes, dtype, std::move(shape));
}

Future<std::vector<std::uint8_t>> Client::ping_async(std::span<const std::uint8_t> payload) {
  const auto id = state_->submit(wire::Body::PingRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    return wire::CreatePingRequest(fbb, fbb.CreateVector(payload.data(), payload.size())).Union();
  });
  return {state_.get(), id};
}

std::vector<std::uint8_t> Client::ping(std::span<const std::uint8_t> payload) {
  return ping_async(payload).get();
}

Future<DigestResult> Client::digest_async(const Tensor& t) {
  const auto id = state_->submit(wire::Body::DigestRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    auto ref = wire::CreateTensorRef(fbb, t.offset(), t.bytes(), static_cast<wire::DType>(t.dtype()),
                                     fbb.CreateVector(t.shape()), t.region());
    return wire::CreateDigestRequest(fbb, ref).Union();
  });
  return {state_.get(), id};
}

DigestResult Client::digest(const Tensor& t) { return digest_async(t).get(); }

}  // namespace nexus
