#include "daemon/model/reproducible_math.hpp"

#include <cstdlib>

namespace nexus::model {

std::string default_math_library_branch() {
#if defined(__x86_64__) || defined(__i386__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "AVX2,STRICT";
#endif
  return "COMPATIBLE";
}

std::string pin_math_library_branch() {
  if (const char* set = std::getenv("MKL_CBWR"); set && *set) return set;
  const auto branch = default_math_library_branch();
  ::setenv("MKL_CBWR", branch.c_str(), /*overwrite=*/0);
  return branch;
}

}  // namespace nexus::model
