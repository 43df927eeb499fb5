// SGMV (segmented gather matrix-vector, after Punica): the low-rank part of many tenants'
// adapters over one group batch, in two launches for the whole group. Row r of x belongs to the
// segment that holds it; segment k's rows get
//   shrink   h[r, 0:rank_k]  = scale_k * x[r, :] A_k      A_k [in, rank_k], row-major
//   expand   y[r, :]        += h[r, 0:rank_k] B_k          B_k [rank_k, out], row-major
// Rows in no segment are left alone (h: zeros; y: unchanged). h is [rows, max_rank]; its
// columns past a segment's rank are written as zeros.
//
// The CPU version is the reference (and is checked against the model's batched LibTorch path,
// daemon/model/lora.hpp); the CUDA version (sgmv.cu) must match it within fp32 rounding
// (tests/model/kernels_test.cpp). The daemon's passes use the LibTorch path on every device,
// which autograd differentiates; this kernel is the inference path's building block
// (docs/design/adapters.md says what is left to wire).
#pragma once
#include <cstddef>
#include <cstdint>

namespace nexus::kernels {

struct SgmvSegment {
  std::int64_t first_row = 0, rows = 0;
  const float* a = nullptr;  // [in, rank]
  const float* b = nullptr;  // [rank, out]
  std::int64_t rank = 0;     // 1..max_rank
  float scale = 1;
};

struct SgmvShape {
  std::int64_t rows = 0, in = 0, out = 0, max_rank = 0;
};

// Throws std::invalid_argument on overlapping or out-of-range segments, or a rank out of 1..max_rank.
void check_sgmv_segments(const SgmvShape& shape, const SgmvSegment* segments, std::size_t count);

// x [rows, in] -> h [rows, max_rank]; then y [rows, out] += h B.
void sgmv_shrink_cpu(const float* x, float* h, const SgmvShape& shape, const SgmvSegment* segments, std::size_t count);
void sgmv_expand_cpu(const float* h, float* y, const SgmvShape& shape, const SgmvSegment* segments, std::size_t count);

#ifdef NEXUS_WITH_CUDA
inline constexpr int kMaxSgmvSegments = 64;
// Device pointers (segments' a and b too); enqueued on `stream`. Same checks as the CPU version
// (on the host). Return the launch's cudaError_t as int.
int sgmv_shrink_cuda(const float* x, float* h, const SgmvShape& shape, const SgmvSegment* segments, std::size_t count,
                     void* stream);
int sgmv_expand_cuda(const float* h, float* y, const SgmvShape& shape, const SgmvSegment* segments, std::size_t count,
                     void* stream);
#endif

}  // namespace nexus::kernels
