#include "sim/renderer.hpp"

#include <GL/osmesa.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace nexus::sim {
namespace {
// Creating and destroying contexts is serialised (Mesa's first-use initialisation and MuJoCo's GL
// loader keep global state); rendering runs in parallel, each thread with its own current context.
std::mutex g_context_mu;

// A context is current only while it is used, and released after: contexts move between the
// Environment Service's threads, and a context destroyed on one thread while still current on
// another leaves that thread's next OSMesaMakeCurrent touching freed memory (it crashed so).
void release_current() { OSMesaMakeCurrent(nullptr, nullptr, 0, 0, 0); }

std::atomic<std::size_t> g_contexts_alive{0};

// One OpenGL context with a kind's model uploaded (MuJoCo's mjrContext: built-in geoms, fonts,
// the offscreen framebuffer).
struct GlContext {
  OSMesaContext context = nullptr;
  std::vector<unsigned char> framebuffer;  // OSMesa's default framebuffer (MuJoCo draws offscreen)
  mjrContext gl;
  int size;

  GlContext(const mjModel* model, int size) : size(size) {
    std::lock_guard lock(g_context_mu);
    context = OSMesaCreateContextExt(OSMESA_RGBA, 24, 8, 0, nullptr);
    if (!context) throw std::runtime_error("OSMesaCreateContextExt failed");
    framebuffer.resize(static_cast<std::size_t>(size) * size * 4);
    try {
      make_current();
    } catch (...) {
      OSMesaDestroyContext(context);
      throw;
    }
    mjr_defaultContext(&gl);
    mjr_makeContext(model, &gl, mjFONTSCALE_100);
    mjr_setBuffer(mjFB_OFFSCREEN, &gl);
    release_current();
    ++g_contexts_alive;
  }
  ~GlContext() {
    std::lock_guard lock(g_context_mu);
    try {
      make_current();
    } catch (...) {
    }
    mjr_freeContext(&gl);
    release_current();
    OSMesaDestroyContext(context);
    --g_contexts_alive;
  }
  GlContext(const GlContext&) = delete;
  GlContext& operator=(const GlContext&) = delete;

  void make_current() {
    if (!OSMesaMakeCurrent(context, framebuffer.data(), GL_UNSIGNED_BYTE, size, size))
      throw std::runtime_error("OSMesaMakeCurrent failed");
  }
};

// The contexts of one kind (MJCF source, size): the idle ones, and how many Renderers use them.
using Kind = std::pair<const void*, int>;
struct Pool {
  int renderers = 0;
  std::vector<std::unique_ptr<GlContext>> idle;
};
std::mutex g_pools_mu;
std::map<Kind, Pool> g_pools;  // GUARDED_BY(g_pools_mu)

// Holds an idle context of `kind` for one frame, or a new one made from `model` if all are
// busy, and hands it back to the kind's pool however the frame ends. The pool exists: the
// caller's Renderer counts in it.
struct Lease {
  Kind kind;
  std::unique_ptr<GlContext> context;
  Lease(const Kind& k, const mjModel* model) : kind(k) {
    {
      std::lock_guard lk(g_pools_mu);
      auto& idle = g_pools.at(kind).idle;
      if (!idle.empty()) {
        context = std::move(idle.back());
        idle.pop_back();
        return;
      }
    }
    context = std::make_unique<GlContext>(model, kind.second);  // outside the pools' lock: it is slow
  }
  ~Lease() {
    std::lock_guard lk(g_pools_mu);
    g_pools.at(kind).idle.push_back(std::move(context));
  }
  Lease(const Lease&) = delete;
  Lease& operator=(const Lease&) = delete;
};
}  // namespace

struct Renderer::State {
  Kind kind;
  mjvScene scene;
  mjvOption option;
  mjvCamera camera;
  std::vector<std::uint8_t> flipped;
};

Renderer::Renderer(const mjModel* model, int size, const void* kind) : s_(std::make_unique<State>()), size_(size) {
  if (size < 8 || size > model->vis.global.offwidth || size > model->vis.global.offheight)
    throw std::runtime_error("render size must be 8.." + std::to_string(model->vis.global.offwidth));
  s_->kind = {kind, size};
  mjv_defaultScene(&s_->scene);
  mjv_defaultOption(&s_->option);
  mjv_defaultCamera(&s_->camera);
  mjv_makeScene(model, &s_->scene, 200);
  // No shadow maps, reflections or skybox: the tasks light the table with the headlight alone
  // (which casts no shadow) and the camera sees only the table, so the frames are the same, and
  // in software rendering the shadow pass alone cost most of a frame.
  s_->scene.flags[mjRND_SHADOW] = 0;
  s_->scene.flags[mjRND_REFLECTION] = 0;
  s_->scene.flags[mjRND_SKYBOX] = 0;
  s_->flipped.resize(static_cast<std::size_t>(size) * size * 3);
  {
    std::lock_guard lk(g_pools_mu);
    ++g_pools[s_->kind].renderers;
  }
  try {
    Lease first(s_->kind, model);  // a kind's first Renderer makes its first context: OSMesa fails here, not mid-episode
  } catch (...) {
    leave_pool();
    throw;
  }
}

Renderer::~Renderer() { leave_pool(); }

void Renderer::leave_pool() {
  if (!s_) return;
  std::vector<std::unique_ptr<GlContext>> unused;
  {
    std::lock_guard lk(g_pools_mu);
    auto it = g_pools.find(s_->kind);
    if (--it->second.renderers == 0) {  // no render of this kind runs: every context is idle
      unused = std::move(it->second.idle);
      g_pools.erase(it);
    }
  }
  unused.clear();  // outside the pools' lock: each takes the context lock
  mjv_freeScene(&s_->scene);
  s_.reset();
}

void Renderer::render(const mjModel* model, mjData* data, int camera, std::uint8_t* rgb) {
  {
    Lease lease(s_->kind, model);
    auto& c = *lease.context;
    c.make_current();
    mjr_setBuffer(mjFB_OFFSCREEN, &c.gl);
    s_->camera.type = mjCAMERA_FIXED;
    s_->camera.fixedcamid = camera;
    const mjrRect viewport{0, 0, size_, size_};
    mjv_updateScene(model, data, &s_->option, nullptr, &s_->camera, mjCAT_ALL, &s_->scene);
    mjr_render(viewport, &s_->scene, &c.gl);
    mjr_readPixels(s_->flipped.data(), nullptr, viewport, &c.gl);
    release_current();
  }
  // OpenGL's rows run bottom-up; images here run top-down.
  const std::size_t row = static_cast<std::size_t>(size_) * 3;
  for (int y = 0; y < size_; ++y)
    std::memcpy(rgb + static_cast<std::size_t>(y) * row, s_->flipped.data() + static_cast<std::size_t>(size_ - 1 - y) * row, row);
}

std::size_t Renderer::contexts_alive() { return g_contexts_alive.load(); }

}  // namespace nexus::sim
