// One simulator episode stream owned by one tenant: built in (a MuJoCo task in this process) or
// external (a simulator in its own process, see external_session.hpp). The Environment Service
// drives sessions; each is used by one thread at a time.
#pragma once
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

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

// The process serving a session (a rollout engine) died, hung past its deadline or answered
// out of protocol: the session itself did nothing wrong and may go on elsewhere after a reset.
struct EngineLost : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Sessions one simulator serves together (an external simulator's connection, protocol 3): the
// Environment Service hands the sessions of a call that share a batch to it as one exchange.
class SessionBatch {
 public:
  virtual ~SessionBatch() = default;
  struct Member {         // one named session's part of an exchange
    StepOutcome outcome;
    std::string refused;  // set: the caller's mistake (BadInput); the session is fine
    std::string broke;    // set: the simulator says this session broke
  };
  // Resets (seeds: one per member) or steps (actions: action_dim per member, row-major) the
  // members at `indices` (their places in the batch) together; each member's observation is
  // then read through its session's observe(). Throws when the exchange itself fails (the
  // simulator is gone, hung or out of step): then every member failed.
  virtual std::vector<Member> run(std::span<const int> indices, std::span<const std::uint64_t> seeds,
                                  std::span<const float> actions) = 0;
};

class EnvSession {
 public:
  virtual ~EnvSession() = default;
  // The batch this session is served in, and its place there; nullptr: stepped on its own.
  virtual SessionBatch* batch() { return nullptr; }
  virtual int batch_index() const { return 0; }
  virtual const SessionSpec& spec() const = 0;
  virtual void reset(std::uint64_t seed) = 0;
  virtual StepOutcome step(std::span<const float> action) = 0;
  // The current observation: rgb gets image_size^2 * 3 bytes, state gets state_dim floats.
  virtual void observe(std::uint8_t* rgb, float* state) = 0;
  virtual std::string instruction() const = 0;
  // A session served by another process may step in two halves, so that one call's exchanges
  // with several processes overlap: begin_step() sends the step (false: this session cannot,
  // use step()), collect_step() waits for it and returns or throws as step() would. The caller
  // holds the session between them.
  virtual bool begin_step(std::span<const float> action) { return false; }
  virtual StepOutcome collect_step() { throw std::logic_error("no step was begun"); }
  // Where it runs: a rollout engine's name, or "" for nexusd itself.
  virtual std::string placement() const { return {}; }
  // Why the last step was cut short (its engine was lost), once; "" when it was not.
  virtual std::string take_interruption() { return {}; }
};

}  // namespace nexus::env
