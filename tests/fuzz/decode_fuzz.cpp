// Fuzzes what the daemon does with bytes from a tenant's segment: the request ring (indices and
// records, drained with RingReader) and each message (decode_request). Four shapes of input,
// chosen by the first byte, so that mutations reach deep into valid messages too:
//   0: raw bytes as one message;
//   1: a valid request with the input's bytes patched over it;
//   2: a whole ring: 8-byte tail index, then ring contents, drained to the end;
//   3: raw bytes as one control-socket frame (decode_control).
// CI runs it briefly (fuzz.decode_request); scripts/fuzz-long.sh runs it and the per-surface
// targets (requests, ring, front door, dataset files, dataset transfers) for a million each.
#include "fuzz_inputs.hpp"

using namespace nexus;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t mode = data[0] % 4;
  ++data;
  --size;
  if (mode == 0) {
    std::vector<std::uint8_t> copy(data, data + size);  // exact-size buffer for ASan
    fuzz::decode(copy.data(), copy.size());
  } else if (mode == 1) {
    if (size < 2) return 0;
    auto msg = fuzz::valid_request(data[0]);
    for (std::size_t i = 1; i + 1 < size; i += 2) msg[data[i] % msg.size()] = data[i + 1];
    fuzz::decode(msg.data(), msg.size());
  } else if (mode == 3) {
    fuzz::control_frame(data, size);
  } else {
    fuzz::drain_ring(data, size);
  }
  return 0;
}
