// Reading one series out of nexusd's Prometheus exposition (nexusctl metrics), for tests and
// benchmarks: `series` is the name with its labels as nexusd writes them, e.g.
// nexus_feature_cache_lookups_total{result="hit"}.
#pragma once
#include <sstream>
#include <string>

namespace nexus::test {

// The series' value; 0 when the exposition has no such line.
inline double metric_sample(const std::string& exposition, const std::string& series) {
  std::istringstream in(exposition);
  for (std::string line; std::getline(in, line);)
    if (line.rfind(series + " ", 0) == 0) return std::stod(line.substr(series.size() + 1));
  return 0;
}

}  // namespace nexus::test
