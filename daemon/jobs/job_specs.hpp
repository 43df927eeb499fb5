// What a job is asked to do and the bounds it runs under, as the job registry takes them
// (job_registry.hpp), and why a start is refused. Master decodes the wire into these (jobs never
// see FlatBuffers).
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace nexus::daemon {

struct JobLimits {
  int max_running_per_tenant = 2;
  int max_running = 16;
  std::size_t finished_kept = 256;  // finished jobs kept for `nexusctl jobs`
  // An SFT or evaluation job's loop beats every step; one silent for this long is restarted
  // (SFT continues from its last finished step, an evaluation starts over).
  std::chrono::milliseconds heartbeat{60000};
  int max_per_tenant = 32;  // queued or running (RL jobs too)
  int max_jobs = 1024;      // queued or running, every tenant's
  // What adapter tenants' RL jobs of one Unix user may keep of observations at once
  // (observation_ledger.hpp; QuotaExceeded beyond).
  std::uint64_t observation_bytes_per_uid = 1ull << 30;
};

// What a job is asked to do, as master decoded it from the wire (JobSpec, RlStartRequest): jobs
// never see FlatBuffers. JobRegistry::start() and start_rl() check the ranges.
struct SftJobSpec {
  std::string dataset;  // a dataset this tenant loaded
  int steps = 100, batch = 32, chunk = 1;
};
struct EvalJobSpec {
  std::string task;
  std::uint64_t version = 0;  // 0: the latest published
  int episodes = 50;
  std::uint64_t seed = 0;     // episode i is reset with seed + i
};
struct JobRequest {
  std::string kind;  // sft or eval
  SftJobSpec sft;
  EvalJobSpec eval;
};
struct RlJobSpec {  // nexus.fbs's RlStartRequest says what each means
  std::string algorithm, task;
  int sessions = 16, horizon = 32, group_size = 8, iterations = 50, max_steps = 0;
  std::uint64_t seed = 1;
  int epochs = 4, minibatch = 256;
  double clip = 0.2, gamma = 0.99, lambda = 0.95, entropy = 0, value_lr = 1e-3;
  int max_staleness = 2;
  bool downweight_stale = false;
  int queue_capacity = 2;
  std::string demo_dataset;
  double demo_weight = 0;
  int demo_batch = 128;
  bool synchronous = false;
};

// Why a job cannot start or be found; master gives each its wire ErrorCode.
enum class JobRefusal {
  BadSpec,         // out of range or unknown kind
  OverBound,       // the tenant's or nexusd's bound on jobs
  OverQuota,       // the user's bound on what its jobs keep (observation_ledger.hpp)
  CannotStart,     // an RL job of the tenant runs, or its set-up failed
  UnknownJob,      // no such job of the requester's
  Stopping,        // nexusd is stopping
};
struct JobRefused {
  JobRefusal code;
  std::string reason;
};

}  // namespace nexus::daemon
