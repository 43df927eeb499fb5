#include "schema/tensor_ref.hpp"

#include <cstdint>
#include <string>

namespace nexus::schema {

std::size_t dtype_size(wire::DType dtype) {
  switch (dtype) {
    case wire::DType::UInt8: return 1;
    case wire::DType::Float16:
    case wire::DType::BFloat16: return 2;
    case wire::DType::Int32:
    case wire::DType::Float32: return 4;
    case wire::DType::Int64:
    case wire::DType::Float64: return 8;
  }
  return 0;
}

const char* dtype_name(wire::DType dtype) {
  return dtype_size(dtype) ? wire::EnumNameDType(dtype) : "invalid";
}

TensorCheck check_tensor_ref(const wire::TensorRef* ref, std::uint64_t arena_bytes) {
  auto fail = [](wire::ErrorCode code, std::string why) {
    TensorCheck c;
    c.code = code;
    c.reason = std::move(why);
    return c;
  };
  if (ref == nullptr) return fail(wire::ErrorCode::BadTensor, "tensor reference missing");
  const std::size_t elem = dtype_size(ref->dtype());
  if (elem == 0)
    return fail(wire::ErrorCode::BadTensor,
                "unknown dtype " + std::to_string(static_cast<int>(ref->dtype())));
  const auto* shape = ref->shape();
  if (shape == nullptr) return fail(wire::ErrorCode::BadTensor, "tensor shape missing");
  if (shape->size() > kMaxRank)
    return fail(wire::ErrorCode::BadTensor, "tensor rank " + std::to_string(shape->size()) +
                                                " exceeds " + std::to_string(kMaxRank));
  // The Verifier checks a vector's length prefix for 4-byte alignment only, so a crafted message
  // can place the int64 dimensions at an address that is 4 mod 8, and reading them is undefined
  // behaviour (UBSan halts on it in the fuzz build). A builder aligns them, and every message is
  // decoded from an 8-aligned copy, so only a forged message is refused here.
  if (reinterpret_cast<std::uintptr_t>(shape->Data()) % alignof(std::int64_t) != 0)
    return fail(wire::ErrorCode::BadTensor, "tensor shape is not 8-byte aligned in the message");
  std::uint64_t count = 1;
  for (std::int64_t d : *shape) {
    if (d < 0) return fail(wire::ErrorCode::BadTensor, "negative dimension " + std::to_string(d));
    if (d != 0 && count > UINT64_MAX / static_cast<std::uint64_t>(d))
      return fail(wire::ErrorCode::BadTensor, "element count overflows");
    count *= static_cast<std::uint64_t>(d);
  }
  if (count > UINT64_MAX / elem) return fail(wire::ErrorCode::BadTensor, "byte size overflows");
  if (count * elem != ref->bytes())
    return fail(wire::ErrorCode::TensorOutOfBounds,
                "bytes " + std::to_string(ref->bytes()) + " != shape x dtype size " +
                    std::to_string(count * elem));
  // Aligned to its element size (the arena is page aligned): the daemon reads elements in place
  // through typed pointers, and a misaligned one is undefined behaviour on some loads.
  if (ref->offset() % elem != 0)
    return fail(wire::ErrorCode::BadTensor, "tensor offset " + std::to_string(ref->offset()) +
                                                " is not a multiple of its element size " + std::to_string(elem));
  if (ref->offset() > arena_bytes || ref->bytes() > arena_bytes - ref->offset())
    return fail(wire::ErrorCode::TensorOutOfBounds,
                "tensor [" + std::to_string(ref->offset()) + ", +" + std::to_string(ref->bytes()) +
                    ") outside the client arena of " + std::to_string(arena_bytes) + " bytes");
  TensorCheck ok;
  ok.offset = ref->offset();
  ok.bytes = ref->bytes();
  return ok;
}

}  // namespace nexus::schema
