#include "datasets/layouts.hpp"

#include <algorithm>

namespace nexus::datasets {
namespace {

struct Known {
  const char* layout;
  std::vector<std::string> views, state_keys;
};

// Checked in this order: a file of this project has robot0_proprio and may share robomimic's
// camera name.
const Known kKnown[] = {
    {"nexus", {"agentview_image"}, {"robot0_proprio"}},
    {"robomimic",
     {"agentview_image", "robot0_eye_in_hand_image"},
     {"robot0_eef_pos", "robot0_eef_quat", "robot0_gripper_qpos"}},
    {"libero", {"agentview_rgb", "eye_in_hand_rgb"}, {"ee_states", "gripper_states"}},
};

}  // namespace

LayoutKeys recognise_layout(const std::vector<std::string>& obs_keys) {
  auto has = [&](const std::string& k) { return std::find(obs_keys.begin(), obs_keys.end(), k) != obs_keys.end(); };
  for (const auto& known : kKnown) {
    // Recognised by a state key of its own (robomimic's and nexus's camera names coincide).
    if (std::none_of(known.state_keys.begin(), known.state_keys.end(), has) &&
        !(known.layout != std::string("nexus") && std::any_of(known.views.begin(), known.views.end(), has)))
      continue;
    LayoutKeys out{known.layout, {}, {}};
    std::copy_if(known.views.begin(), known.views.end(), std::back_inserter(out.views), has);
    std::copy_if(known.state_keys.begin(), known.state_keys.end(), std::back_inserter(out.state_keys), has);
    return out;
  }
  return {};
}

}  // namespace nexus::datasets
