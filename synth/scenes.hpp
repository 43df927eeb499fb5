// Scenes of a few coloured shapes on a noisy background, with an instruction that names one of
// them. Deterministic for a seed (libstdc++'s distributions), cheap (pure C++, no tensors).
//
// What depends on them: nexus-pretrain teaches the embedded backbone to ground instructions in
// these scenes; tests and example tenants derive actions from the named object's position.
#pragma once
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace nexus::synth {

inline constexpr int kColors = 4;  // red, green, blue, yellow
inline constexpr int kShapes = 2;  // square, circle
const char* color_name(int color);
const char* shape_name(int shape);
const std::uint8_t* color_rgb(int color);  // 3 bytes

struct SceneObject {
  int color = 0;
  int shape = 0;
  float x = 0, y = 0;  // centre, normalised to [0, 1]
};

struct Scene {
  std::vector<std::uint8_t> image;  // [H][W][3], uint8 RGB
  std::vector<SceneObject> objects; // distinct colours
  int target = 0;                   // index into objects: the one the instruction names
  std::string instruction;
};

struct SceneOptions {
  int image_size = 64;
  int objects = 3;         // at most kColors
  int object_radius = 5;   // pixels
  bool varied_phrasing = true;  // "the red square", "reach the red ball", ... (else just "red")
};

class SceneGenerator {
 public:
  SceneGenerator(std::uint64_t seed, SceneOptions options = {});
  Scene next();
  const SceneOptions& options() const { return options_; }

 private:
  std::mt19937_64 rng_;
  SceneOptions options_;
};

// The synthetic SFT task: a chunk of `chunk` 2-D actions moving in equal steps from the image
// centre to the named object's centre (row-major [chunk][2], image fractions). The actions
// depend on which object the instruction names and where it is, nothing else.
std::vector<float> reach_actions(const Scene& scene, int chunk);

}  // namespace nexus::synth
