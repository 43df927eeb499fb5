#include "schema/cuda_vmm.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>

#ifdef NEXUS_HAVE_CUDA_H
#include <cuda.h>
#endif

namespace nexus::cuda_vmm {
namespace {

// The few driver types and constants used here, declared by hand so that this compiles where
// no CUDA toolkit is installed (the driver is loaded at run time anyway). They are the driver's
// stable C ABI; where cuda.h is found at build time the static_asserts below hold them to it.
using Result = int;  // CUresult; 0 is CUDA_SUCCESS
using DevicePtr = unsigned long long;
using Handle = unsigned long long;  // CUmemGenericAllocationHandle
struct Location {
  int type;
  int id;
};
struct AllocationProp {
  int type;
  int requested_handle_types;
  Location location;
  void* win32_metadata;
  struct {
    unsigned char compression_type;
    unsigned char gpu_direct_rdma_capable;
    unsigned short usage;
    unsigned char reserved[4];
  } alloc_flags;
};
struct AccessDesc {
  Location location;
  int flags;
};
constexpr Result kSuccess = 0, kInvalidValue = 1;
constexpr std::uint64_t kMaxBytes = std::uint64_t{1} << 40;  // so rounding up cannot wrap
constexpr int kAllocationPinned = 1, kHandlePosixFd = 1, kLocationDevice = 1, kAccessReadWrite = 3,
              kGranularityMinimum = 0;

#ifdef NEXUS_HAVE_CUDA_H
static_assert(sizeof(AllocationProp) == sizeof(CUmemAllocationProp));
static_assert(offsetof(AllocationProp, location) == offsetof(CUmemAllocationProp, location));
static_assert(offsetof(AllocationProp, alloc_flags) == offsetof(CUmemAllocationProp, allocFlags));
static_assert(sizeof(AccessDesc) == sizeof(CUmemAccessDesc) && offsetof(AccessDesc, flags) == offsetof(CUmemAccessDesc, flags));
static_assert(sizeof(Handle) == sizeof(CUmemGenericAllocationHandle) && sizeof(DevicePtr) == sizeof(CUdeviceptr));
static_assert(kSuccess == CUDA_SUCCESS && kInvalidValue == CUDA_ERROR_INVALID_VALUE);
static_assert(kAllocationPinned == CU_MEM_ALLOCATION_TYPE_PINNED && kHandlePosixFd == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
static_assert(kLocationDevice == CU_MEM_LOCATION_TYPE_DEVICE && kAccessReadWrite == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
static_assert(kGranularityMinimum == CU_MEM_ALLOC_GRANULARITY_MINIMUM);
#endif

struct Driver {
  std::string unavailable;  // empty: loaded and initialised
  Result (*get_error_string)(Result, const char**) = nullptr;
  Result (*device_get)(int*, int) = nullptr;
  Result (*primary_ctx_retain)(void**, int) = nullptr;
  Result (*primary_ctx_release)(int) = nullptr;
  Result (*ctx_push)(void*) = nullptr;
  Result (*ctx_pop)(void**) = nullptr;
  Result (*mem_create)(Handle*, std::size_t, const AllocationProp*, unsigned long long) = nullptr;
  Result (*mem_release)(Handle) = nullptr;
  Result (*address_reserve)(DevicePtr*, std::size_t, std::size_t, DevicePtr, unsigned long long) = nullptr;
  Result (*address_free)(DevicePtr, std::size_t) = nullptr;
  Result (*mem_map)(DevicePtr, std::size_t, std::size_t, Handle, unsigned long long) = nullptr;
  Result (*mem_unmap)(DevicePtr, std::size_t) = nullptr;
  Result (*set_access)(DevicePtr, std::size_t, const AccessDesc*, std::size_t) = nullptr;
  Result (*export_handle)(void*, Handle, int, unsigned long long) = nullptr;
  Result (*import_handle)(Handle*, void*, int) = nullptr;
  Result (*granularity)(std::size_t*, const AllocationProp*, int) = nullptr;
  Result (*properties)(AllocationProp*, Handle) = nullptr;
  Result (*copy_dtoh)(void*, DevicePtr, std::size_t) = nullptr;
  Result (*copy_htod)(DevicePtr, const void*, std::size_t) = nullptr;

  std::string error(const char* call, Result r) const {
    const char* text = nullptr;
    if (get_error_string == nullptr || get_error_string(r, &text) != kSuccess || text == nullptr) text = "unknown error";
    return std::string(call) + ": " + text + " (" + std::to_string(r) + ")";
  }
};

template <typename F>
bool bind(void* lib, const char* name, F& slot, std::string& missing) {
  slot = reinterpret_cast<F>(::dlsym(lib, name));
  if (slot == nullptr) missing = std::string("the CUDA driver has no ") + name + " (too old for the virtual memory API)";
  return slot != nullptr;
}

Driver load() {
  Driver d;
  // Never closed: the driver stays loaded for the process, as the CUDA runtime keeps it.
  void* lib = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* why = ::dlerror();
    d.unavailable = std::string("no NVIDIA driver here (") + (why ? why : "libcuda.so.1 not found") + ")";
    return d;
  }
  Result (*init)(unsigned) = nullptr;
  std::string missing;
  const bool all = bind(lib, "cuInit", init, missing) && bind(lib, "cuGetErrorString", d.get_error_string, missing) &&
                   bind(lib, "cuDeviceGet", d.device_get, missing) &&
                   bind(lib, "cuDevicePrimaryCtxRetain", d.primary_ctx_retain, missing) &&
                   bind(lib, "cuDevicePrimaryCtxRelease_v2", d.primary_ctx_release, missing) &&
                   bind(lib, "cuCtxPushCurrent_v2", d.ctx_push, missing) && bind(lib, "cuCtxPopCurrent_v2", d.ctx_pop, missing) &&
                   bind(lib, "cuMemCreate", d.mem_create, missing) && bind(lib, "cuMemRelease", d.mem_release, missing) &&
                   bind(lib, "cuMemAddressReserve", d.address_reserve, missing) &&
                   bind(lib, "cuMemAddressFree", d.address_free, missing) && bind(lib, "cuMemMap", d.mem_map, missing) &&
                   bind(lib, "cuMemUnmap", d.mem_unmap, missing) && bind(lib, "cuMemSetAccess", d.set_access, missing) &&
                   bind(lib, "cuMemExportToShareableHandle", d.export_handle, missing) &&
                   bind(lib, "cuMemImportFromShareableHandle", d.import_handle, missing) &&
                   bind(lib, "cuMemGetAllocationGranularity", d.granularity, missing) &&
                   bind(lib, "cuMemGetAllocationPropertiesFromHandle", d.properties, missing) &&
                   bind(lib, "cuMemcpyDtoH_v2", d.copy_dtoh, missing) && bind(lib, "cuMemcpyHtoD_v2", d.copy_htod, missing);
  if (!all) {
    d.unavailable = missing;
    return d;
  }
  if (const Result r = init(0); r != kSuccess) d.unavailable = "the NVIDIA driver does not initialise: " + d.error("cuInit", r);
  return d;
}

const Driver& driver() {
  // Never destroyed: a region's holder may be released during exit, after static destructors.
  static const Driver& d = *new Driver(load());
  return d;
}

// The device's primary context (the one LibTorch and the CUDA runtime use), retained once per
// device for the rest of the process (as the runtime does: releasing the last reference resets
// the context, and a tenant without a runtime of its own would create and destroy one per call)
// and current on this thread while a PrimaryContext lives.
class PrimaryContext {
 public:
  PrimaryContext(const Driver& d, int ordinal, std::string& why) : d_(d) {
    void* ctx = retained(d, ordinal, why);
    if (ctx == nullptr) return;
    if (Result r = d.ctx_push(ctx); r != kSuccess) {
      why = d.error("cuCtxPushCurrent", r);
      return;
    }
    pushed_ = true;
  }
  ~PrimaryContext() {
    if (!pushed_) return;
    void* popped = nullptr;
    d_.ctx_pop(&popped);
  }
  PrimaryContext(const PrimaryContext&) = delete;
  PrimaryContext& operator=(const PrimaryContext&) = delete;
  bool ok() const { return pushed_; }

 private:
  static void* retained(const Driver& d, int ordinal, std::string& why) {
    static std::mutex mu;
    static std::map<int, void*> contexts;  // guarded by mu
    std::lock_guard lock(mu);
    if (auto it = contexts.find(ordinal); it != contexts.end()) return it->second;
    int device = 0;
    if (Result r = d.device_get(&device, ordinal); r != kSuccess) {
      why = "CUDA device " + std::to_string(ordinal) + ": " + d.error("cuDeviceGet", r);
      return nullptr;
    }
    void* ctx = nullptr;
    if (Result r = d.primary_ctx_retain(&ctx, device); r != kSuccess) {
      why = d.error("cuDevicePrimaryCtxRetain", r);
      return nullptr;
    }
    contexts.emplace(ordinal, ctx);
    return ctx;
  }
  const Driver& d_;
  bool pushed_ = false;
};

std::uint64_t round_up(std::uint64_t bytes, std::uint64_t granularity) {
  return granularity == 0 ? bytes : (bytes + granularity - 1) / granularity * granularity;
}

// A reserved, mapped, accessible range and the handle it maps; undone in reverse order.
struct Mapping {
  int ordinal = 0;
  DevicePtr address = 0;
  std::uint64_t bytes = 0;
  Handle handle = 0;
  bool reserved = false, mapped = false, have_handle = false;

  void undo(const Driver& d) {
    std::string ignored;
    PrimaryContext ctx(d, ordinal, ignored);  // the calls need a current context
    if (mapped) d.mem_unmap(address, bytes);
    if (reserved) d.address_free(address, bytes);
    if (have_handle) d.mem_release(handle);
    mapped = reserved = have_handle = false;
  }
};

// Reserves a range for `m.handle` of m.bytes, maps it and makes it read-write for m.ordinal.
// `map_result` is cuMemMap's (kSuccess where it was not reached).
std::string map_and_open(const Driver& d, Mapping& m, Result* map_result = nullptr) {
  if (Result r = d.address_reserve(&m.address, m.bytes, 0, 0, 0); r != kSuccess) return d.error("cuMemAddressReserve", r);
  m.reserved = true;
  if (Result r = d.mem_map(m.address, m.bytes, 0, m.handle, 0); r != kSuccess) {
    if (map_result) *map_result = r;
    return d.error("cuMemMap", r);
  }
  m.mapped = true;
  AccessDesc access{{kLocationDevice, m.ordinal}, kAccessReadWrite};
  if (Result r = d.set_access(m.address, m.bytes, &access, 1); r != kSuccess) return d.error("cuMemSetAccess", r);
  return "";
}

std::shared_ptr<void> holder_of(const Driver& d, const Mapping& m) {
  return std::shared_ptr<void>(reinterpret_cast<void*>(static_cast<std::uintptr_t>(m.address)),
                               [&d, m](void*) {
                                 Mapping undone = m;
                                 undone.undo(d);
                               });
}

}  // namespace

std::string driver_unavailable_reason() { return driver().unavailable; }

namespace {

// Runs `call` (a driver call returning a Result) with `device`'s primary context current.
template <class Call>
std::string in_context(int device, const char* name, Call call) {
  const Driver& d = driver();
  if (!d.unavailable.empty()) return d.unavailable;
  std::string why;
  PrimaryContext ctx(d, device, why);
  if (!ctx.ok()) return why;
  const Result r = call(d);
  return r == kSuccess ? "" : d.error(name, r);
}

}  // namespace

std::string copy_to_host(int device, std::uint64_t address, void* dst, std::uint64_t bytes) {
  return in_context(device, "cuMemcpyDtoH", [&](const Driver& d) { return d.copy_dtoh(dst, address, bytes); });
}

std::string copy_from_host(int device, std::uint64_t address, const void* src, std::uint64_t bytes) {
  return in_context(device, "cuMemcpyHtoD", [&](const Driver& d) { return d.copy_htod(address, src, bytes); });
}

std::variant<Exported, Failure> allocate_exportable(int device, std::uint64_t bytes) {
  const Driver& d = driver();
  if (!d.unavailable.empty()) return Failure{true, false, d.unavailable};
  if (bytes == 0 || bytes > kMaxBytes) return Failure{false, false, "a CUDA region is 1 byte to 1 TiB"};
  std::string why;
  PrimaryContext ctx(d, device, why);
  if (!ctx.ok()) return Failure{false, false, why};
  AllocationProp prop{};
  prop.type = kAllocationPinned;
  prop.requested_handle_types = kHandlePosixFd;
  prop.location = {kLocationDevice, device};
  std::size_t granularity = 0;
  if (Result r = d.granularity(&granularity, &prop, kGranularityMinimum); r != kSuccess)
    return Failure{false, false, d.error("cuMemGetAllocationGranularity", r)};
  Mapping m;
  m.ordinal = device;
  m.bytes = round_up(bytes, granularity);
  if (Result r = d.mem_create(&m.handle, m.bytes, &prop, 0); r != kSuccess)
    return Failure{false, false, d.error("cuMemCreate", r)};
  m.have_handle = true;
  auto fail = [&](std::string reason) {
    m.undo(d);
    return Failure{false, false, std::move(reason)};
  };
  if (auto e = map_and_open(d, m); !e.empty()) return fail(e);
  int fd = -1;
  if (Result r = d.export_handle(&fd, m.handle, kHandlePosixFd, 0); r != kSuccess)
    return fail(d.error("cuMemExportToShareableHandle", r));
  return Exported{fd, m.address, m.bytes, device, holder_of(d, m)};
}

std::variant<Imported, Failure> import_and_map(int fd, std::uint64_t bytes) {
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }  // the imported handle holds the allocation, not the descriptor
  } closer{fd};
  const Driver& d = driver();
  if (!d.unavailable.empty()) return Failure{true, false, d.unavailable};
  if (bytes == 0 || bytes > kMaxBytes) return Failure{false, true, "a CUDA region is 1 byte to 1 TiB"};
  Mapping m;
  {
    std::string why;
    PrimaryContext first(d, 0, why);  // a context to import in; the allocation's device follows
    if (!first.ok()) return Failure{false, false, why};
    if (Result r = d.import_handle(&m.handle, reinterpret_cast<void*>(static_cast<std::intptr_t>(fd)), kHandlePosixFd);
        r != kSuccess)
      return Failure{false, false, "cannot import the descriptor: not a cuMemCreate allocation exported as a POSIX "
                                   "fd, or one on a GPU nexusd does not see (" +
                                       d.error("cuMemImportFromShareableHandle", r) + ")"};
    m.have_handle = true;
    AllocationProp prop{};
    std::size_t granularity = 0;
    std::string failed;
    if (Result r = d.properties(&prop, m.handle); r != kSuccess)
      failed = d.error("cuMemGetAllocationPropertiesFromHandle", r);
    else if (prop.location.type != kLocationDevice)
      failed = "the allocation is not device memory";
    else if (Result g = d.granularity(&granularity, &prop, kGranularityMinimum); g != kSuccess)
      failed = d.error("cuMemGetAllocationGranularity", g);
    if (!failed.empty()) {
      m.undo(d);
      return Failure{false, false, "an allocation nexusd cannot map: " + failed};
    }
    m.ordinal = prop.location.id;
    m.bytes = round_up(bytes, granularity);
  }
  std::string why;
  PrimaryContext ctx(d, m.ordinal, why);
  if (!ctx.ok()) {
    m.undo(d);
    return Failure{false, false, why};
  }
  Result map_result = kSuccess;
  if (auto e = map_and_open(d, m, &map_result); !e.empty()) {
    const bool small = map_result == kInvalidValue;  // cuMemMap's answer to a size past the allocation's end
    m.undo(d);
    return Failure{false, small, small ? "the CUDA allocation is smaller than the " + std::to_string(bytes) +
                                             " bytes registered (" + e + ")"
                                       : e};
  }
  return Imported{m.address, bytes, m.ordinal, holder_of(d, m)};
}

}  // namespace nexus::cuda_vmm
