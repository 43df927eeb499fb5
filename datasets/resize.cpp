#include "datasets/resize.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace nexus::datasets {
namespace {

struct Tap {
  std::int64_t index;
  float weight;
};

// For each output coordinate along one axis, the source coordinates it reads and their weights
// (summing to 1).
std::vector<std::vector<Tap>> axis_taps(std::int64_t from, std::int64_t to) {
  std::vector<std::vector<Tap>> taps(static_cast<std::size_t>(to));
  const double scale = static_cast<double>(from) / static_cast<double>(to);
  for (std::int64_t o = 0; o < to; ++o) {
    auto& t = taps[static_cast<std::size_t>(o)];
    if (scale >= 1.0) {  // area: the footprint [o * scale, (o + 1) * scale) in source pixels
      const double lo = static_cast<double>(o) * scale, hi = lo + scale;
      for (auto i = static_cast<std::int64_t>(std::floor(lo)); static_cast<double>(i) < hi && i < from; ++i) {
        const double overlap = std::min(hi, static_cast<double>(i + 1)) - std::max(lo, static_cast<double>(i));
        if (overlap > 1e-9) t.push_back({i, static_cast<float>(overlap / scale)});
      }
    } else {  // bilinear, pixel centres at +0.5, clamped at the edges
      const double x = std::clamp((static_cast<double>(o) + 0.5) * scale - 0.5, 0.0, static_cast<double>(from - 1));
      const auto i0 = static_cast<std::int64_t>(std::floor(x));
      const auto i1 = std::min(i0 + 1, from - 1);
      const auto f = static_cast<float>(x - static_cast<double>(i0));
      t.push_back({i0, 1.0f - f});
      if (i1 != i0) t.push_back({i1, f});
    }
  }
  return taps;
}

}  // namespace

void resize_rgb(const std::uint8_t* src, std::int64_t from, std::uint8_t* dst, std::int64_t to) {
  if (from == to) {
    std::memcpy(dst, src, static_cast<std::size_t>(from * from * 3));
    return;
  }
  const auto taps = axis_taps(from, to);
  // Rows first (source rows, output columns), then columns.
  std::vector<float> rows(static_cast<std::size_t>(from * to * 3));
  for (std::int64_t y = 0; y < from; ++y)
    for (std::int64_t x = 0; x < to; ++x)
      for (int c = 0; c < 3; ++c) {
        float v = 0;
        for (const auto& t : taps[static_cast<std::size_t>(x)])
          v += t.weight * static_cast<float>(src[(y * from + t.index) * 3 + c]);
        rows[static_cast<std::size_t>((y * to + x) * 3 + c)] = v;
      }
  for (std::int64_t y = 0; y < to; ++y)
    for (std::int64_t x = 0; x < to; ++x)
      for (int c = 0; c < 3; ++c) {
        float v = 0;
        for (const auto& t : taps[static_cast<std::size_t>(y)])
          v += t.weight * rows[static_cast<std::size_t>((t.index * to + x) * 3 + c)];
        dst[(y * to + x) * 3 + c] = static_cast<std::uint8_t>(std::clamp(std::lround(v), 0L, 255L));
      }
}

}  // namespace nexus::datasets
