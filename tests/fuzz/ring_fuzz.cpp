// A tenant's whole request ring (its tail index and bytes), drained as the reactor does.
#include "fuzz_inputs.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  nexus::fuzz::drain_ring(data, size);
  return 0;
}
