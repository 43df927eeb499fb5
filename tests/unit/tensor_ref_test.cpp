#include <catch2/catch.hpp>

#include <cstring>

#include "schema/tensor_ref.hpp"

using namespace nexus;

namespace {

schema::TensorCheck check(std::uint64_t offset, std::uint64_t bytes, wire::DType dtype,
                          std::vector<std::int64_t> shape, std::uint64_t arena) {
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateTensorRef(fbb, offset, bytes, dtype, fbb.CreateVector(shape)));
  return schema::check_tensor_ref(flatbuffers::GetRoot<wire::TensorRef>(fbb.GetBufferPointer()), arena);
}

}  // namespace

TEST_CASE("tensor references inside the arena pass", "[tensor]") {
  auto c = check(64, 4 * 3 * 5, wire::DType::Float32, {3, 5}, 1024);
  REQUIRE(c);
  CHECK(c.offset == 64);
  CHECK(c.bytes == 60);
  CHECK(check(1024 - 8, 8, wire::DType::Int64, {1}, 1024));
  CHECK(check(0, 0, wire::DType::UInt8, {0, 7}, 0));
}

TEST_CASE("forged tensor references are refused with a reason", "[tensor][hostile]") {
  CHECK(check(1016, 16, wire::DType::Int64, {2}, 1024).code == wire::ErrorCode::TensorOutOfBounds);
  CHECK(check(UINT64_MAX - 7, 8, wire::DType::Int64, {1}, 1024).code == wire::ErrorCode::TensorOutOfBounds);
  CHECK(check(0, 16, wire::DType::Float32, {3}, 1024).code == wire::ErrorCode::TensorOutOfBounds);
  CHECK(check(0, 4, wire::DType::Float32, {-1}, 1024).code == wire::ErrorCode::BadTensor);
  CHECK(check(0, 0, static_cast<wire::DType>(200), {1}, 1024).code == wire::ErrorCode::BadTensor);
  CHECK(check(0, 0, wire::DType::UInt8, {1ll << 40, 1ll << 40}, 1024).code == wire::ErrorCode::BadTensor);
  CHECK(check(0, 1, wire::DType::UInt8, {1, 1, 1, 1, 1, 1, 1, 1, 1}, 1024).code == wire::ErrorCode::BadTensor);
  const auto c = check(1016, 16, wire::DType::Int64, {2}, 1024);
  CHECK_THAT(c.reason, Catch::Contains("outside the client arena"));
  // Misaligned for its element type: refused before anything reads it in place.
  const auto m = check(2, 4, wire::DType::Float32, {1}, 1024);
  CHECK(m.code == wire::ErrorCode::BadTensor);
  CHECK_THAT(m.reason, Catch::Contains("not a multiple of its element size"));
}

TEST_CASE("a shape whose int64 dimensions sit misaligned in the message is refused, not read", "[tensor][hostile]") {
  // The Verifier checks vectors for 4-byte alignment only: the same valid message placed at an
  // address that is 4 mod 8 verifies, yet its dimensions cannot be read as int64 (found by the
  // fuzzer, which UBSan halts on).
  flatbuffers::FlatBufferBuilder fbb;
  fbb.Finish(wire::CreateTensorRef(fbb, 0, 24, wire::DType::Float32, fbb.CreateVector(std::vector<std::int64_t>{2, 3})));
  alignas(16) std::uint8_t storage[512];
  REQUIRE(fbb.GetSize() + 4 <= sizeof storage);
  std::memcpy(storage + 4, fbb.GetBufferPointer(), fbb.GetSize());
  flatbuffers::Verifier verifier(storage + 4, fbb.GetSize());
  REQUIRE(verifier.VerifyBuffer<wire::TensorRef>(nullptr));
  const auto c = schema::check_tensor_ref(flatbuffers::GetRoot<wire::TensorRef>(storage + 4), 1024);
  CHECK(c.code == wire::ErrorCode::BadTensor);
  CHECK_THAT(c.reason, Catch::Contains("not 8-byte aligned"));
  // The same bytes at an aligned address pass.
  std::memcpy(storage, fbb.GetBufferPointer(), fbb.GetSize());
  CHECK(schema::check_tensor_ref(flatbuffers::GetRoot<wire::TensorRef>(storage), 1024));
}
