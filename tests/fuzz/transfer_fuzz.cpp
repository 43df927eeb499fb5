// What nexusd reads back from its sandboxed dataset reader (datasets/demo_transfer.hpp), as if
// the reader were compromised: any bytes, a small bound. Nothing it accepts may hold more.
#include <sys/mman.h>
#include <unistd.h>

#include "datasets/demo_transfer.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const int fd = ::memfd_create("fuzz-transfer", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (size > 0 && ::write(fd, data, size) != static_cast<ssize_t>(size)) {
    ::close(fd);
    return 0;
  }
  try {
    const auto f = nexus::datasets::read_demo_transfer(fd, size, 1u << 20);
    if (nexus::datasets::held_bytes(f) > (1u << 20)) __builtin_trap();
  } catch (const nexus::datasets::DatasetError&) {
  }
  ::close(fd);
  return 0;
}
