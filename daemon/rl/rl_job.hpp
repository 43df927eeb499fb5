// An RL job: a tenant's intent "PPO (or GRPO) on task X" turned into two concurrent loops that
// share nothing but a Training Queue.
//   producer  steps the job's Environment Service sessions; each step asks the policy port for
//             actions of the latest published version (grouped with other tenants' requests in
//             the model service) and records them with the step's backbone features.
//   actor     takes records off the queue, applies max_staleness, updates the tenant's head
//             (and its value head) on the stored features, and publishes a new version.
// By default the two overlap: the producer goes on acting with the version it has while the
// actor updates, so records may be a version or two behind and which version acted on which
// step depends on timing. A synchronous job (RlConfig::synchronous) has the producer wait after
// each record until the actor has used it: every record is acted by the latest version, and a
// job's course depends on its seed alone (given the machine's arithmetic), not on thread timing.
// Both loops are Health Manager roles (when the job has one): a loop that throws (a failed env
// session, a model error) or, for the rollout loop, goes silent past its heartbeat (a hung
// simulator call) is restarted in place with back-off: a restarted rollout loop starts new
// episodes in every session, a restarted update loop goes on with the next record. A loop the
// manager gives up on ends the job as failed with its last error; without a manager the first
// failure does. The tenant's slot keeps whatever versions were published.
//
// Thread safety: progress() and stop() from any thread.
#pragma once
#include <torch/torch.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "daemon/env/env_service.hpp"
#include "daemon/health/health_manager.hpp"
#include "daemon/model/policy_port.hpp"
#include "daemon/model/tenant_slot.hpp"
#include "daemon/rl/policy_update.hpp"
#include "daemon/rl/rollout.hpp"
#include "daemon/rl/training_queue.hpp"

namespace nexus::rl {

// What an RL job needs of the model service (daemon/model/policy_port.hpp).
using PolicyPort = model::PolicyPort;

// The most steps one rollout record may hold (PPO: sessions x horizon; GRPO: sessions x the
// episode limit): bounds a job's memory in the daemon.
inline constexpr long kMaxRecordSteps = 65536;
// The most demonstration steps drawn per update (one act, like a step of 256 sessions).
inline constexpr int kMaxDemoBatch = 256;
// An adapter tenant's records keep their observations (Rollout::images): the most bytes of them
// one job may hold at once (every record it can have in flight).
inline constexpr std::uint64_t kMaxHeldObservationBytes = 512ull << 20;

// Demonstrations for the behaviour-cloning term (policy_update.hpp, DemoTerm), n steps at a time
// in the layouts of PolicyPort::act (images uint8 [n, 1, H, W, 3], tokens int32 and mask uint8
// [n, T], state float [n, S]) with the demonstrator's actions float [n, 1, A].
struct DemoBatch {
  torch::Tensor images, tokens, mask, state, actions;
};
struct DemoConfig {
  std::function<DemoBatch(std::int64_t n)> sample;  // empty (or weight 0): no term
  double weight = 0;                                // 0..100
  int batch = 128;  // 1..kMaxDemoBatch steps drawn (one backbone pass) for each update
};

struct RlConfig {
  std::string algorithm = "ppo";  // ppo or grpo
  std::string task = "reach";
  int sessions = 16;              // GRPO: a multiple of group_size
  int horizon = 32;               // PPO: steps per record
  int group_size = 8;             // GRPO: episodes per start state
  int iterations = 50;            // actor updates; then the job is done
  int max_steps = 0;              // episode limit (0: the task's)
  std::uint64_t seed = 1;
  int queue_capacity = 2;
  // Collect, then update, then collect with the new version (on-policy, staleness 0, and which
  // version acts when no longer depends on timing); the price is the overlap of acting with
  // updating.
  bool synchronous = false;
  Staleness staleness;
  UpdateConfig update;
  DemoConfig demos;
  // Called once at start, before the loops run and anything is published, with the bytes of
  // observations an adapter tenant's records may hold at once; it throws to refuse the job (the
  // user's bound, daemon/jobs/observation_ledger.hpp). Head-only jobs keep none and never call it.
  std::function<void(std::uint64_t)> hold_observations;
};

// An RL run's life: starting, running, then done (all iterations), stopped (cancelled or its
// tenant left) or failed. daemon/jobs turns it into a JobState in one place (rl_progress).
enum class RunState { Starting, Running, Done, Failed, Stopped };

struct RlProgress {
  RunState state = RunState::Starting;
  std::string error;
  int iterations = 0;
  std::uint64_t version = 0;       // latest published
  std::uint64_t first_version = 0; // the starting policy
  std::uint64_t env_steps = 0, episodes = 0;
  // PPO: episodes the limit cut short, and those whose true last observation the record kept
  // for the value bootstrap (equal unless the job stopped between the two).
  std::uint64_t truncated_episodes = 0, truncations_kept = 0;
  double recent_success = 0, recent_return = 0;  // over the last 100 training episodes
  double policy_loss = 0, value_loss = 0, entropy = 0;
  double demo_loss = 0;            // the behaviour-cloning term (before its weight); 0 without
  std::uint64_t records_dropped = 0, records_downweighted = 0;
  // Records an older version than the latest had acted on (some of) when their update began: 0
  // in a synchronous job.
  std::uint64_t records_behind = 0;
  // Where its steps ran: steps per rollout engine ("": nexusd itself), and episodes cut short
  // because their engine was lost (counted among the truncated).
  std::map<std::string, std::uint64_t> engine_steps;
  std::uint64_t interrupted_episodes = 0;
  // Adapter tenants: update minibatches run as parts in several training turns (UpdateTurns),
  // and the bytes of observations its records may hold at once (the bound checked at start).
  std::uint64_t split_minibatches = 0, observation_bytes = 0;
  double seconds = 0;
};

// Who restarts the job's loops. Roles: <name>-rollout (beats every env step; waiting on the model
// service does not count) and <name>-update (failure reports only).
struct RlSupervision {
  daemon::HealthManager* health = nullptr;  // none: a loop's first failure fails the job
  std::string name = "rl";
  std::chrono::milliseconds heartbeat{60000};
};

class RlJob {
 public:
  // Opens the sessions and publishes the starting version; throws std::runtime_error (nothing
  // left behind) for a bad config.
  RlJob(std::string tenant, RlConfig config, PolicyPort& policy, env::EnvService& envs, RlSupervision supervision = {});
  ~RlJob();  // stops and joins both loops, closes the sessions
  RlJob(const RlJob&) = delete;
  RlJob& operator=(const RlJob&) = delete;

  RlProgress progress() const;
  bool finished() const;
  void stop();

 private:
  // Each loop runs as one generation of its role; it leaves when a restart supersedes it.
  void produce(std::uint64_t generation);
  void produce_ppo(std::uint64_t generation);
  void produce_grpo(std::uint64_t generation);
  void consume(std::uint64_t generation);
  void supervise(const RlSupervision& s);
  // A loop's failure: reported to its role (restarted), or the job's end without a manager.
  void loop_failed(daemon::Role* role, std::uint64_t generation, const std::string& why);
  void fail(const std::string& why);
  void episode_ended(bool success, float episode_return, bool truncated = false);
  void record_used();  // the actor is done with a record (published or dropped)
  bool uses_demos() const { return config_.demos.sample && config_.demos.weight > 0; }
  // n sampled steps must fit the backbone (one view) and, once the sessions are open, the task.
  void check_demos(const DemoBatch& d, std::int64_t n) const;
  DemoTerm draw_demos();     // one update's demonstration steps, with their features
  struct Observer;
  // Queues a record; a synchronous job then waits until the actor has used it. False: the job
  // is stopping.
  bool hand_over(Rollout&& record, Observer& obs);

  const std::string tenant_;
  const RlConfig config_;
  PolicyPort& policy_;
  env::EnvService& envs_;
  std::vector<std::uint64_t> sessions_;
  env::SessionSpec spec_;
  // An adapter tenant's job: the observation bytes each record keeps (0: a head-only tenant's,
  // whose records keep features only). Set once at start.
  std::uint64_t observation_bytes_ = 0;
  bool keeps_observations() const { return observation_bytes_ > 0; }
  TrainingQueue<Rollout> queue_;
  ValueHead value_{nullptr};  // touched inside with_slot only
  std::unique_ptr<torch::optim::AdamW> value_opt_;
  at::Generator shuffle_;     // minibatch order; actor thread only
  sched::TurnSizer update_sizer_;  // what an adapted update part costs (UpdateTurns); actor thread only

  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> next_seed_;  // episode seeds; a restarted rollout loop goes on from here
  daemon::HealthManager* health_ = nullptr;
  std::shared_ptr<daemon::Role> rollout_role_, update_role_;
  mutable std::mutex mu_;
  RlProgress progress_;               // GUARDED_BY(mu_)
  // Records the producer queued, the actor took off the queue, and the actor has finished with
  // (a synchronous producer waits for the last to reach its record; a restarted actor counts the
  // record its predecessor took as finished).
  std::uint64_t records_queued_ = 0, records_taken_ = 0, records_used_ = 0;  // GUARDED_BY(mu_)
  std::condition_variable record_used_cv_;
  std::deque<std::pair<bool, float>> window_;   // GUARDED_BY(mu_): the last 100 episodes
  std::chrono::steady_clock::time_point started_;
  std::mutex threads_mu_;
  std::thread producer_, actor_;       // GUARDED_BY(threads_mu_): the current loops
  std::vector<std::thread> retired_;   // GUARDED_BY(threads_mu_): loops a restart superseded
};

}  // namespace nexus::rl
