#include "latency.hpp"

#include <algorithm>
#include <numeric>

namespace nexus::bench {

Percentiles percentiles(std::vector<double> s) {
  Percentiles p;
  if (s.empty()) return p;
  std::sort(s.begin(), s.end());
  auto at = [&](double q) { return s[std::min(s.size() - 1, static_cast<std::size_t>(q * (s.size() - 1) + 0.5))]; };
  p.p50_us = at(0.50);
  p.p99_us = at(0.99);
  p.mean_us = std::accumulate(s.begin(), s.end(), 0.0) / static_cast<double>(s.size());
  p.samples = s.size();
  return p;
}

}  // namespace nexus::bench
