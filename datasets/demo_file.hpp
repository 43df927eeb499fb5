// Demonstration datasets in the robomimic / LIBERO HDF5 layout, read and written through libhdf5.
//
//   /data                                 attrs: total (int), env_args (JSON string: task,
//                                         image_size, action_dim, state_dim, camera)
//   /data/demo_<i>                        attrs: num_samples (int), language_instruction (string),
//                                                success (int 0/1)
//   /data/demo_<i>/obs/<camera>           uint8  [T, H, W, 3]   (camera default "agentview_image")
//   /data/demo_<i>/obs/robot0_proprio     float32 [T, state_dim]
//   /data/demo_<i>/actions                float32 [T, action_dim]
//   /data/demo_<i>/states                 float32 [T, sim_state_dim]  (the simulator's state)
//   /data/demo_<i>/rewards                float32 [T]
//   /data/demo_<i>/dones                  uint8   [T]
//
// A LIBERO file carries its instruction in /data's `problem_info` attribute (JSON with
// "language_instruction") instead of per demo: the reader accepts either, the demo's first.
// The reader treats the file as untrusted: every missing key, wrong rank, dtype or length is a
// DatasetError that names the path inside the file.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace nexus::datasets {

struct DatasetError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Episode {
  std::string instruction;
  std::int64_t steps = 0;                 // T
  std::vector<std::uint8_t> images;       // [T, H, W, 3]
  std::vector<float> proprio;             // [T, state_dim]
  std::vector<float> actions;             // [T, action_dim]
  std::vector<float> sim_states;          // [T, sim_state_dim]
  std::vector<float> rewards;             // [T]
  std::vector<std::uint8_t> dones;        // [T]
  bool success = false;
};

struct DatasetMeta {
  std::string task;                       // "reach", "push", or whatever wrote it
  std::string camera = "agentview_image";
  std::int64_t image_size = 0;            // H = W
  std::int64_t state_dim = 0;
  std::int64_t action_dim = 0;
  std::int64_t sim_state_dim = 0;
};

// Writes a whole file (overwriting `path`). Throws DatasetError on I/O failure or on episodes
// whose arrays disagree with `meta`.
void write_demo_file(const std::string& path, const DatasetMeta& meta, const std::vector<Episode>& episodes);

// Reads and checks a whole file into memory (datasets here are small: 100 demos of 50 steps of
// 64x64 images is 61 MB). `camera` overrides the meta's camera key when not empty.
struct DemoFile {
  DatasetMeta meta;
  std::vector<Episode> episodes;
};
DemoFile read_demo_file(const std::string& path, const std::string& camera = "");
// The same from an open file descriptor (read whole, then opened as an HDF5 file image): the
// daemon opens a tenant's dataset with the tenant's file-system uid and reads it from the fd, so
// the permission check and the read concern the same file. `name` is for error messages.
DemoFile read_demo_fd(int fd, const std::string& name, const std::string& camera = "");

}  // namespace nexus::datasets
