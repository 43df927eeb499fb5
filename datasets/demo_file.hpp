// Demonstration datasets in the robomimic / LIBERO HDF5 layouts, read and written through libhdf5.
//
//   /data                                 attrs: total (int), env_args (JSON string)
//   /data/demo_<i>                        attrs: num_samples (int), language_instruction (string),
//                                                success (int 0/1)
//   /data/demo_<i>/obs/<view>             uint8  [T, H, W, 3]   one dataset per camera
//   /data/demo_<i>/obs/<state key>        float  [T, k]         concatenated in key order
//   /data/demo_<i>/actions                float32 [T, action_dim]
//   /data/demo_<i>/states                 float32 [T, sim_state_dim]  (the simulator's state)
//   /data/demo_<i>/rewards                float32 [T]
//   /data/demo_<i>/dones                  uint8   [T]
//   /mask/<split>                         strings: demo names (robomimic's train/valid split)
//
// Which obs keys are views and which are state comes from, in order: the caller (ReadOptions,
// e.g. `nexusctl dataset info --views ... --state-keys ...`), the file's env_args ("views",
// "state_keys", or the older "camera"), else the layout recognised in the first demo
// (datasets/layouts.hpp): this project's robot0_proprio, robomimic's robot0_eef_pos /
// robot0_eef_quat / robot0_gripper_qpos with agentview_image and robot0_eye_in_hand_image, or
// LIBERO's ee_states / gripper_states with agentview_rgb and eye_in_hand_rgb.
//
// The instruction is the demo's language_instruction, else its ep_meta JSON "lang" (robomimic's
// newer files), else /data's problem_info JSON "language_instruction" (LIBERO), else
// ReadOptions::instruction. Views of another size are resized to ReadOptions::image_size
// (datasets/resize.hpp). The reader treats the file as untrusted: every missing key, wrong rank,
// dtype or length is a DatasetError that names the path inside the file.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace nexus::datasets {

struct DatasetError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// The file is well formed as far as read, but holding it would pass the read's memory bound
// (ReadOptions::max_bytes: for nexusd, what is left of the tenant's quota).
struct DatasetTooLarge : DatasetError {
  using DatasetError::DatasetError;
};

struct Episode {
  std::string name;                       // demo_<i> in the file
  std::string instruction;
  std::int64_t steps = 0;                 // T
  std::vector<std::uint8_t> images;       // [T, V, S, S, 3] (V views, S = image_size)
  std::vector<float> proprio;             // [T, state_dim]
  std::vector<float> actions;             // [T, action_dim]
  std::vector<float> sim_states;          // [T, sim_state_dim]
  std::vector<float> rewards;             // [T]
  std::vector<std::uint8_t> dones;        // [T]
  bool success = false;
  bool train = true;                      // in the training split (no /mask: every demo)
  bool valid = false;                     // in /mask/valid: held out
};

struct DatasetMeta {
  std::string task;                       // "reach", "push", or whatever wrote it
  std::string layout = "nexus";           // nexus, robomimic, libero, or named (keys from the caller)
  std::vector<std::string> views = {"agentview_image"};  // camera keys, in view order
  std::vector<std::string> state_keys;    // proprio keys, concatenated (writer: robot0_proprio)
  std::int64_t image_size = 0;            // S = H = W as held (after resizing)
  std::int64_t source_image_size = 0;     // as stored in the file (reading; the first view's)
  std::int64_t state_dim = 0;
  std::int64_t action_dim = 0;
  std::int64_t sim_state_dim = 0;
  bool has_masks = false;                 // the file had /mask/train or /mask/valid
};

// Writes a whole file (overwriting `path`) in this project's layout: views under their names,
// state as obs/robot0_proprio. Throws DatasetError on I/O failure or on episodes whose arrays
// disagree with `meta`.
void write_demo_file(const std::string& path, const DatasetMeta& meta, const std::vector<Episode>& episodes);

struct ReadOptions {
  std::vector<std::string> views;        // camera keys under obs/ (empty: env_args, else the layout's)
  std::vector<std::string> state_keys;   // proprio keys under obs/ (empty: the same)
  std::int64_t image_size = 0;           // resize every view to this side (0: keep the file's)
  std::string instruction;               // for demos whose file names none (empty: an error)
  // The most memory the read may hold, its result included (0: the reader's own 4 GiB bound).
  // Checked against each array's declared size before it is allocated: nexusd passes what is
  // left of the tenant's dataset quota, so a file cannot make it allocate past that.
  std::uint64_t max_bytes = 0;
};

// Reads and checks a whole file into memory (datasets here are small: 100 demos of 50 steps of
// 64x64 images is 61 MB).
struct DemoFile {
  DatasetMeta meta;
  std::vector<Episode> episodes;
};
DemoFile read_demo_file(const std::string& path, const ReadOptions& options = {});
// The same from an open file descriptor (read whole, then opened as an HDF5 file image): the
// daemon opens a tenant's dataset with the tenant's file-system uid and reads it from the fd, so
// the permission check and the read concern the same file. `name` is for error messages.
DemoFile read_demo_fd(int fd, const std::string& name, const ReadOptions& options = {});

// Splits "a,b,c" into keys (empty parts dropped): the form views and state keys take on
// command lines and in config.
std::vector<std::string> split_keys(const std::string& csv);

}  // namespace nexus::datasets
