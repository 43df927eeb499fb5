// Offscreen rendering of MuJoCo models through OSMesa (software OpenGL: no display, no GPU).
//
// A Renderer belongs to one model instance (one simulator session) and keeps only what is per
// instance: its abstract scene, camera and options. The OpenGL contexts it draws with are pooled
// and shared by every Renderer of the same kind (the same MJCF at the same size): a render leases
// an idle context of its kind, or makes one if every one is busy, and hands it back after.
// Why: an OSMesa (llvmpipe) context with MuJoCo's uploaded model costs about 78 MiB resident
// (measured: 8 contexts, 701 MiB), so a context per session made two RL jobs of 16 sessions
// cost 2.5 GB of nexusd's 3.3 GB; a pool needs only as many contexts as renders run at once (the
// Environment Service's threads), whatever the number of sessions.
//
// Invariants: Renderers of one kind load the same MJCF, so the assets uploaded into a context
// (built-in geoms, fonts, the offscreen buffer) serve all of them; a context is current on a
// thread only inside one render; a kind's contexts are destroyed with its last Renderer.
// Thread safety: any number of threads may render at once, each with its own Renderer.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>

#include <mujoco/mujoco.h>

namespace nexus::sim {

class Renderer {
 public:
  // `kind` identifies the model's source (the MJCF text it was loaded from). Throws
  // std::runtime_error if OSMesa fails or `size` exceeds the model's offscreen buffer.
  Renderer(const mjModel* model, int size, const void* kind);
  ~Renderer();
  Renderer(const Renderer&) = delete;
  Renderer& operator=(const Renderer&) = delete;
  // size * size RGB from the model's camera `camera`, row 0 at the top.
  void render(const mjModel* model, mjData* data, int camera, std::uint8_t* rgb);

  // OpenGL contexts alive in this process, all kinds together (for tests and status).
  static std::size_t contexts_alive();

 private:
  void leave_pool();  // the destructor's work, also for a constructor that fails
  struct State;
  std::unique_ptr<State> s_;
  int size_;
};

}  // namespace nexus::sim
