#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include <span>

#include "kernels/partition_scatter.hpp"

namespace nexus::kernels {

void check_scatter_targets(std::int64_t total_rows, const ScatterTarget* targets, std::size_t count) {
  std::vector<std::pair<std::int64_t, std::int64_t>> spans;
  for (const ScatterTarget& t : std::span(targets, count)) {
    if (t.rows < 0 || t.first_row < 0 || t.first_row > total_rows - t.rows || (t.rows > 0 && !t.dst))
      throw std::invalid_argument("scatter target rows [" + std::to_string(t.first_row) + ", +" +
                                  std::to_string(t.rows) + ") outside the group's " + std::to_string(total_rows));
    spans.emplace_back(t.first_row, t.first_row + t.rows);
  }
  std::sort(spans.begin(), spans.end());
  for (std::size_t i = 1; i < spans.size(); ++i)
    if (spans[i].first < spans[i - 1].second) throw std::invalid_argument("scatter targets overlap");
}

void partition_scatter_cpu(const float* features, std::int64_t total_rows, std::int64_t row_floats,
                           const ScatterTarget* targets, std::size_t count) {
  check_scatter_targets(total_rows, targets, count);
  for (const ScatterTarget& t : std::span(targets, count))
    if (t.rows > 0)
      std::memcpy(t.dst, features + t.first_row * row_floats,
                  static_cast<std::size_t>(t.rows * row_floats) * sizeof(float));
}

}  // namespace nexus::kernels
