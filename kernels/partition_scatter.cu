// CUDA partition scatter: one thread per float of the group's features, grid-stride; each row
// goes to the target that holds it (rows no target holds are skipped). Bitwise a copy, like
// partition_scatter_cpu.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>

#include "kernels/partition_scatter.hpp"

namespace nexus::kernels {
namespace {

struct ScatterParams {  // travels in the kernel's parameter block (about 1.5 KiB)
  float* dst[kMaxScatterTargets];
  std::int64_t first_row[kMaxScatterTargets];
  std::int64_t rows[kMaxScatterTargets];
  int count;
};

__global__ void partition_scatter_kernel(ScatterParams prm, const float* features, std::int64_t row_floats,
                                         std::int64_t total) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x) {
    const std::int64_t row = i / row_floats, col = i % row_floats;
    for (int k = 0; k < prm.count; ++k) {
      const std::int64_t local = row - prm.first_row[k];
      if (local >= 0 && local < prm.rows[k]) {
        prm.dst[k][local * row_floats + col] = features[i];
        break;
      }
    }
  }
}

}  // namespace

int partition_scatter_cuda(const float* features, std::int64_t total_rows, std::int64_t row_floats,
                           const ScatterTarget* targets, std::size_t count, void* stream) {
  if (count > static_cast<std::size_t>(kMaxScatterTargets))
    throw std::invalid_argument("partition_scatter_cuda: more than kMaxScatterTargets targets");
  check_scatter_targets(total_rows, targets, count);
  ScatterParams prm{};
  prm.count = static_cast<int>(count);
  for (std::size_t k = 0; k < count; ++k) {
    prm.dst[k] = targets[k].dst;
    prm.first_row[k] = targets[k].first_row;
    prm.rows[k] = targets[k].rows;
  }
  const std::int64_t total = total_rows * row_floats;
  if (total == 0) return 0;
  const int threads = 256;
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((total + threads - 1) / threads, 65535));
  partition_scatter_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(prm, features, row_floats, total);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace nexus::kernels
