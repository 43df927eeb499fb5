// Every FlatBuffers request a tenant may put in its ring, as decode_request sees it (seeds: one
// valid message of each kind, made by nexus_fuzz_seeds; mutations from there and from raw bytes).
#include "fuzz_inputs.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::vector<std::uint8_t> copy(data, data + size);  // exact-size buffer for ASan
  nexus::fuzz::decode(copy.data(), copy.size());
  return 0;
}
