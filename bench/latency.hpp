// Round-trip latency samples and their percentiles.
#pragma once
#include <cstddef>
#include <vector>

namespace nexus::bench {

struct Percentiles {
  double p50_us = 0;
  double p99_us = 0;
  double mean_us = 0;
  std::size_t samples = 0;
};

Percentiles percentiles(std::vector<double> samples_us);

}  // namespace nexus::bench
