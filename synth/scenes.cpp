#include "synth/scenes.hpp"

#include <algorithm>
#include <cmath>

namespace nexus::synth {
namespace {

constexpr std::uint8_t kPalette[kColors][3] = {{220, 40, 40}, {40, 200, 40}, {40, 60, 230}, {230, 210, 40}};
constexpr const char* kColorNames[kColors] = {"red", "green", "blue", "yellow"};
constexpr const char* kShapeNames[kShapes] = {"square", "circle"};

std::string phrase(std::mt19937_64& rng, const SceneObject& o, bool varied) {
  const std::string c = kColorNames[o.color];
  if (!varied) return c;
  const std::string s = kShapeNames[o.shape];
  switch (std::uniform_int_distribution<int>(0, 5)(rng)) {
    case 0: return c;
    case 1: return "the " + c + " one";
    case 2: return "the " + c + " " + s;
    case 3: return "reach the " + c + " " + (o.shape == 1 ? "ball" : "block");
    case 4: return "where is the " + c + " " + s + "?";
    default: return "pick up the " + c + " " + s;
  }
}

}  // namespace

const char* color_name(int color) { return kColorNames[color % kColors]; }
const char* shape_name(int shape) { return kShapeNames[shape % kShapes]; }
const std::uint8_t* color_rgb(int color) { return kPalette[color % kColors]; }

SceneGenerator::SceneGenerator(std::uint64_t seed, SceneOptions options)
    : rng_(seed), options_(options) {
  options_.objects = std::clamp(options_.objects, 1, kColors);
}

Scene SceneGenerator::next() {
  const int size = options_.image_size, r = options_.object_radius;
  Scene scene;
  scene.image.resize(static_cast<std::size_t>(size) * size * 3);
  std::uniform_int_distribution<int> noise(0, 19);
  for (auto& px : scene.image) px = static_cast<std::uint8_t>(90 + noise(rng_));

  std::vector<int> colors(kColors);
  for (int i = 0; i < kColors; ++i) colors[i] = i;
  std::shuffle(colors.begin(), colors.end(), rng_);
  std::uniform_int_distribution<int> pos(r + 2, size - r - 3);
  std::uniform_int_distribution<int> shape(0, kShapes - 1);
  std::vector<std::pair<int, int>> centres;
  for (int k = 0; k < options_.objects; ++k) {
    int cx = 0, cy = 0;
    for (int attempt = 0; attempt < 100; ++attempt) {  // keep objects apart when possible
      cx = pos(rng_);
      cy = pos(rng_);
      const bool apart = std::all_of(centres.begin(), centres.end(), [&](auto c) {
        return std::abs(c.first - cx) > 2 * r + 2 || std::abs(c.second - cy) > 2 * r + 2;
      });
      if (apart) break;
    }
    centres.emplace_back(cx, cy);
    SceneObject o;
    o.color = colors[k];
    o.shape = shape(rng_);
    o.x = static_cast<float>(cx) / size;
    o.y = static_cast<float>(cy) / size;
    for (int y = cy - r; y <= cy + r; ++y)
      for (int x = cx - r; x <= cx + r; ++x) {
        const bool inside = o.shape == 0 || (x - cx) * (x - cx) + (y - cy) * (y - cy) <= r * r + 2;
        if (!inside) continue;
        std::uint8_t* px = &scene.image[(static_cast<std::size_t>(y) * size + x) * 3];
        std::copy(kPalette[o.color], kPalette[o.color] + 3, px);
      }
    scene.objects.push_back(o);
  }
  scene.target = std::uniform_int_distribution<int>(0, options_.objects - 1)(rng_);
  scene.instruction = phrase(rng_, scene.objects[scene.target], options_.varied_phrasing);
  return scene;
}

std::vector<float> reach_actions(const Scene& scene, int chunk) {
  const auto& o = scene.objects[scene.target];
  std::vector<float> a(static_cast<std::size_t>(chunk) * 2);
  for (int k = 0; k < chunk; ++k) {
    const float f = static_cast<float>(k + 1) / static_cast<float>(chunk);
    a[2 * k] = (o.x - 0.5f) * f;
    a[2 * k + 1] = (o.y - 0.5f) * f;
  }
  return a;
}

}  // namespace nexus::synth
