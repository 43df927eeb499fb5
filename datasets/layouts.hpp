// The demonstration layouts nexus recognises by their obs keys, and what each reads by default:
//
//   layout     views (cameras, in view order)               state (concatenated, in order)
//   nexus      agentview_image                              robot0_proprio
//   robomimic  agentview_image, robot0_eye_in_hand_image    robot0_eef_pos (3), robot0_eef_quat (4),
//                                                           robot0_gripper_qpos (2)
//   libero     agentview_rgb, eye_in_hand_rgb               ee_states (6), gripper_states (2)
//
// robomimic's keys are those of its robosuite datasets (robomimic.readthedocs.io, "Datasets");
// LIBERO's are those of its released HDF5 files, whose 8-wide state (end effector pose and the two
// gripper fingers) is what LIBERO-trained VLAs such as OpenVLA take. Only the keys a file has are
// chosen; other layouts name their keys (ReadOptions, `--views`, `--state-keys`).
#pragma once
#include <string>
#include <vector>

namespace nexus::datasets {

struct LayoutKeys {
  std::string layout;  // nexus, robomimic, libero, or "" when none is recognised
  std::vector<std::string> views, state_keys;
};

// From the obs keys of a file's first demo.
LayoutKeys recognise_layout(const std::vector<std::string>& obs_keys);

}  // namespace nexus::datasets
