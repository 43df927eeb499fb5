#include "datasets/normalizer.hpp"

#include <cmath>
#include <functional>

namespace nexus::datasets {
namespace {

// Two passes in double: the files are small, and one-pass variance loses digits on large means.
ColumnStats column_stats(const DemoFile& file, std::size_t width,
                         const std::function<const std::vector<float>&(const Episode&)>& field) {
  ColumnStats s;
  if (width == 0) return s;
  std::vector<double> sum(width, 0.0), sq(width, 0.0);
  std::size_t rows = 0;
  for (const auto& e : file.episodes) {
    if (!e.train) continue;
    const auto& v = field(e);
    for (std::size_t i = 0; i < v.size(); ++i) sum[i % width] += v[i];
    rows += v.size() / width;
  }
  if (rows == 0) throw DatasetError("no training demos to compute normalisation statistics from");
  s.mean.resize(width);
  for (std::size_t c = 0; c < width; ++c) s.mean[c] = static_cast<float>(sum[c] / static_cast<double>(rows));
  for (const auto& e : file.episodes) {
    if (!e.train) continue;
    const auto& v = field(e);
    for (std::size_t i = 0; i < v.size(); ++i) {
      const double d = v[i] - sum[i % width] / static_cast<double>(rows);
      sq[i % width] += d * d;
    }
  }
  s.std.resize(width);
  for (std::size_t c = 0; c < width; ++c) {
    const auto sd = static_cast<float>(std::sqrt(sq[c] / static_cast<double>(rows)));
    s.std[c] = sd < Normalizer::kMinStd ? 1.0f : sd;
  }
  return s;
}

}  // namespace

void ColumnStats::normalize(float* values, std::size_t count) const {
  const std::size_t width = mean.size();
  for (std::size_t i = 0; width > 0 && i < count; ++i) values[i] = (values[i] - mean[i % width]) / std[i % width];
}

void ColumnStats::denormalize(float* values, std::size_t count) const {
  const std::size_t width = mean.size();
  for (std::size_t i = 0; width > 0 && i < count; ++i) values[i] = mean[i % width] + std[i % width] * values[i];
}

Normalizer compute_normalizer(const DemoFile& file) {
  Normalizer n;
  n.action = column_stats(file, static_cast<std::size_t>(file.meta.action_dim),
                          [](const Episode& e) -> const std::vector<float>& { return e.actions; });
  n.state = column_stats(file, static_cast<std::size_t>(file.meta.state_dim),
                         [](const Episode& e) -> const std::vector<float>& { return e.proprio; });
  return n;
}

}  // namespace nexus::datasets
