// Memory a tenant registered with nexusd (RegisterRegionRequest), so that its requests can name
// tensors in it by offset and features can be written into it. Registration, bounds, lifetime
// and the refusal of foreign or stale ids live here, once, for every kind of memory; what
// differs by kind is how a descriptor becomes memory nexusd can address: an importer. The host
// importer maps a sealed memfd. The CUDA importer maps an exported cuMemCreate allocation on its
// device (schema/cuda_vmm.hpp) and returns device addresses; everything else here is shared.
//
// One table per attachment: an id names memory only in the table of the tenant that registered
// it, so another tenant's id, or an id after unregister, resolves to nothing (UnknownRegion).
// Ids are never reused within an attachment. The memory stays mapped while the table holds it
// or any request in flight does (the holder), and goes when the last of them lets go: at
// unregister, at detach, or when a SIGKILLed tenant's session is torn down.
//
// Thread safety: every member may be called from any thread (the reactor registers and
// unregisters; the Master's threads resolve).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <variant>

#include "nexus/wire/nexus_generated.h"

namespace nexus::daemon {

// Addressable bytes an importer made of a descriptor; released when the last holder goes.
struct ImportedMemory {
  std::uint8_t* base = nullptr;  // on the host, or on CUDA device cuda_device
  std::uint64_t bytes = 0;
  std::shared_ptr<void> holder;
  int cuda_device = -1;  // -1: host memory
};

struct RegionRefusal {
  wire::ErrorCode code = wire::ErrorCode::None;
  std::string reason;
};

class RegionImporter {
 public:
  virtual ~RegionImporter() = default;
  // Takes ownership of fd (closed here, whatever happens).
  virtual std::variant<ImportedMemory, RegionRefusal> import(int fd, std::uint64_t bytes) = 0;
};

// A memfd the tenant sealed against shrinking (F_SEAL_SHRINK), at least `bytes` long, mapped
// shared and writable once. Without the seal a tenant could truncate the file under our mapping
// and turn our next read into SIGBUS; a plain file or a socket is refused too.
std::unique_ptr<RegionImporter> host_region_importer();
// A cuMemCreate allocation exported as a POSIX descriptor, mapped read-write on the device it
// lives on. Refused with WrongMessageType where this machine has no CUDA driver, BadMessage for a
// descriptor that is not such an allocation, TensorOutOfBounds when it is shorter than registered.
std::unique_ptr<RegionImporter> cuda_region_importer();

class RegionTable {
 public:
  static constexpr std::size_t kMaxRegions = 16;  // per attachment

  explicit RegionTable(std::uint64_t max_region_bytes) : max_region_bytes_(max_region_bytes) {}

  struct Registered {
    std::uint32_t id = 0;
    std::uint64_t bytes = 0;
  };
  // Takes ownership of fd.
  std::variant<Registered, RegionRefusal> add(RegionImporter& importer, int fd, std::uint64_t bytes);
  bool remove(std::uint32_t id);  // false: no such region here

  // The bytes `ref` names in region ref->region() (not 0: the arena is the segment's), checked
  // exactly like an arena reference but against the region's registered size.
  struct Resolved {
    std::uint8_t* data = nullptr;
    std::uint64_t bytes = 0;
    std::shared_ptr<void> holder;  // keeps the region mapped while the request uses it
    int cuda_device = -1;          // data is a device address there; -1: host memory
  };
  std::variant<Resolved, RegionRefusal> resolve(const wire::TensorRef* ref) const;

  std::size_t size() const;

 private:
  const std::uint64_t max_region_bytes_;
  mutable std::mutex mu_;
  std::map<std::uint32_t, ImportedMemory> regions_;  // GUARDED_BY(mu_)
  std::uint32_t next_id_ = 1;                        // GUARDED_BY(mu_)
};

}  // namespace nexus::daemon
