// Tensors in the client arena: allocated by Client::alloc(), written in place by the tenant,
// referenced (not copied) by requests. Freed when the last Tensor handle goes away. Tensors in a
// region (memory this process registered with nexusd; Region::tensor) are views at an offset.
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
  std::uint64_t offset() const { return offset_; }  // within the client arena, or its region
  std::uint32_t region() const { return region_; }  // 0: the client arena
  std::uint64_t bytes() const { return bytes_; }
  // The bytes, for this process to read and write; empty for a tensor in a CUDA region, whose
  // bytes are at device_address() on device().
  std::span<std::uint8_t> raw() const {
    return device_ < 0 ? std::span<std::uint8_t>{data_, bytes_} : std::span<std::uint8_t>{};
  }
  template <class T>
  std::span<T> as() const {
    if (device_ >= 0) return {};
    return {reinterpret_cast<T*>(data_), bytes_ / sizeof(T)};
  }
  int device() const { return device_; }  // -1: host memory (the arena or a host region)
  std::uint64_t device_address() const { return device_ < 0 ? 0 : reinterpret_cast<std::uintptr_t>(data_); }

 private:
  friend class Client;
  friend class Region;
  Tensor(std::shared_ptr<detail::ArenaAllocator> arena, std::uint8_t* data, std::uint64_t offset,
         std::uint64_t bytes, DType dtype, std::vector<std::int64_t> shape);
  std::shared_ptr<detail::ArenaAllocator> arena_;
  std::shared_ptr<void> region_memory_;  // region tensors: keeps the mapping
  std::uint32_t region_ = 0;
  std::uint8_t* data_ = nullptr;
  std::uint64_t offset_ = 0;
  std::uint64_t bytes_ = 0;
  DType dtype_ = DType::UInt8;
  std::vector<std::int64_t> shape_;
  int device_ = -1;
};

// Memory this process shares with nexusd beside the arena: a sealed memfd mapped here and in
// nexusd (Client::register_host_region), or CUDA device memory (Client::register_device_region).
// Requests may name tensors in a host region by offset, and nexusd may write features into it
// (Client::features). A handle: copies share the memory, which stays mapped here while any
// handle or tensor of it lives; nexusd lets go of it at Client::unregister_region or detach.
class Region {
 public:
  Region() = default;
  std::uint32_t id() const { return id_; }
  std::uint64_t bytes() const { return bytes_; }
  // The host bytes; empty for a device region, whose memory this process cannot read directly.
  std::span<std::uint8_t> raw() const {
    return device_ < 0 ? std::span<std::uint8_t>{memory_.get(), bytes_} : std::span<std::uint8_t>{};
  }
  // -1 for a host region; else the CUDA device (this process's numbering) the memory is on, at
  // device_address() (for torch::from_blob with that device, or DLPack).
  int device() const { return device_; }
  std::uint64_t device_address() const { return device_ < 0 ? 0 : reinterpret_cast<std::uintptr_t>(memory_.get()); }
  // A tensor at `offset` in this region. Throws BadTensor outside the region or misaligned
  // (nexusd checks again, against the size it registered).
  Tensor tensor(DType dtype, std::vector<std::int64_t> shape, std::uint64_t offset) const;

 private:
  friend class Client;
  std::uint32_t id_ = 0;
  std::uint64_t bytes_ = 0;
  std::shared_ptr<std::uint8_t> memory_;  // a device address for a device region
  int device_ = -1;
};

}  // namespace nexus
