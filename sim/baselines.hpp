// Scripted reach policies that never read the instruction: the floor a policy that follows
// instructions must clear. Reach names one of three balls and succeeds on reaching it; a policy
// can score without reading which one is named, by heading for any ball, or by visiting them in
// turn within the episode's 40 steps. A learnt policy that scores no better than these has
// learnt where balls are, not which one is meant (issue: "learning checks that a broken
// implementation fails").
//   NearestBall  heads for the ball nearest the fingertip at the start and stays there.
//   Sweep        visits the balls nearest-first, moving on from each it reaches without the
//                episode ending: the best an instruction-ignoring policy can do here.
// Both steer with the expert's controller (steer_toward), so they differ from the expert only in
// which ball they aim at.
#pragma once
#include <cstdint>
#include <span>

namespace nexus::sim {

enum class IgnoringPolicy { NearestBall, Sweep };

struct BaselineScore {
  double success = 0;      // fraction of episodes that ended in success
  double mean_return = 0;  // summed rewards, averaged over episodes
};

// Runs one reach episode per seed (the same layouts Task::reset gives every other policy).
BaselineScore instruction_ignoring_reach(IgnoringPolicy policy, std::span<const std::uint64_t> seeds);

}  // namespace nexus::sim
