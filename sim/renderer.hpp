// Offscreen rendering of a MuJoCo model through OSMesa (software OpenGL: no display, no GPU).
// One Renderer per model instance; it owns an OSMesa context and MuJoCo's GPU-side copy of the
// model, and makes the context current on the calling thread for each frame.
#pragma once
#include <cstdint>
#include <memory>

#include <mujoco/mujoco.h>

namespace nexus::sim {

class Renderer {
 public:
  Renderer(const mjModel* model, int size);  // throws std::runtime_error if OSMesa fails
  ~Renderer();
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;
  // size * size RGB from the model's camera `camera`, row 0 at the top.
  void render(const mjModel* model, mjData* data, int camera, std::uint8_t* rgb);

 private:
  struct State;
  std::unique_ptr<State> s_;
  int size_;
};

}  // namespace nexus::sim
