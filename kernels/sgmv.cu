// CUDA SGMV shrink and expand (kernels/sgmv.hpp): one thread per output element of the whole
// group, grid-stride; each finds its row's segment in the launch's parameter block and sums in
// the CPU reference's order. Simple on purpose: with ranks <= 64 and the built-in backbone's
// widths the low-rank part is a few percent of the pass; a tiled version (Punica's) is the next
// step when gpu-check shows this one matters.
#include <cuda_runtime.h>

#include <algorithm>
#include <stdexcept>

#include "kernels/sgmv.hpp"

namespace nexus::kernels {
namespace {

struct SgmvParams {  // travels in the kernel's parameter block (about 2.6 KiB)
  const float* a[kMaxSgmvSegments];
  const float* b[kMaxSgmvSegments];
  std::int64_t first_row[kMaxSgmvSegments];
  std::int64_t rows[kMaxSgmvSegments];
  std::int64_t rank[kMaxSgmvSegments];
  float scale[kMaxSgmvSegments];
  int count;
};

__device__ int segment_of(const SgmvParams& p, std::int64_t row) {
  for (int k = 0; k < p.count; ++k)
    if (row >= p.first_row[k] && row < p.first_row[k] + p.rows[k]) return k;
  return -1;
}

__global__ void shrink_kernel(SgmvParams p, const float* x, float* h, std::int64_t rows, std::int64_t in,
                              std::int64_t max_rank) {
  const std::int64_t total = rows * max_rank;
  for (std::int64_t t = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<std::int64_t>(blockDim.x) * gridDim.x) {
    const std::int64_t r = t / max_rank, j = t % max_rank;
    const int k = segment_of(p, r);
    if (k < 0 || j >= p.rank[k]) {
      h[t] = 0.0f;
      continue;
    }
    float acc = 0;
    for (std::int64_t i = 0; i < in; ++i) acc = __fadd_rn(acc, __fmul_rn(x[r * in + i], p.a[k][i * p.rank[k] + j]));
    h[t] = __fmul_rn(p.scale[k], acc);
  }
}

__global__ void expand_kernel(SgmvParams p, const float* h, float* y, std::int64_t rows, std::int64_t out,
                              std::int64_t max_rank) {
  const std::int64_t total = rows * out;
  for (std::int64_t t = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; t < total;
       t += static_cast<std::int64_t>(blockDim.x) * gridDim.x) {
    const std::int64_t r = t / out, o = t % out;
    const int k = segment_of(p, r);
    if (k < 0) continue;
    float acc = 0;
    for (std::int64_t j = 0; j < p.rank[k]; ++j) acc = __fadd_rn(acc, __fmul_rn(h[r * max_rank + j], p.b[k][j * out + o]));
    y[t] = __fadd_rn(y[t], acc);
  }
}

SgmvParams params_of(const SgmvShape& shape, const SgmvSegment* segments, std::size_t count) {
  if (count > static_cast<std::size_t>(kMaxSgmvSegments))
    throw std::invalid_argument("sgmv_cuda: more than kMaxSgmvSegments segments");
  check_sgmv_segments(shape, segments, count);
  SgmvParams p{};
  p.count = static_cast<int>(count);
  for (std::size_t k = 0; k < count; ++k) {
    p.a[k] = segments[k].a, p.b[k] = segments[k].b;
    p.first_row[k] = segments[k].first_row, p.rows[k] = segments[k].rows;
    p.rank[k] = segments[k].rank, p.scale[k] = segments[k].scale;
  }
  return p;
}

unsigned blocks_for(std::int64_t total, int threads) {
  return static_cast<unsigned>(std::min<std::int64_t>((total + threads - 1) / threads, 65535));
}

}  // namespace

int sgmv_shrink_cuda(const float* x, float* h, const SgmvShape& shape, const SgmvSegment* segments, std::size_t count,
                     void* stream) {
  const auto p = params_of(shape, segments, count);
  const std::int64_t total = shape.rows * shape.max_rank;
  if (total == 0) return 0;
  shrink_kernel<<<blocks_for(total, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(p, x, h, shape.rows, shape.in,
                                                                                      shape.max_rank);
  return static_cast<int>(cudaGetLastError());
}

int sgmv_expand_cuda(const float* h, float* y, const SgmvShape& shape, const SgmvSegment* segments, std::size_t count,
                     void* stream) {
  const auto p = params_of(shape, segments, count);
  const std::int64_t total = shape.rows * shape.out;
  if (total == 0) return 0;
  expand_kernel<<<blocks_for(total, 256), 256, 0, static_cast<cudaStream_t>(stream)>>>(p, h, y, shape.rows, shape.out,
                                                                                      shape.max_rank);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace nexus::kernels
