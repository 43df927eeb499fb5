// CUDA group pack: one thread per output float, grid-stride; bitwise equal to group_pack_cpu
// (IEEE division: never build this with --use_fast_math).
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>

#include "kernels/group_pack.hpp"

namespace nexus::kernels {
namespace {

struct PackParams {  // travels in the kernel's parameter block (about 1 KiB)
  const std::uint8_t* images[kMaxPackSources];
  std::int64_t first_sample[kMaxPackSources + 1];  // prefix sums of the sources' samples
  int count;
  std::int64_t views, size, patch;
};

__global__ void group_pack_kernel(PackParams prm, float* out, std::int64_t total) {
  const std::int64_t s = prm.size, p = prm.patch, grid = s / p;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(blockDim.x) * gridDim.x) {
    // Output order [n, v, gy, gx, py, px, c], as group_pack_cpu writes it.
    std::int64_t r = i;
    const std::int64_t c = r % 3;
    r /= 3;
    const std::int64_t px = r % p;
    r /= p;
    const std::int64_t py = r % p;
    r /= p;
    const std::int64_t gx = r % grid;
    r /= grid;
    const std::int64_t gy = r % grid;
    r /= grid;
    const std::int64_t v = r % prm.views;
    const std::int64_t n = r / prm.views;  // sample in the group
    int k = 0;
    while (k + 1 < prm.count && prm.first_sample[k + 1] <= n) ++k;  // <= 64 sources: a scan will do
    const std::uint8_t* img = prm.images[k] + ((n - prm.first_sample[k]) * prm.views + v) * s * s * 3;
    out[i] = static_cast<float>(img[((gy * p + py) * s + gx * p + px) * 3 + c]) / 255.0f - 0.5f;
  }
}

}  // namespace

int group_pack_cuda(const PackSource* sources, std::size_t count, const PackGeometry& g, float* out, void* stream) {
  if (count > static_cast<std::size_t>(kMaxPackSources))
    throw std::invalid_argument("group_pack_cuda: more than kMaxPackSources sources");
  if (g.patch <= 0 || g.image_size % g.patch != 0) throw std::invalid_argument("group_pack_cuda: bad geometry");
  PackParams prm{};
  prm.count = static_cast<int>(count);
  prm.views = g.views;
  prm.size = g.image_size;
  prm.patch = g.patch;
  for (std::size_t k = 0; k < count; ++k) {
    prm.images[k] = sources[k].images;
    prm.first_sample[k + 1] = prm.first_sample[k] + sources[k].samples;
  }
  const std::int64_t total = prm.first_sample[count] * g.floats_per_sample();
  if (total == 0) return 0;
  const int threads = 256;
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((total + threads - 1) / threads, 65535));
  group_pack_kernel<<<blocks, threads, 0, static_cast<cudaStream_t>(stream)>>>(prm, out, total);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace nexus::kernels
