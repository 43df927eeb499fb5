// Group pack: gathers several requests' uint8 camera images (each [n, views, H, W, 3], in its
// tenant's arena) into the backbone's input, one float batch in patch layout
// [N, views, G*G, P*P*3] with value u / 255 - 0.5 (G = H / P). One pass over the bytes instead of
// the three that concatenating, converting and permuting take (torch::cat, to(float), permute).
//
// The CPU version is the reference; the CUDA version (group_pack.cu, built where nvcc is) must
// match it bitwise, and tests/model/kernels_test.cpp checks both against the backbone's own
// LibTorch preprocessing.
#pragma once
#include <cstdint>
#include <cstddef>

namespace nexus::kernels {

struct PackSource {
  const std::uint8_t* images = nullptr;  // [samples, views, H, W, 3], contiguous
  std::int64_t samples = 0;
};

struct PackGeometry {
  std::int64_t views = 1;
  std::int64_t image_size = 64;  // H = W
  std::int64_t patch = 8;        // P; image_size % patch == 0
  std::int64_t floats_per_sample() const { return views * image_size * image_size * 3; }
};

// `out` holds sum(samples) * floats_per_sample() floats.
void group_pack_cpu(const PackSource* sources, std::size_t count, const PackGeometry& g, float* out);

#ifdef NEXUS_WITH_CUDA
// At most this many sources per launch (they travel in the kernel's parameter block).
inline constexpr int kMaxPackSources = 64;
// Device pointers throughout; enqueued on `stream` (a cudaStream_t, 0: the default stream).
// Returns the launch's cudaError_t as int (0: success).
int group_pack_cuda(const PackSource* sources, std::size_t count, const PackGeometry& g, float* out, void* stream);
#endif

}  // namespace nexus::kernels
