// Tensors in the client arena: allocated by Client::alloc(), written in place by the tenant,
// referenced (not copied) by requests. Freed when the last Tensor handle goes away.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace nexus {

enum class DType : std::uint8_t { UInt8 = 0, Int32, Int64, Float16, BFloat16, Float32, Float64 };
std::size_t dtype_size(DType dtype);

namespace detail {
class ArenaAllocator;
}

// Move-only handle. Must not outlive the Client that allocated it (the arena is unmapped at
// detach). Not synchronized: one thread writes a tensor at a time.
class Tensor {
 public:
  Tensor() = default;
  Tensor(Tensor&&) noexcept;
  Tensor& operator=(Tensor&&) noexcept;
  ~Tensor();

  DType dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::uint64_t offset() const { return offset_; }  // within the client arena
  std::uint64_t bytes() const { return bytes_; }
  std::span<std::uint8_t> raw() const { return {data_, bytes_}; }
  template <class T>
  std::span<T> as() const {
    return {reinterpret_cast<T*>(data_), bytes_ / sizeof(T)};
  }

 private:
  friend class Client;
  Tensor(std::shared_ptr<detail::ArenaAllocator> arena, std::uint8_t* data, std::uint64_t offset,
         std::uint64_t bytes, DType dtype, std::vector<std::int64_t> shape);
  std::shared_ptr<detail::ArenaAllocator> arena_;
  std::uint8_t* data_ = nullptr;
  std::uint64_t offset_ = 0;
  std::uint64_t bytes_ = 0;
  DType dtype_ = DType::UInt8;
  std::vector<std::int64_t> shape_;
};

}  // namespace nexus
