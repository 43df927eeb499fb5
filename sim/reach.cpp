// reach: three coloured discs; the instruction names one; success when the fingertip is within
// 3 cm of its centre. Reward: 10 x the step's progress toward it, +1 on success.
#include <algorithm>
#include <array>
#include <cmath>

#include "sim/assets.hpp"
#include "sim/placement.hpp"
#include "sim/tasks.hpp"

namespace nexus::sim {
namespace {

constexpr std::array<const char*, 3> kBodies = {"ball_red", "ball_green", "ball_blue"};
constexpr std::array<const char*, 3> kColours = {"red", "green", "blue"};

class Reach : public Task {
 public:
  explicit Reach(const TaskOptions& o) : Task("reach", assets::kReachXml, o, /*max_steps=*/40, /*substeps=*/10) {}

  std::vector<float> expert_action() const override {
    const auto [ax, ay] = steer_toward(tip(), target_);
    return {ax, ay};
  }

 private:
  void place(std::uint64_t seed) override {
    Rng rng(seed);
    std::vector<Point> placed;
    for (const char* body : kBodies) {
      Point p;
      for (int attempt = 0; attempt < 200; ++attempt) {  // apart from each other
        p = in_annulus(rng, 0.09, 0.21);
        if (std::all_of(placed.begin(), placed.end(), [&](Point q) { return distance(p, q) > 0.1; })) break;
      }
      placed.push_back(p);
      set_mocap(body, p.first, p.second);
    }
    const auto target = rng() % kBodies.size();
    target_ = placed[target];
    double shoulder = 0, elbow = 0;
    for (int attempt = 0; attempt < 200; ++attempt) {  // start away from the target
      shoulder = uniform(rng, -std::numbers::pi, std::numbers::pi);
      elbow = uniform(rng, 0.6, 2.4) * (rng() % 2 ? 1 : -1);
      if (distance(tip_at(shoulder, elbow), target_) > 0.1) break;
    }
    set_arm(shoulder, elbow);
    instruction_ = std::string("reach the ") + kColours[target] + " ball";
  }

  StepResult evaluate() override { return progress(distance(tip(), target_)); }

  Point target_;
};

}  // namespace

std::unique_ptr<Task> make_reach(const TaskOptions& o) { return std::make_unique<Reach>(o); }

}  // namespace nexus::sim
