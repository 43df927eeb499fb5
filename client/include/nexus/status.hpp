// Daemon status as nexusctl shows it; any local user may ask.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "nexus/env.hpp"

namespace nexus {

struct TenantStatus {
  std::string name;
  std::uint32_t uid = 0;
  std::int32_t pid = 0;
  std::uint64_t session_id = 0;
  std::uint64_t segment_bytes = 0;
  std::uint64_t requests = 0;
  std::uint64_t errors = 0;
  double attached_s = 0;
};

// What a tenant used, from the daemon's accounting (over the span the query asked for).
struct TenantUsage {
  std::string name;
  double train_s = 0, infer_s = 0;  // compute-seconds: shared backbone time by samples + own head time
  std::uint64_t samples = 0, steps = 0, predictions = 0, env_steps = 0;
  double train_wait_p50_us = 0, train_wait_p99_us = 0, infer_wait_p50_us = 0, infer_wait_p99_us = 0;
  double weight = 1;
  bool attached = false;
  std::string adapter;  // the adapter it registered ("rank 16, alpha 16, ..."); empty: the head alone
  double compute_s() const { return train_s + infer_s; }
};

struct ReplicaStatus {  // one backbone replica ([model] devices)
  std::string device;
  std::uint32_t tenants = 0;   // placed on it
  std::uint64_t groups = 0, samples = 0;
};

// One Unix user's use of what nexusd keeps per user, each against its bound ([daemon] and [model]
// max_*_per_uid, [jobs] rl_observation_mib_per_uid).
struct UserUsage {
  std::uint32_t uid = 0;
  std::uint64_t names = 0, names_max = 0;              // tenant names bound to the user
  std::uint64_t slots = 0, slots_max = 0;              // its tenants' slots resident in memory
  std::uint64_t checkpoints = 0, checkpoints_max = 0;  // checkpoint tags
  std::uint64_t checkpoint_bytes = 0, checkpoint_bytes_max = 0;
  std::uint64_t rl_observation_bytes = 0, rl_observation_bytes_max = 0;  // adapter tenants' RL jobs keep in memory
};

// A rollout engine (nexus-rollout) attached to nexusd.
struct EngineStatus {
  std::uint64_t id = 0;
  std::string name;
  std::uint32_t uid = 0;
  bool shared = false;    // serves every tenant; otherwise only its own user's tenants
  bool draining = false;  // takes no new sessions; leaves once its sessions moved off
  std::int32_t capacity = 0, sessions = 0;
  std::uint64_t steps = 0;
  std::vector<std::string> tasks;
};

struct DaemonStatus {
  std::string daemon_version;
  std::uint32_t protocol_version = 0;
  std::int32_t pid = 0;
  double uptime_s = 0;
  std::vector<TenantStatus> tenants;
  std::uint64_t message_bytes_copied = 0;
  std::uint64_t tensor_bytes_copied = 0;
  std::string backbone;
  std::vector<ReplicaStatus> replicas;  // one per device the backbone is resident on
  std::vector<EngineStatus> engines;    // rollout engines attached now
  std::string rollout_scaling;          // the last decision to start or drain engines, and why
  std::uint64_t model_groups = 0;
  std::uint64_t model_requests = 0;
  std::uint64_t model_samples = 0;
  std::vector<TenantUsage> usage;      // every tenant with usage, attached or not
  double usage_wall_s = 0;             // the span usage covers
  double training_busy_s = 0, inference_busy_s = 0, environment_busy_s = 0;
  std::vector<JobInfo> jobs;
  std::uint64_t inference_queued = 0, training_queued = 0;
  std::uint64_t slots_resident = 0, slots_evicted = 0, env_sessions = 0, dataset_bytes = 0, rerun_groups = 0;
  std::uint64_t split_steps = 0;  // SFT steps run as micro-batches (bounded training turns)
  double longest_training_turn_s = 0;  // what an inference request may wait behind, at most
  // The longest turn run while another tenant was active: what a tenant beside a big one waits
  // behind ([model] max_training_turn_ms splits steps then; alone, a step stays whole).
  double longest_shared_training_turn_s = 0;
  std::uint64_t health_restarts = 0;    // roles the daemon's Health Manager restarted
  std::vector<std::string> health;      // which, how often, the last reason
  std::vector<UserUsage> users;         // every Unix user with names, slots or checkpoints
};

// Throws nexus::Error (ConnectFailed, DaemonGone, Timeout, UnsupportedVersion, BadMessage).
// usage_since_s > 0: usage over the last that many seconds (else since the daemon started).
DaemonStatus query_status(const std::string& socket_path,
                          std::chrono::milliseconds timeout = std::chrono::seconds(5), double usage_since_s = 0);
// The daemon's metrics in the Prometheus text exposition format.
std::string query_metrics(const std::string& socket_path, std::chrono::milliseconds timeout = std::chrono::seconds(5));
// Unbinds a tenant name from its Unix user (you must be root or that user; nobody may be
// attached as it). Throws PermissionDenied or AlreadyAttached.
void release_tenant(const std::string& socket_path, const std::string& tenant,
                    std::chrono::milliseconds timeout = std::chrono::seconds(5));
// Stops nexusd cleanly (you must be root or nexusd's user): passes in progress finish, every
// changed slot is checkpointed, nexusd exits. Returns the tenants attached when it began.
// Throws PermissionDenied.
std::uint32_t drain_daemon(const std::string& socket_path, std::chrono::milliseconds timeout = std::chrono::seconds(5));
// Sets how many rollout engines nexusd runs (`what` "rollout"; root or nexusd's user): drains
// the least busy above `count`, starts its own below it. Throws PermissionDenied, BadMessage.
struct ScaleResult {
  int before = 0, after = 0;
  std::string message;  // what nexusd did
};
ScaleResult scale_daemon(const std::string& socket_path, const std::string& what, int count,
                         std::chrono::milliseconds timeout = std::chrono::seconds(5));
// Cancels a job (you must be root or the job's owner); its state after. Throws UnknownJob.
std::string cancel_job(const std::string& socket_path, std::uint64_t job,
                       std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace nexus
