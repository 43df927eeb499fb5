// Per-dataset normalisation: the mean and standard deviation of each action and state column over
// a file's training demos, computed at load. nexusd trains on (x - mean) / std and, when a
// prediction names the dataset, feeds the state the same way and returns mean + std * y, so the
// head only ever sees normalised values and the tenant only ever sees the file's units.
//
// A column that barely varies (std below kMinStd: a constant quaternion component, a gripper that
// never moves) is centred but not scaled, so that noise in it is not blown up into a signal.
#pragma once
#include <cstdint>
#include <vector>

#include "datasets/demo_file.hpp"

namespace nexus::datasets {

struct ColumnStats {
  std::vector<float> mean, std;  // per column; std is 1 where the column barely varies

  bool empty() const { return mean.empty(); }
  // In place over rows of mean.size() columns; `values.size()` must be a multiple of it.
  void normalize(float* values, std::size_t count) const;
  void denormalize(float* values, std::size_t count) const;
};

struct Normalizer {
  static constexpr float kMinStd = 1e-3f;
  ColumnStats action, state;
};

// Over the episodes with train set; DatasetError when there are none.
Normalizer compute_normalizer(const DemoFile& file);

}  // namespace nexus::datasets
