#include "daemon/ipc/regions.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "schema/cuda_vmm.hpp"
#include "schema/tensor_ref.hpp"

namespace nexus::daemon {
namespace {

class HostImporter final : public RegionImporter {
 public:
  std::variant<ImportedMemory, RegionRefusal> import(int fd, std::uint64_t bytes) override {
    struct Closer {
      int fd;
      ~Closer() { ::close(fd); }  // the mapping outlives the descriptor
    } closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
      return RegionRefusal{wire::ErrorCode::BadMessage, "a host region must be a memfd (memfd_create)"};
    const int seals = ::fcntl(fd, F_GET_SEALS);
    if (seals < 0)
      return RegionRefusal{wire::ErrorCode::BadMessage, "a host region must be a memfd made with MFD_ALLOW_SEALING"};
    if (!(seals & F_SEAL_SHRINK))
      return RegionRefusal{wire::ErrorCode::BadMessage,
                           "seal the memfd against shrinking first (fcntl F_ADD_SEALS, F_SEAL_SHRINK): "
                           "nexusd will not map memory that can be truncated under it"};
    if (static_cast<std::uint64_t>(st.st_size) < bytes)
      return RegionRefusal{wire::ErrorCode::TensorOutOfBounds,
                           "the memfd holds " + std::to_string(st.st_size) + " bytes, fewer than the " +
                               std::to_string(bytes) + " registered"};
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
      return RegionRefusal{wire::ErrorCode::Internal, std::string("mmap: ") + std::strerror(errno)};
    ImportedMemory m;
    m.base = static_cast<std::uint8_t*>(p);
    m.bytes = bytes;
    m.holder = std::shared_ptr<void>(p, [bytes](void* q) { ::munmap(q, bytes); });
    return m;
  }
};

class CudaImporter final : public RegionImporter {
 public:
  std::variant<ImportedMemory, RegionRefusal> import(int fd, std::uint64_t bytes) override {
    auto imported = cuda_vmm::import_and_map(fd, bytes);  // closes fd
    if (auto* f = std::get_if<cuda_vmm::Failure>(&imported)) {
      const auto code = f->no_driver   ? wire::ErrorCode::WrongMessageType
                        : f->too_small ? wire::ErrorCode::TensorOutOfBounds
                                       : wire::ErrorCode::BadMessage;
      return RegionRefusal{code, f->no_driver ? "this nexusd cannot import CUDA regions: " + f->reason +
                                                    "; register a host region"
                                              : "CUDA region: " + f->reason};
    }
    auto& m = std::get<cuda_vmm::Imported>(imported);
    ImportedMemory out;
    out.base = reinterpret_cast<std::uint8_t*>(static_cast<std::uintptr_t>(m.address));
    out.bytes = bytes;
    out.holder = std::move(m.holder);
    out.cuda_device = m.device;
    return out;
  }
};

}  // namespace

std::unique_ptr<RegionImporter> cuda_region_importer() { return std::make_unique<CudaImporter>(); }

std::unique_ptr<RegionImporter> host_region_importer() { return std::make_unique<HostImporter>(); }

std::variant<RegionTable::Registered, RegionRefusal> RegionTable::add(RegionImporter& importer, int fd,
                                                                     std::uint64_t bytes) {
  if (bytes == 0 || bytes > max_region_bytes_) {
    ::close(fd);
    return RegionRefusal{wire::ErrorCode::SegmentTooLarge, "a region is 1 to " + std::to_string(max_region_bytes_ >> 20) +
                                                               " MiB ([daemon] max_segment_mib)"};
  }
  {
    std::lock_guard lk(mu_);
    if (regions_.size() >= kMaxRegions) {
      ::close(fd);
      return RegionRefusal{wire::ErrorCode::QuotaExceeded,
                           "at most " + std::to_string(kMaxRegions) + " regions per attachment: unregister one first"};
    }
  }
  auto imported = importer.import(fd, bytes);  // outside the lock: mapping may take a while
  if (auto* refusal = std::get_if<RegionRefusal>(&imported)) return *refusal;
  std::lock_guard lk(mu_);
  if (regions_.size() >= kMaxRegions)  // another registration won the race
    return RegionRefusal{wire::ErrorCode::QuotaExceeded, "at most " + std::to_string(kMaxRegions) + " regions per attachment"};
  const std::uint32_t id = next_id_++;
  regions_.emplace(id, std::move(std::get<ImportedMemory>(imported)));
  return Registered{id, bytes};
}

bool RegionTable::remove(std::uint32_t id) {
  std::lock_guard lk(mu_);
  return regions_.erase(id) > 0;
}

std::variant<RegionTable::Resolved, RegionRefusal> RegionTable::resolve(const wire::TensorRef* ref) const {
  std::lock_guard lk(mu_);
  const auto it = regions_.find(ref->region());
  if (ref->region() == 0 || it == regions_.end())
    return RegionRefusal{wire::ErrorCode::UnknownRegion,
                         "region " + std::to_string(ref->region()) + " is not one this attachment registered"};
  const auto check = schema::check_tensor_ref(ref, it->second.bytes);
  if (!check) {
    std::string why = check.reason;
    if (const auto at = why.find("the client arena"); at != std::string::npos) why.replace(at, 16, "the region");
    return RegionRefusal{check.code, "region " + std::to_string(ref->region()) + ": " + why};
  }
  return Resolved{it->second.base + check.offset, check.bytes, it->second.holder, it->second.cuda_device};
}

std::size_t RegionTable::size() const {
  std::lock_guard lk(mu_);
  return regions_.size();
}

}  // namespace nexus::daemon
