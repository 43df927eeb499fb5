#include "sim/renderer.hpp"

#include <GL/osmesa.h>

#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

namespace nexus::sim {
namespace {
// Creating and destroying contexts is serialised (Mesa's first-use initialisation and MuJoCo's GL
// loader keep global state); rendering runs in parallel, each thread with its own current context.
std::mutex g_context_mu;

// A context is current only while it is used, and released after: sessions move between the
// Environment Service's threads, and a context destroyed on one thread while still current on
// another leaves that thread's next OSMesaMakeCurrent touching freed memory (it crashed so).
void release_current() { OSMesaMakeCurrent(nullptr, nullptr, 0, 0, 0); }
}  // namespace

struct Renderer::State {
  OSMesaContext context = nullptr;
  std::vector<unsigned char> framebuffer;  // OSMesa's default framebuffer (MuJoCo draws offscreen)
  mjvScene scene;
  mjvOption option;
  mjvCamera camera;
  mjrContext gl;
  std::vector<std::uint8_t> flipped;
  void make_current(int size) {
    if (!OSMesaMakeCurrent(context, framebuffer.data(), GL_UNSIGNED_BYTE, size, size))
      throw std::runtime_error("OSMesaMakeCurrent failed");
  }
};

Renderer::Renderer(const mjModel* model, int size) : s_(std::make_unique<State>()), size_(size) {
  if (size < 8 || size > model->vis.global.offwidth || size > model->vis.global.offheight)
    throw std::runtime_error("render size must be 8.." + std::to_string(model->vis.global.offwidth));
  std::lock_guard lock(g_context_mu);
  s_->context = OSMesaCreateContextExt(OSMESA_RGBA, 24, 8, 0, nullptr);
  if (!s_->context) throw std::runtime_error("OSMesaCreateContextExt failed");
  s_->framebuffer.resize(static_cast<std::size_t>(size) * size * 4);
  s_->make_current(size);
  mjv_defaultScene(&s_->scene);
  mjv_defaultOption(&s_->option);
  mjv_defaultCamera(&s_->camera);
  mjr_defaultContext(&s_->gl);
  mjv_makeScene(model, &s_->scene, 200);
  // No shadow maps, reflections or skybox: the tasks light the table with the headlight alone
  // (which casts no shadow) and the camera sees only the table, so the frames are the same, and
  // in software rendering the shadow pass alone cost most of a frame.
  s_->scene.flags[mjRND_SHADOW] = 0;
  s_->scene.flags[mjRND_REFLECTION] = 0;
  s_->scene.flags[mjRND_SKYBOX] = 0;
  mjr_makeContext(model, &s_->gl, mjFONTSCALE_100);
  mjr_setBuffer(mjFB_OFFSCREEN, &s_->gl);
  s_->flipped.resize(static_cast<std::size_t>(size) * size * 3);
  release_current();
}

Renderer::~Renderer() {
  if (!s_->context) return;
  std::lock_guard lock(g_context_mu);
  try {
    s_->make_current(size_);
  } catch (...) {
  }
  mjr_freeContext(&s_->gl);
  mjv_freeScene(&s_->scene);
  release_current();
  OSMesaDestroyContext(s_->context);
}

void Renderer::render(const mjModel* model, mjData* data, int camera, std::uint8_t* rgb) {
  s_->make_current(size_);
  mjr_setBuffer(mjFB_OFFSCREEN, &s_->gl);
  s_->camera.type = mjCAMERA_FIXED;
  s_->camera.fixedcamid = camera;
  const mjrRect viewport{0, 0, size_, size_};
  mjv_updateScene(model, data, &s_->option, nullptr, &s_->camera, mjCAT_ALL, &s_->scene);
  mjr_render(viewport, &s_->scene, &s_->gl);
  mjr_readPixels(s_->flipped.data(), nullptr, viewport, &s_->gl);
  release_current();
  // OpenGL's rows run bottom-up; images here run top-down.
  const std::size_t row = static_cast<std::size_t>(size_) * 3;
  for (int y = 0; y < size_; ++y)
    std::memcpy(rgb + static_cast<std::size_t>(y) * row, s_->flipped.data() + static_cast<std::size_t>(size_ - 1 - y) * row, row);
}

}  // namespace nexus::sim
