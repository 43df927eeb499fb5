// CUDA device memory that crosses the process boundary: how a device region travels from a
// tenant to nexusd (RegionKind CudaFd in nexus.fbs). The tenant allocates with the CUDA
// driver's virtual memory API (cuMemCreate, requesting a POSIX file descriptor handle), maps it
// for itself, and exports the allocation as a descriptor that goes over its control socket
// (SCM_RIGHTS) like a host region's memfd. nexusd imports the descriptor
// (cuMemImportFromShareableHandle), reserves an address range, maps the allocation into it
// (cuMemMap) and makes it read-write for the allocation's own device (cuMemSetAccess).
//
// Both sides share this code, so it lives below them. The driver is loaded at run time
// (dlopen "libcuda.so.1"), never linked: the same nexusd and libnexus run on machines without
// an NVIDIA driver, where every call here fails cleanly with no_driver set (tested on the CPU
// machines; the success path runs where a GPU is: scripts/gpu-check.sh). Legacy
// cudaIpcMemHandle bytes are not a descriptor and are never accepted.
//
// Lifetime: a mapping holds its allocation. The exporter's memory stays valid for nexusd until
// nexusd unmaps and releases its handle, whatever the tenant frees meanwhile (the driver
// refcounts the physical allocation), and a SIGKILLed tenant's descriptor dies with it while
// nexusd's import lives on until its holder goes.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <variant>

namespace nexus::cuda_vmm {

struct Failure {
  bool no_driver = false;  // this machine (or process) has no usable CUDA driver
  bool too_small = false;  // the allocation is smaller than the bytes it was registered with
  std::string reason;
};

// An allocation made here and exported: `fd` is the caller's to send, then close; the memory
// stays mapped read-write at `address` on `device` until the last copy of `holder` goes.
struct Exported {
  int fd = -1;
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;  // as asked, rounded up to the device's allocation granularity
  int device = 0;
  std::shared_ptr<void> holder;
};
std::variant<Exported, Failure> allocate_exportable(int device, std::uint64_t bytes);

// An exported allocation mapped into this process. Takes ownership of fd (closed here whatever
// happens: the imported handle keeps the allocation). The whole of `bytes` must lie inside the
// allocation (else too_small); the mapping is on the device the allocation lives on, as this
// process numbers its devices.
struct Imported {
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  int device = 0;
  std::shared_ptr<void> holder;  // unmaps, frees the range and releases the handle
};
std::variant<Imported, Failure> import_and_map(int fd, std::uint64_t bytes);

// Synchronous copies between host memory and device memory at `address` on `device` (for a
// tenant without a CUDA runtime of its own, and for tests). "" on success, else the reason.
std::string copy_to_host(int device, std::uint64_t address, void* dst, std::uint64_t bytes);
std::string copy_from_host(int device, std::uint64_t address, const void* src, std::uint64_t bytes);

// "" where the driver loads and initialises; else why not (dlerror or cuInit's error).
std::string driver_unavailable_reason();

}  // namespace nexus::cuda_vmm
