// What the services report for `nexusctl` (status, tenants, jobs, usage, top, metrics): the
// model service's counters, per-tenant accounting, and every job. Torch-free: the reactor
// turns it into the StatusReply and the Prometheus exposition.
//
// It lives here, below both, because it is the one contract between the front door and the
// services: ipc's ServicePort returns it, master fills it, metrics renders it, and none of them
// includes another for it (tools/check_layers.py keeps ipc from including master).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "daemon/metrics/accounting.hpp"

namespace nexus::daemon {

// A job's life: queued (waiting for a running place), running, then one of the three ends. The
// one place it becomes a word is job_state_name (the wire, nexusctl, Prometheus).
enum class JobState { Queued, Running, Finished, Failed, Cancelled };

constexpr const char* job_state_name(JobState s) {
  switch (s) {
    case JobState::Queued: return "queued";
    case JobState::Running: return "running";
    case JobState::Finished: return "finished";
    case JobState::Failed: return "failed";
    case JobState::Cancelled: return "cancelled";
  }
  return "unknown";
}

constexpr bool job_state_ended(JobState s) {
  return s == JobState::Finished || s == JobState::Failed || s == JobState::Cancelled;
}

struct JobInfo {
  std::uint64_t id = 0;
  std::string tenant;
  std::string kind;          // sft, eval, rl
  JobState state = JobState::Queued;
  std::string error;         // why it failed
  std::int64_t done = 0, total = 0;  // steps, episodes or updates
  double loss = 0;           // sft: the last step's; rl: the policy loss
  double success_rate = 0;   // eval: over the episodes run; rl: recent training episodes
  double mean_return = 0;
  std::uint64_t version = 0; // eval: the version evaluated; rl: the latest published
  double seconds = 0;        // running time so far
  struct Rl {                // rl jobs only
    std::uint64_t first_version = 0, env_steps = 0, episodes = 0, records_dropped = 0, records_downweighted = 0;
    double value_loss = 0, entropy = 0, demo_loss = 0;
    std::uint64_t records_behind = 0;
    std::map<std::string, std::uint64_t> engine_steps;  // per rollout engine ("": nexusd)
    std::uint64_t interrupted_episodes = 0;             // cut short by a lost engine
    std::uint64_t split_minibatches = 0, observation_bytes = 0;  // adapter tenants (RlProgress)
  } rl;
};

struct ReplicaStatus {
  std::string device;
  std::uint64_t tenants = 0, groups = 0, samples = 0;
  // Each executor lane's time (model::ExecutorProfile), in order: turns, and within them backbone,
  // copies, heads, optimizer steps, waits for a slot lease, turns on a narrower team (beside other
  // lanes); `serves`: "both" (one lane serves both queues), "inference" or "training".
  struct Lane {
    std::string serves;
    double turns_s = 0, backbone_s = 0, copy_s = 0, heads_s = 0, optimizer_s = 0, lease_s = 0, narrow_s = 0;
  };
  std::vector<Lane> lanes;
};

// One Unix user's use of what the daemon keeps per user; names come from the reactor's registry,
// the rest from the model service. The bounds are the same for every user.
struct UserStatus {
  std::uint32_t uid = 0;
  std::uint64_t names = 0, slots = 0, checkpoints = 0, checkpoint_bytes = 0;
  std::uint64_t rl_observation_bytes = 0;  // kept by its adapter tenants' RL jobs (the job registry)
};
struct UserBounds {
  std::uint64_t names = 0, slots = 0, checkpoints = 0, checkpoint_bytes = 0, rl_observation_bytes = 0;
};

// The frozen-feature cache's counters (model::FeatureCacheStats, copied: this header is the
// reactor's and stays free of the model service's).
struct FeatureCacheStatus {
  std::uint64_t hits = 0, misses = 0, disk_hits = 0, inserts = 0, evictions = 0;
  std::uint64_t entries = 0, bytes = 0, disk_entries = 0, disk_bytes = 0, bound_bytes = 0;
};

struct EngineStatus {  // a rollout engine attached now (env::EngineView, without env's types)
  std::uint64_t id = 0;
  std::string name;
  std::uint32_t uid = 0;
  bool shared = false, draining = false;
  int capacity = 0, sessions = 0;
  std::uint64_t steps = 0;
  std::vector<std::string> tasks;
};

struct ServiceStatus {
  std::string backbone;                  // empty without a model service
  std::vector<ReplicaStatus> replicas;   // one per model.devices entry
  std::uint64_t groups = 0, requests = 0, samples = 0, input_bytes_packed = 0, rerun_groups = 0, split_steps = 0;
  std::uint64_t inference_queued = 0, training_queued = 0;
  std::uint64_t slots_resident = 0, slots_evicted = 0;
  std::uint64_t env_sessions = 0, dataset_bytes = 0;
  double longest_training_turn_s = 0, longest_shared_training_turn_s = 0;
  metrics::Snapshot usage;
  std::map<std::string, double> weights;  // configured tenants' fair-share weights
  std::map<std::string, std::string> adapters;  // tenants registered with an adapter: its description
  FeatureCacheStatus feature_cache;             // zeros when the cache is off
  std::vector<JobInfo> jobs;
  std::uint64_t health_restarts = 0;  // roles the Health Manager restarted
  std::vector<std::string> health;    // those roles: "name: N restart(s), last: reason"
  std::vector<UserStatus> users;      // slots and checkpoints per Unix user (names: the reactor adds them)
  UserBounds user_bounds;
  std::vector<EngineStatus> engines;
  std::string rollout_scaling;  // the last scaling decision of engines, and why ("": none yet)
};

}  // namespace nexus::daemon
