// Regions (memory of the tenant's that nexusd maps too) and features mode (nexus/client.hpp).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "client_state.hpp"
#include "nexus/client.hpp"
#include "schema/control_frame.hpp"
#include "schema/cuda_vmm.hpp"

namespace nexus {

Tensor Region::tensor(DType dtype, std::vector<std::int64_t> shape, std::uint64_t offset) const {
  std::uint64_t count = 1;
  for (auto d : shape) {
    if (d < 0) throw Error(ErrorCode::BadTensor, "negative dimension");
    count *= static_cast<std::uint64_t>(d);
  }
  const std::uint64_t elem = dtype_size(dtype), bytes = count * elem;
  if (!memory_ || offset % elem != 0 || offset > bytes_ || bytes > bytes_ - offset)
    throw Error(ErrorCode::BadTensor, "a tensor of " + std::to_string(bytes) + " bytes at " + std::to_string(offset) +
                                          " does not fit region " + std::to_string(id_) + " (" + std::to_string(bytes_) +
                                          " bytes), or is misaligned");
  Tensor t(nullptr, memory_.get() + offset, offset, bytes, dtype, std::move(shape));
  t.region_memory_ = memory_;
  t.region_ = id_;
  t.device_ = device_;
  return t;
}

namespace {

// Hands nexusd a region's descriptor (first, over the control socket) and registers it; returns
// the id nexusd gave it. The caller closes fd.
std::uint32_t register_descriptor(detail::ClientState& state, wire::RegionKind kind, int fd, std::uint64_t bytes) {
  std::lock_guard lock(state.descriptor_mu);
  const std::uint8_t marker = 0;
  if (!schema::send_frame(state.attachment->socket, {&marker, 1}, {&fd, 1}))
    throw Error(ErrorCode::DaemonGone, "the control socket closed");
  const auto id = state.submit(wire::Body::RegisterRegionRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    return wire::CreateRegisterRegionRequest(fbb, kind, bytes).Union();
  });
  const auto reply = state.wait_reply(id, std::chrono::steady_clock::now() + state.options.timeout);
  return detail::reply_message(reply, wire::Body::RegisterRegionReply)->body_as_RegisterRegionReply()->region();
}

struct Closer {
  int fd;
  ~Closer() { ::close(fd); }
};

}  // namespace

Region Client::register_host_region(std::uint64_t bytes) {
  if (bytes == 0) throw Error(ErrorCode::BadTensor, "a region needs bytes > 0");
  const int fd = ::memfd_create("nexus-region", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) throw Error(ErrorCode::Internal, std::string("memfd_create: ") + std::strerror(errno));
  Closer closer{fd};
  // Sealed against shrinking: nexusd refuses memory that could be truncated under its mapping.
  if (::ftruncate(fd, static_cast<off_t>(bytes)) != 0 || ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK) != 0)
    throw Error(ErrorCode::Internal, std::string("sizing and sealing the region: ") + std::strerror(errno));
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw Error(ErrorCode::Internal, std::string("mmap: ") + std::strerror(errno));
  Region region;
  region.bytes_ = bytes;
  region.memory_ = std::shared_ptr<std::uint8_t>(static_cast<std::uint8_t*>(p),
                                                 [bytes](std::uint8_t* q) { ::munmap(q, bytes); });
  region.id_ = register_descriptor(*state_, wire::RegionKind::Host, fd, bytes);
  return region;
}

Region Client::register_device_region(std::uint64_t bytes, int device) {
  if (bytes == 0) throw Error(ErrorCode::BadTensor, "a region needs bytes > 0");
  auto made = cuda_vmm::allocate_exportable(device, bytes);
  if (auto* f = std::get_if<cuda_vmm::Failure>(&made))
    throw Error(f->no_driver ? ErrorCode::WrongMessageType : ErrorCode::Internal,
                "this process cannot make a CUDA region: " + f->reason);
  auto& m = std::get<cuda_vmm::Exported>(made);
  Closer closer{m.fd};  // nexusd gets its own copy of the descriptor over the socket
  Region region;
  region.bytes_ = m.bytes;
  region.device_ = m.device;
  // The allocation's holder keeps it mapped here; the pointer is the device address.
  auto* address = reinterpret_cast<std::uint8_t*>(static_cast<std::uintptr_t>(m.address));
  region.memory_ = std::shared_ptr<std::uint8_t>(m.holder, address);
  region.id_ = register_descriptor(*state_, wire::RegionKind::CudaFd, m.fd, m.bytes);
  return region;
}

void Client::unregister_region(const Region& region) {
  const auto id = state_->submit(wire::Body::UnregisterRegionRequest, [&](flatbuffers::FlatBufferBuilder& fbb) {
    return wire::CreateUnregisterRegionRequest(fbb, region.id()).Union();
  });
  detail::reply_message(state_->wait_reply(id, std::chrono::steady_clock::now() + state_->options.timeout),
                        wire::Body::UnregisterRegionReply);
}

}  // namespace nexus
