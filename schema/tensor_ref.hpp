// Tensor references: how a message names bytes in an arena. check_tensor_ref() is the single
// place where a reference from a peer becomes trusted extents.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "nexus/wire/nexus_generated.h"

namespace nexus::schema {

// Bytes per element; 0 for a value outside the enum (a hostile peer can send any byte).
std::size_t dtype_size(wire::DType dtype);
const char* dtype_name(wire::DType dtype);

struct TensorCheck {
  wire::ErrorCode code = wire::ErrorCode::None;
  std::string reason;          // empty when code == None
  std::uint64_t offset = 0;    // valid when code == None: [offset, offset + bytes) in the arena
  std::uint64_t bytes = 0;
  explicit operator bool() const { return code == wire::ErrorCode::None; }
};

// Checks dtype, shape (non-negative, product without overflow, at most kMaxRank dims),
// bytes == product * dtype size, offset aligned to the element size, and that the extent lies
// inside [0, arena_bytes).
inline constexpr std::size_t kMaxRank = 8;
TensorCheck check_tensor_ref(const wire::TensorRef* ref, std::uint64_t arena_bytes);

}  // namespace nexus::schema
