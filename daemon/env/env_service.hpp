// The Environment Service: simulator sessions that tenants (or their RL jobs) open, reset and
// step, several per call, on a worker pool so that stepping and rendering run in parallel with
// each other and with the model service's backbone passes.
//
// Ownership: a session belongs to the tenant that opened it. Another tenant's session ids are
// indistinguishable from ids that never existed (UnknownSession), so one tenant cannot probe or
// touch another's sessions.
// Faults: a session that throws (other than for the caller's bad input) is marked failed with
// the reason; every later use of it reports that reason. The tenant closes it and opens a new
// one; nothing else is affected.
//
// Thread safety: every member may be called from any thread. A session is stepped by one thread
// at a time (its own mutex); calls on disjoint sessions run concurrently, except that sessions
// sharing a SessionBatch (an external connection) take turns on it. A call's sessions of one
// batch are locked in address order, so two calls never wait on each other.
#pragma once
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "daemon/env/env_session.hpp"
#include "daemon/env/worker_pool.hpp"
#include "daemon/metrics/accounting.hpp"

namespace nexus::env {

struct EnvLimits {
  int workers = 2;                   // pool threads (the caller of run() works too)
  int max_sessions_per_tenant = 256;
  int max_sessions = 1024;           // all tenants together (each holds a simulator and a renderer)
  int max_steps = 10000;             // per-episode limit a tenant may ask for
};

// A request refused as a whole, before any session ran.
class EnvError : public std::runtime_error {
 public:
  enum class Kind { BadRequest, UnknownSession, TooManySessions };  // the last: per tenant or in all
  EnvError(Kind kind, const std::string& reason) : std::runtime_error(reason), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// One session's part of a run: its outcome, or why it has none.
struct SessionResult {
  StepOutcome outcome;
  std::string instruction;
  std::string error;   // empty: ok
  bool failed = false; // error is the session's fault: it is now failed for good
  std::string engine;       // the rollout engine that served it ("": nexusd itself)
  std::string interrupted;  // set: its engine was lost; the episode was truncated (done, truncated)
};

// Makes the `count` sessions of one open of a task (built-in or external); throws BadInput for
// unknown names. Sessions made together may share a SessionBatch (one external connection).
// `owner`: the opening tenant's Unix user, when it is attached (rollout engines of that user
// may serve it).
using SessionFactory = std::function<std::vector<std::unique_ptr<EnvSession>>(
    const std::string& task, int image_size, int max_steps, int count, std::optional<uid_t> owner)>;

class EnvService {
 public:
  // accounting (optional): environment steps per tenant and the service's busy time.
  // health (optional): the worker pool's threads are roles, restarted if their loop dies;
  explicit EnvService(EnvLimits limits = {}, SessionFactory factory = {}, metrics::Accounting* accounting = nullptr,
                      daemon::HealthManager* health = nullptr);
  ~EnvService();

  struct Opened {
    std::vector<std::uint64_t> ids;
    SessionSpec spec;
  };
  // Opens `count` sessions of one task. Throws EnvError.
  Opened open(const std::string& tenant, const std::string& task, int count, int image_size, int max_steps);

  // Resets (seeds: one per session) or steps (actions: action_dim per session, row-major) the
  // sessions, in parallel, then writes each one's observation: rgb to images + i * image bytes,
  // proprio to state + i * state_dim. The sessions must share image_size and state_dim.
  // Throws EnvError for a malformed request (nothing ran); per-session problems are in the results.
  std::vector<SessionResult> reset(const std::string& tenant, std::span<const std::uint64_t> ids,
                                   std::span<const std::uint64_t> seeds, std::uint8_t* images, float* state);
  std::vector<SessionResult> step(const std::string& tenant, std::span<const std::uint64_t> ids,
                                  std::span<const float> actions, std::uint8_t* images, float* state);

  // The sessions' shared spec (throws EnvError if they do not share one, or are not this tenant's).
  SessionSpec spec_of(const std::string& tenant, std::span<const std::uint64_t> ids) const;

  // Closes the tenant's sessions among ids (others' ids are ignored); returns how many closed.
  std::size_t close(const std::string& tenant, std::span<const std::uint64_t> ids);
  void tenant_attached(const std::string& tenant, uid_t uid);  // whose engines may serve it
  void tenant_detached(const std::string& tenant);  // closes all of the tenant's sessions
  std::size_t sessions() const;

 private:
  struct Session;
  std::vector<std::shared_ptr<Session>> lookup(const std::string& tenant, std::span<const std::uint64_t> ids,
                                               SessionSpec* spec) const;
  std::vector<SessionResult> run(const std::string& tenant, std::span<const std::uint64_t> ids,
                                 std::span<const std::uint64_t> seeds, std::span<const float> actions,
                                 std::uint8_t* images, float* state);
  // The members of one call that share a batch (`at`: their places in the call), in one exchange.
  struct Call;
  void run_batch(const Call& call, const std::vector<std::size_t>& at) const;
  // A step's first phase: locks all of the call's single sessions into `held`, sends the steps
  // of those that step in halves (EnvSession::begin_step), marks every session it dealt with in
  // `done`, and returns those begun (their outcomes are collected at the call's end).
  std::vector<std::size_t> begin_steps(const Call& call, const std::vector<std::vector<std::size_t>>& items,
                                       std::vector<char>& done, std::vector<std::unique_lock<std::mutex>>& held) const;

  const EnvLimits limits_;
  SessionFactory factory_;
  metrics::Accounting* const accounting_;
  WorkerPool pool_;
  mutable std::mutex mu_;
  std::map<std::uint64_t, std::shared_ptr<Session>> sessions_;  // GUARDED_BY(mu_)
  std::uint64_t next_id_ = 1;                                    // GUARDED_BY(mu_)
  std::map<std::string, uid_t> owners_;                          // GUARDED_BY(mu_): attached tenants
};

}  // namespace nexus::env
