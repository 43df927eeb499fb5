// Built-in simulated tasks on MuJoCo, rendered offscreen through OSMesa: a planar two-link arm
// on a table seen from above.
//   reach  "reach the red ball" among three coloured balls: the fingertip within 3 cm of it.
//   push   "push the red block onto the green goal": the block's centre within 3 cm of the goal.
// Actions are 2-D fingertip velocity commands in [-1, 1] (1 = 1.5 cm per step), turned into
// joint targets by closed-form inverse kinematics; the arm is driven kinematically. Proprio
// state (4): the fingertip's (x, y) in units of the arm's 25 cm reach, and the cosine and sine
// of the elbow angle. Each task has a reward, success, an episode limit, a seeded reset and a
// scripted expert. The MJCF models are sim/assets/*.xml (compiled in).
//
// A Task is one episode stream: not thread-safe, use it from one thread at a time (its renderer
// makes its OSMesa context current on the calling thread for each render).
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace nexus::sim {

struct TaskError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

struct TaskOptions {
  int image_size = 64;  // renders are image_size x image_size RGB
  int max_steps = 0;    // 0: the task's default episode limit
};

struct StepResult {
  float reward = 0;
  bool done = false;       // success, or the episode limit reached
  bool success = false;    // the task's end: terminated
  bool truncated = false;  // the episode limit ended it first (the state is not terminal)
};

class Task {
 public:
  static constexpr int kActionDim = 2;
  static constexpr int kStateDim = 4;
  static constexpr double kSuccessRadius = 0.03;  // both tasks: within 3 cm of the goal

  virtual ~Task();
  const std::string& name() const { return name_; }
  // A new episode, laid out from `seed` alone (same seed, same episode).
  void reset(std::uint64_t seed);
  // Throws TaskError on a wrong-sized or non-finite action, or a step after done.
  StepResult step(std::span<const float> action);
  // The scripted expert's action for the current state.
  virtual std::vector<float> expert_action() const = 0;

  void render(std::uint8_t* rgb);  // image_size * image_size * 3 bytes, row 0 at the top
  std::vector<std::uint8_t> render();
  std::vector<float> proprio() const;
  std::vector<float> sim_state() const;  // qpos, qvel, mocap positions
  const std::string& instruction() const { return instruction_; }
  int steps() const { return steps_; }
  int max_steps() const { return max_steps_; }
  int image_size() const { return image_size_; }
  bool done() const { return done_; }
  bool success() const { return success_; }
  // Where the fingertip and the mocap bodies (reach: its three balls, in MJCF order) are, in
  // metres: for scripted baselines (sim/baselines.hpp), never part of an observation.
  std::pair<double, double> fingertip() const { return tip(); }
  std::vector<std::pair<double, double>> mocap_xy() const;

  struct Sim;  // MuJoCo model, data and renderer (task.cpp)

 protected:
  Task(std::string name, const char* mjcf, const TaskOptions& options, int default_max_steps, int substeps);
  // Places the episode's objects and sets instruction_ (rng seeded by reset()).
  virtual void place(std::uint64_t seed) = 0;
  // Reward and success after a step (and once after reset, to set the starting distance).
  virtual StepResult evaluate() = 0;
  // The tasks' shared reward: 10 x this step's progress in `distance` (metres to the goal), +1
  // on success (within 3 cm).
  StepResult progress(double distance);

  // Fingertip position (x, y) and helpers for subclasses.
  std::pair<double, double> tip() const;
  void set_mocap(const char* body, double x, double y);
  std::pair<double, double> body_xy(const char* body) const;
  void set_arm(double shoulder, double elbow);
  void set_joint(const char* joint, double value);

  std::unique_ptr<Sim> sim_;
  std::string instruction_;

 private:
  std::string name_;
  int image_size_, max_steps_, substeps_;
  int steps_ = 0;
  bool done_ = false, success_ = false;
  double last_distance_ = -1;  // before the first evaluate() of an episode: none
};

// "reach" or "push"; throws TaskError for other names.
std::unique_ptr<Task> make_task(const std::string& name, const TaskOptions& options = {});
const std::vector<std::string>& task_names();

}  // namespace nexus::sim
