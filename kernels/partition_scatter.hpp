// Partition scatter: after one backbone pass over a group, writes each request's rows of the
// group's features straight into that request's own buffer (on GPU: the tenant's memory, opened
// from its CUDA IPC handle), in one launch for the whole group. On the CPU the daemon hands out
// narrow() views instead and copies nothing; this is for outputs that must land in a tenant's
// memory.
//
// The CPU version is the reference; the CUDA version (partition_scatter.cu) must match it
// bitwise (tests/model/kernels_test.cpp).
#pragma once
#include <cstdint>
#include <cstddef>

namespace nexus::kernels {

struct ScatterTarget {
  float* dst = nullptr;        // rows * row_floats floats
  std::int64_t first_row = 0;  // in the group's features
  std::int64_t rows = 0;
};

// `features` is [total_rows, row_floats], contiguous. Targets may come in any order but must not
// overlap each other's rows or exceed total_rows (checked: std::invalid_argument).
void partition_scatter_cpu(const float* features, std::int64_t total_rows, std::int64_t row_floats,
                           const ScatterTarget* targets, std::size_t count);

#ifdef NEXUS_WITH_CUDA
inline constexpr int kMaxScatterTargets = 64;
// Device pointers; enqueued on `stream`. Same checks as the CPU version (on the host). Returns
// the launch's cudaError_t as int.
int partition_scatter_cuda(const float* features, std::int64_t total_rows, std::int64_t row_floats,
                           const ScatterTarget* targets, std::size_t count, void* stream);
#endif

// Shared by both versions: throws std::invalid_argument on overlapping or out-of-range targets.
void check_scatter_targets(std::int64_t total_rows, const ScatterTarget* targets, std::size_t count);

}  // namespace nexus::kernels
