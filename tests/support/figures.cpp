#include "figures.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>

namespace nexus::test {

std::uint64_t test_seed() {
  const char* v = std::getenv("NEXUS_TEST_SEED");
  if (!v || !*v) return 0;
  char* end = nullptr;
  const auto k = std::strtoull(v, &end, 10);
  if (*end) throw std::invalid_argument(std::string("NEXUS_TEST_SEED must be a number, got '") + v + "'");
  return k;
}

bool figure_holds(const std::string& name, double value, const std::string& op, double bound, int trials) {
  bool holds = false;
  if (op == ">=") holds = value >= bound;
  else if (op == ">") holds = value > bound;
  else if (op == "<=") holds = value <= bound;
  else if (op == "<") holds = value < bound;
  else throw std::invalid_argument("figure_holds: op must be >=, >, <= or <, got '" + op + "'");
  std::fprintf(stderr, "[figure] %s = %.6g (check: %s %.6g, seed variant %llu)\n", name.c_str(), value, op.c_str(),
               bound, static_cast<unsigned long long>(test_seed()));
  const char* path = std::getenv("NEXUS_TEST_FIGURES");
  if (!path || !*path) return holds;
  // One short line per write with O_APPEND semantics: lines from concurrent tests do not mix.
  if (FILE* f = std::fopen(path, "a")) {
    std::fprintf(f, "{\"figure\":\"%s\",\"seed\":%llu,\"value\":%.9g,\"op\":\"%s\",\"bound\":%.9g,\"trials\":%d}\n",
                 name.c_str(), static_cast<unsigned long long>(test_seed()), std::isfinite(value) ? value : -1e300,
                 op.c_str(), bound, trials);
    std::fclose(f);
  }
  return holds;
}

}  // namespace nexus::test
