#include "sim/renderer.hpp"

#include <GL/osmesa.h>

#include <cstring>
#include <stdexcept>
#include <vector>

namespace nexus::sim {

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
}

Renderer::~Renderer() {
  if (!s_->context) return;
  try {
    s_->make_current(size_);
  } catch (...) {
  }
  mjr_freeContext(&s_->gl);
  mjv_freeScene(&s_->scene);
  OSMesaMakeCurrent(nullptr, nullptr, 0, 0, 0);  // releases the framebuffer MakeCurrent made
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
  // OpenGL's rows run bottom-up; images here run top-down.
  const std::size_t row = static_cast<std::size_t>(size_) * 3;
  for (int y = 0; y < size_; ++y)
    std::memcpy(rgb + static_cast<std::size_t>(y) * row, s_->flipped.data() + static_cast<std::size_t>(size_ - 1 - y) * row, row);
}

}  // namespace nexus::sim
