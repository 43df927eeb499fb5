// One simulator episode stream owned by one tenant: built in (a MuJoCo task in this process) or
// external (a simulator in its own process, see external_env.hpp). The Environment Service
// drives sessions; each is used by one thread at a time.
#pragma once
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>

namespace nexus::env {

struct SessionSpec {
  int image_size = 0;  // observations: uint8 [image_size, image_size, 3] ...
  int state_dim = 0;   // ... and float32 [state_dim] proprio
  int action_dim = 0;  // actions: float32 [action_dim]
  int max_steps = 0;   // episode limit
};

// done = terminated (the task's end) or truncated (the episode limit). A truncated episode's last
// state is not terminal: learners bootstrap from its value (gymnasium's terminated/truncated).
struct StepOutcome {
  float reward = 0;
  bool done = false;
  bool success = false;
  bool truncated = false;
};

// The caller's mistake (wrong action size, non-finite action, a step after done): the session
// is fine and stays usable. Any other exception from a session is a fault of the session.
struct BadInput : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

class EnvSession {
 public:
  virtual ~EnvSession() = default;
  virtual const SessionSpec& spec() const = 0;
  virtual void reset(std::uint64_t seed) = 0;
  virtual StepOutcome step(std::span<const float> action) = 0;
  // The current observation: rgb gets image_size^2 * 3 bytes, state gets state_dim floats.
  virtual void observe(std::uint8_t* rgb, float* state) = 0;
  virtual std::string instruction() const = 0;
};

}  // namespace nexus::env
