// nexusctl dataset record|info: demonstration files from the built-in tasks' scripted experts.
#pragma once
#include <cstdint>
#include <string>

#include "datasets/demo_file.hpp"

namespace nexus::ctl {

struct RecordOptions {
  std::string task = "reach";
  int episodes = 100;
  std::string out;
  std::uint64_t seed = 0;       // episode i is reset with seed + i
  int image_size = 64;          // the backbone's geometry (tiny and small: 64)
  bool keep_failures = false;   // by default only successful demonstrations are written
};

int record_dataset(const RecordOptions& options);
// Layout, views, state keys, splits and the normalisation nexusd would compute (over the
// training demos), as one line or as JSON.
int dataset_info(const std::string& path, const datasets::ReadOptions& options, bool json);

}  // namespace nexus::ctl
