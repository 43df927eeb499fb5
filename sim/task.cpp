#include "sim/task.hpp"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <mutex>
#include <numbers>
#include <utility>

#include <mujoco/mujoco.h>

#include "sim/renderer.hpp"

namespace nexus::sim {
namespace {

constexpr double kTipStep = 0.015;   // metres of fingertip motion per unit action per step
constexpr double kElbowLimit = 2.9;  // the MJCF's elbow range
constexpr double kUpper = 0.13, kFore = 0.12;
constexpr double kWorkspace = 0.25;  // proprio positions in units of the arm's reach (order 1)  // the MJCF's link lengths (shoulder-elbow, elbow-tip)

// The joint step that moves the fingertip by (dx, dy): closed-form two-link inverse kinematics
// on the elbow's current side, the target pulled into the reachable annulus first. Exact, so a
// step goes straight where the action points, also with the arm folded (a Jacobian step there
// curved enough to make the experts dither). The shoulder takes the short way round.
std::pair<double, double> joint_step(double shoulder, double elbow, double dx, double dy) {
  const double x = kUpper * std::cos(shoulder) + kFore * std::cos(shoulder + elbow) + dx;
  const double y = kUpper * std::sin(shoulder) + kFore * std::sin(shoulder + elbow) + dy;
  const double r_min = std::sqrt(kUpper * kUpper + kFore * kFore + 2 * kUpper * kFore * std::cos(kElbowLimit));
  const double r_max = (kUpper + kFore) * 0.999;
  const double r = std::clamp(std::hypot(x, y), r_min, r_max);
  const double c = std::clamp((r * r - kUpper * kUpper - kFore * kFore) / (2 * kUpper * kFore), -1.0, 1.0);
  const double e = (elbow >= 0 ? 1.0 : -1.0) * std::acos(c);
  const double direction = std::atan2(y, x);
  const double s = direction - std::atan2(kFore * std::sin(e), kUpper + kFore * std::cos(e));
  return {std::remainder(s - shoulder, 2 * std::numbers::pi), e - elbow};
}

// MuJoCo's XML parser keeps global state: one load at a time.
std::mutex g_load_mutex;

mjModel* load_model(const char* mjcf) {
  std::lock_guard lk(g_load_mutex);
  auto vfs = std::make_unique<mjVFS>();  // a couple of MB: not on the stack
  mj_defaultVFS(vfs.get());
  const int len = static_cast<int>(std::strlen(mjcf));
  if (mj_makeEmptyFileVFS(vfs.get(), "task.xml", len) != 0) throw std::runtime_error("MuJoCo VFS full");
  std::memcpy(vfs->filedata[mj_findFileVFS(vfs.get(), "task.xml")], mjcf, static_cast<std::size_t>(len));
  char error[1000] = "";
  mjModel* m = mj_loadXML("task.xml", vfs.get(), error, sizeof error);
  mj_deleteVFS(vfs.get());
  if (!m) throw std::runtime_error(std::string("MuJoCo cannot load a built-in task: ") + error);
  return m;
}

}  // namespace

struct Task::Sim {
  mjModel* model = nullptr;
  mjData* data = nullptr;
  std::unique_ptr<Renderer> renderer;
  int tip_site = -1, camera = -1;
  int shoulder_q = 0, elbow_q = 0, shoulder_v = 0, elbow_v = 0;  // qpos and dof addresses
  ~Sim() {
    renderer.reset();
    if (data) mj_deleteData(data);
    if (model) mj_deleteModel(model);
  }
};

Task::Task(std::string name, const char* mjcf, const TaskOptions& options, int default_max_steps, int substeps)
    : sim_(std::make_unique<Sim>()),
      name_(std::move(name)),
      image_size_(options.image_size),
      max_steps_(options.max_steps > 0 ? options.max_steps : default_max_steps),
      substeps_(substeps) {
  auto& s = *sim_;
  s.model = load_model(mjcf);
  s.data = mj_makeData(s.model);
  s.tip_site = mj_name2id(s.model, mjOBJ_SITE, "tip");
  s.camera = mj_name2id(s.model, mjOBJ_CAMERA, "top");
  const int shoulder = mj_name2id(s.model, mjOBJ_JOINT, "shoulder"), elbow = mj_name2id(s.model, mjOBJ_JOINT, "elbow");
  if (s.tip_site < 0 || s.camera < 0 || shoulder < 0 || elbow < 0)
    throw std::runtime_error("built-in task " + name_ + ": MJCF lacks tip, top, shoulder or elbow");
  s.shoulder_q = s.model->jnt_qposadr[shoulder];
  s.elbow_q = s.model->jnt_qposadr[elbow];
  s.shoulder_v = s.model->jnt_dofadr[shoulder];
  s.elbow_v = s.model->jnt_dofadr[elbow];
  if (image_size_ < 8 || image_size_ > 256) throw TaskError("image_size must be 8..256");
  s.renderer = std::make_unique<Renderer>(s.model, image_size_, mjcf);  // one kind per MJCF: contexts shared
}

Task::~Task() = default;

void Task::reset(std::uint64_t seed) {
  mj_resetData(sim_->model, sim_->data);
  steps_ = 0;
  done_ = success_ = false;
  last_distance_ = -1;
  place(seed);
  mj_forward(sim_->model, sim_->data);
  evaluate();  // lets a task record its starting distances
}

StepResult Task::step(std::span<const float> action) {
  if (done_) throw TaskError("the episode is over: reset first");
  if (action.size() != static_cast<std::size_t>(kActionDim))
    throw TaskError("actions must have " + std::to_string(kActionDim) + " values, got " + std::to_string(action.size()));
  if (!std::isfinite(action[0]) || !std::isfinite(action[1])) throw TaskError("actions must be finite");
  auto& s = *sim_;
  const double dx = std::clamp(static_cast<double>(action[0]), -1.0, 1.0) * kTipStep;
  const double dy = std::clamp(static_cast<double>(action[1]), -1.0, 1.0) * kTipStep;
  const auto [dq0, dq1] = joint_step(s.data->qpos[s.shoulder_q], s.data->qpos[s.elbow_q], dx, dy);
  // The arm is driven kinematically along the step's joint path (position and velocity set at
  // every substep), so the fingertip goes where the action says; the block in push feels it
  // through contact as it would a very heavy arm. Servo dynamics lagged by a state-dependent
  // amount instead, which made the same action mean different motions.
  auto& d = *s.data;
  const double q0 = d.qpos[s.shoulder_q], q1 = d.qpos[s.elbow_q];
  const double t0 = q0 + dq0, t1 = std::clamp(q1 + dq1, -kElbowLimit, kElbowLimit);
  const double seconds = substeps_ * s.model->opt.timestep;
  for (int k = 1; k <= substeps_; ++k) {
    const double f = static_cast<double>(k) / substeps_;
    d.qpos[s.shoulder_q] = q0 + f * (t0 - q0);
    d.qpos[s.elbow_q] = q1 + f * (t1 - q1);
    d.qvel[s.shoulder_v] = (t0 - q0) / seconds;
    d.qvel[s.elbow_v] = (t1 - q1) / seconds;
    d.ctrl[0] = t0;
    d.ctrl[1] = t1;
    mj_step(s.model, &d);
  }
  d.qpos[s.shoulder_q] = t0;
  d.qpos[s.elbow_q] = t1;
  d.qvel[s.shoulder_v] = d.qvel[s.elbow_v] = 0;
  mj_forward(s.model, s.data);  // positions of the new state, for rewards and renders
  ++steps_;
  StepResult r = evaluate();
  success_ = r.success;
  r.truncated = !r.success && steps_ >= max_steps_;
  r.done = r.success || r.truncated;
  done_ = r.done;
  return r;
}

StepResult Task::progress(double distance) {
  StepResult r;
  if (last_distance_ >= 0) r.reward = static_cast<float>(10.0 * (last_distance_ - distance));
  r.success = distance < kSuccessRadius;
  if (r.success) r.reward += 1.0f;
  last_distance_ = distance;
  return r;
}

void Task::render(std::uint8_t* rgb) { sim_->renderer->render(sim_->model, sim_->data, sim_->camera, rgb); }

std::vector<std::uint8_t> Task::render() {
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(image_size_) * image_size_ * 3);
  render(rgb.data());
  return rgb;
}

std::vector<float> Task::proprio() const {
  const auto [x, y] = tip();
  const double elbow = sim_->data->qpos[sim_->elbow_q];
  return {static_cast<float>(x / kWorkspace), static_cast<float>(y / kWorkspace), static_cast<float>(std::cos(elbow)),
          static_cast<float>(std::sin(elbow))};
}

std::vector<float> Task::sim_state() const {
  const auto* m = sim_->model;
  const auto* d = sim_->data;
  std::vector<float> s;
  for (int i = 0; i < m->nq; ++i) s.push_back(static_cast<float>(d->qpos[i]));
  for (int i = 0; i < m->nv; ++i) s.push_back(static_cast<float>(d->qvel[i]));
  for (int i = 0; i < m->nmocap; ++i) {
    s.push_back(static_cast<float>(d->mocap_pos[3 * i]));
    s.push_back(static_cast<float>(d->mocap_pos[3 * i + 1]));
  }
  return s;
}

std::vector<std::pair<double, double>> Task::mocap_xy() const {
  std::vector<std::pair<double, double>> xy;
  for (int i = 0; i < sim_->model->nmocap; ++i) xy.emplace_back(sim_->data->mocap_pos[3 * i], sim_->data->mocap_pos[3 * i + 1]);
  return xy;
}

std::pair<double, double> Task::tip() const {
  const double* p = sim_->data->site_xpos + 3 * sim_->tip_site;
  return {p[0], p[1]};
}

void Task::set_mocap(const char* body, double x, double y) {
  const int id = mj_name2id(sim_->model, mjOBJ_BODY, body);
  const int mocap = id >= 0 ? sim_->model->body_mocapid[id] : -1;
  if (mocap < 0) throw std::logic_error(std::string("no mocap body ") + body);
  sim_->data->mocap_pos[3 * mocap] = x;
  sim_->data->mocap_pos[3 * mocap + 1] = y;
}

std::pair<double, double> Task::body_xy(const char* body) const {
  const int id = mj_name2id(sim_->model, mjOBJ_BODY, body);
  if (id < 0) throw std::logic_error(std::string("no body ") + body);
  return {sim_->data->xpos[3 * id], sim_->data->xpos[3 * id + 1]};
}

void Task::set_arm(double shoulder, double elbow) {
  sim_->data->qpos[sim_->shoulder_q] = shoulder;
  sim_->data->qpos[sim_->elbow_q] = elbow;
  sim_->data->ctrl[0] = shoulder;
  sim_->data->ctrl[1] = elbow;
}

void Task::set_joint(const char* joint, double value) {
  const int id = mj_name2id(sim_->model, mjOBJ_JOINT, joint);
  if (id < 0) throw std::logic_error(std::string("no joint ") + joint);
  sim_->data->qpos[sim_->model->jnt_qposadr[id]] = value;
}

}  // namespace nexus::sim
