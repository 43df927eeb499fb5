#include <algorithm>
#include <stdexcept>
#include <vector>

#include "kernels/sgmv.hpp"

namespace nexus::kernels {

void check_sgmv_segments(const SgmvShape& shape, const SgmvSegment* segments, std::size_t count) {
  if (shape.rows < 0 || shape.in < 1 || shape.out < 1 || shape.max_rank < 1)
    throw std::invalid_argument("sgmv: rows >= 0, in, out and max_rank >= 1");
  std::vector<std::pair<std::int64_t, std::int64_t>> spans;
  for (std::size_t k = 0; k < count; ++k) {
    const auto& s = segments[k];
    if (s.first_row < 0 || s.rows < 0 || s.first_row + s.rows > shape.rows)
      throw std::invalid_argument("sgmv: segment rows outside the batch");
    if (s.rank < 1 || s.rank > shape.max_rank || !s.a || !s.b) throw std::invalid_argument("sgmv: bad segment weights");
    spans.emplace_back(s.first_row, s.first_row + s.rows);
  }
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second) throw std::invalid_argument("sgmv: segments overlap");
}

void sgmv_shrink_cpu(const float* x, float* h, const SgmvShape& sh, const SgmvSegment* segments, std::size_t count) {
  check_sgmv_segments(sh, segments, count);
  std::fill(h, h + sh.rows * sh.max_rank, 0.0f);
  for (std::size_t k = 0; k < count; ++k) {
    const auto& s = segments[k];
    for (std::int64_t r = s.first_row; r < s.first_row + s.rows; ++r)
      for (std::int64_t j = 0; j < s.rank; ++j) {
        float acc = 0;  // in order over `in`, as the CUDA thread sums
        for (std::int64_t i = 0; i < sh.in; ++i) acc += x[r * sh.in + i] * s.a[i * s.rank + j];
        h[r * sh.max_rank + j] = s.scale * acc;
      }
  }
}

void sgmv_expand_cpu(const float* h, float* y, const SgmvShape& sh, const SgmvSegment* segments, std::size_t count) {
  check_sgmv_segments(sh, segments, count);
  for (std::size_t k = 0; k < count; ++k) {
    const auto& s = segments[k];
    for (std::int64_t r = s.first_row; r < s.first_row + s.rows; ++r)
      for (std::int64_t o = 0; o < sh.out; ++o) {
        float acc = 0;
        for (std::int64_t j = 0; j < s.rank; ++j) acc += h[r * sh.max_rank + j] * s.b[j * sh.out + o];
        y[r * sh.out + o] += acc;
      }
  }
}

}  // namespace nexus::kernels
