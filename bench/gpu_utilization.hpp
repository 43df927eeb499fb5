// A GPU's utilization while a benchmark cell runs, read through NVML (libnvidia-ml.so.1,
// dlopen'ed: the bench links nothing of the driver's, and runs where there is none). NVML's
// "GPU utilization" is the share of its last sample period (1/6 s to 1 s, by device) during
// which one or more kernels ran on the device: what `nvidia-smi dmon` shows as "sm".
#pragma once
#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace nexus::bench {

struct UtilizationFigure {
  double median = 0, max = 0;  // percent, over the samples read
  std::size_t samples = 0;
};

class GpuUtilization {
 public:
  // Samples device `index` (NVML's numbering: the CUDA device of the same index where
  // CUDA_VISIBLE_DEVICES is unset) every 50 ms from start() to stop(). available() is false,
  // and why() says why, where NVML cannot be loaded or has no such device.
  explicit GpuUtilization(unsigned index);
  ~GpuUtilization();
  GpuUtilization(const GpuUtilization&) = delete;
  GpuUtilization& operator=(const GpuUtilization&) = delete;

  bool available() const { return device_ != nullptr; }
  const std::string& why() const { return why_; }
  void start();
  UtilizationFigure stop();

 private:
  void* library_ = nullptr;
  void* device_ = nullptr;
  std::string why_;
  std::atomic<bool> running_{false};
  std::thread sampler_;
  std::vector<double> samples_;  // the sampler's until stop() joins it
};

}  // namespace nexus::bench
