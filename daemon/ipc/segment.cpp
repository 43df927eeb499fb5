#include "daemon/ipc/segment.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "schema/protocol.hpp"
#include "schema/ring.hpp"

namespace nexus::daemon {

std::unique_ptr<TenantSegment> TenantSegment::create(const schema::SegmentLayout& layout,
                                                     std::uint64_t session_id,
                                                     std::string* error) {
  auto fail = [&](const char* what) -> std::unique_ptr<TenantSegment> {
    *error = std::string(what) + ": " + std::strerror(errno);
    return nullptr;
  };
  const int fd = ::memfd_create("nexus-tenant", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0) return fail("memfd_create");
  if (::ftruncate(fd, static_cast<off_t>(layout.total_bytes)) != 0 ||
      ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
    auto r = fail("sizing segment");
    ::close(fd);
    return r;
  }
  void* p = ::mmap(nullptr, layout.total_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    auto r = fail("mmap segment");
    ::close(fd);
    return r;
  }
  auto* base = static_cast<std::uint8_t*>(p);
  schema::SegmentHeader h{};
  h.magic = schema::kSegmentMagic;
  h.layout_version = schema::kSegmentLayoutVersion;
  h.protocol_version = schema::kProtocolVersion;
  h.session_id = session_id;
  h.total_bytes = layout.total_bytes;
  h.ring_capacity = layout.ring_capacity;
  h.client_arena_bytes = layout.client_arena_bytes;
  h.output_arena_bytes = layout.output_arena_bytes;
  std::memcpy(base, &h, sizeof h);
  schema::init_ring(base + layout.request_ring_offset);
  schema::init_ring(base + layout.response_ring_offset);
  return std::unique_ptr<TenantSegment>(new TenantSegment(fd, base, layout));
}

void TenantSegment::close_fd() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

TenantSegment::~TenantSegment() {
  ::munmap(base_, layout_.total_bytes);
  close_fd();
}

}  // namespace nexus::daemon
