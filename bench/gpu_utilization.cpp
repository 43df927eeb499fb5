#include "gpu_utilization.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>

namespace nexus::bench {
namespace {

// NVML's C API, declared by hand (nvml.h's types: nvmlReturn_t is an enum, NVML_SUCCESS 0;
// nvmlUtilization_t two unsigned ints). Stable since NVML's v2 entry points (CUDA 5).
struct NvmlUtilization {
  unsigned int gpu, memory;
};
using InitFn = int (*)();
using ShutdownFn = int (*)();
using HandleFn = int (*)(unsigned int, void**);
using UtilizationFn = int (*)(void*, NvmlUtilization*);

template <class Fn>
Fn symbol(void* library, const char* name) {
  return reinterpret_cast<Fn>(::dlsym(library, name));
}

}  // namespace

GpuUtilization::GpuUtilization(unsigned index) {
  library_ = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!library_) {
    const char* e = ::dlerror();
    why_ = std::string("NVML not loaded: ") + (e ? e : "libnvidia-ml.so.1 not found");
    return;
  }
  auto init = symbol<InitFn>(library_, "nvmlInit_v2");
  auto handle = symbol<HandleFn>(library_, "nvmlDeviceGetHandleByIndex_v2");
  if (!init || !handle || !symbol<UtilizationFn>(library_, "nvmlDeviceGetUtilizationRates")) {
    why_ = "NVML lacks nvmlInit_v2 / nvmlDeviceGetHandleByIndex_v2 / nvmlDeviceGetUtilizationRates";
    return;
  }
  if (const int rc = init(); rc != 0) {
    why_ = "nvmlInit_v2 failed (" + std::to_string(rc) + ")";
    return;
  }
  if (const int rc = handle(index, &device_); rc != 0) {
    device_ = nullptr;
    why_ = "NVML has no device " + std::to_string(index) + " (" + std::to_string(rc) + ")";
  }
}

GpuUtilization::~GpuUtilization() {
  if (running_) stop();
  if (device_)
    if (auto shutdown = symbol<ShutdownFn>(library_, "nvmlShutdown")) shutdown();
  if (library_) ::dlclose(library_);
}

void GpuUtilization::start() {
  if (!available() || running_) return;
  samples_.clear();
  running_ = true;
  auto read = symbol<UtilizationFn>(library_, "nvmlDeviceGetUtilizationRates");
  sampler_ = std::thread([this, read] {
    while (running_) {
      NvmlUtilization u{};
      if (read(device_, &u) == 0) samples_.push_back(u.gpu);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
}

UtilizationFigure GpuUtilization::stop() {
  if (!running_) return {};
  running_ = false;
  sampler_.join();
  UtilizationFigure f;
  f.samples = samples_.size();
  if (samples_.empty()) return f;
  auto s = samples_;
  std::sort(s.begin(), s.end());
  f.median = s[s.size() / 2];
  f.max = s.back();
  return f;
}

}  // namespace nexus::bench
