// A tenant's dataset file as nexus-dataset-reader reads it: the bytes as an HDF5 file image
// (read_demo_fd from a memfd, as from the descriptor a tenant sends), with the options a load
// may ask for, and a memory bound as a small quota would set it. libhdf5 itself is not built
// with sanitizers here: a crash inside it shows as a SEGV, which is what the reader's sandbox is
// for (docs/design/security.md).
//   input: [options: 1 byte][the file]
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <vector>

#include "datasets/demo_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const std::uint8_t options = data[0];
  const int fd = ::memfd_create("fuzz-dataset", MFD_CLOEXEC);
  if (fd < 0) return 0;
  if (size > 1 && ::write(fd, data + 1, size - 1) != static_cast<ssize_t>(size - 1)) {
    ::close(fd);
    return 0;
  }
  nexus::datasets::ReadOptions read;
  read.image_size = (options & 1) ? 16 : 0;
  read.max_bytes = (options & 2) ? (64u << 20) : (1u << 20);
  if (options & 4) read.views = {"agentview_image", "robot0_eye_in_hand_image"};
  if (options & 8) read.state_keys = {"robot0_eef_pos", "robot0_gripper_qpos"};
  if (options & 16) read.instruction = "fuzz";
  try {
    const auto f = nexus::datasets::read_demo_fd(fd, "fuzz", read);
    std::uint64_t held = 0;
    for (const auto& e : f.episodes) held += e.images.size() + 4 * (e.proprio.size() + e.actions.size());
    if (held > read.max_bytes) __builtin_trap();  // the bound held what it promised
  } catch (const nexus::datasets::DatasetError&) {
  }
  ::close(fd);
  return 0;
}
