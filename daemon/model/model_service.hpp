// The model service: one resident, frozen backbone per device (a replica), the tenants' slots
// (head, optimizer, published versions), and per replica executor lanes (threads) that serve two
// queues in turns:
//   Inference Queue  predict and RL acting: first at every turn, group-batched by T and B.
//   Training Queue   SFT steps, RL update minibatches, slot operations: picked by weighted fair
//                    share (sched/fair_share.hpp), SFT steps group-batched too.
// A turn is one group pass (or one slot operation): inference never waits behind a queue of
// training work; with a training lane of its own (the default) not behind training turns either,
// only behind a turn of the same tenant (daemon/model/replica.hpp).
//
// Placement: a tenant is placed on one replica when it is first seen (attach, or its first
// request): the one its config pins it to, else the one with the fewest tenants placed. It stays
// there until its name is released (its slot, queues, fair-share history live there).
//
// Typed requests in, typed results out: nothing here knows wire messages, sockets, simulators
// or datasets (the Master translates). Inputs are read where the request's keepalive holds them
// (a tenant's arena, or a buffer the daemon filled); every number the backbone or a head
// consumes is checked on a private copy first.
//
// Thread safety: every member may be called from any thread. This header is torch-free on
// purpose: the master's and the reactor's translation units never include LibTorch.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <variant>
#include <vector>

#include "daemon/health/health_manager.hpp"
#include "daemon/metrics/accounting.hpp"
#include "daemon/model/backbone_config.hpp"
#include "daemon/model/slot_spec.hpp"
#include "daemon/model/user_quotas.hpp"
#include "daemon/sched/group_batcher.hpp"
#include "daemon/state/content_digest.hpp"

namespace nexus::model {

class PolicyPort;    // daemon/model/policy_port.hpp (LibTorch): what RL jobs use
class FeatureCache;  // daemon/model/feature_cache.hpp (LibTorch)
namespace detail {
class Replica;  // daemon/model/replica.hpp (LibTorch)
}

enum class DType : std::uint8_t { UInt8, Int32, Float32 };

// A tensor in memory that the request's keepalive holds; bounds were checked by the caller
// against that memory, dtype and shape are checked here against the tenant's slot.
struct HostTensor {
  const void* data = nullptr;
  DType dtype = DType::Float32;
  std::vector<std::int64_t> shape;
  int cuda_device = -1;  // >= 0: `data` is a device address there (a tenant's CUDA region)
  bool present() const { return data != nullptr; }
};

// images uint8 [n, views, H, W, 3], tokens int32 [n, T], mask uint8 [n, T], state float32
// [n, state_dim] (absent when the head has no state).
struct Observation {
  HostTensor images, tokens, mask, state;
};

namespace op {
struct Register {
  std::int64_t views = 1;
  HeadSpec head;
  OptimizerConfig optimizer;
  std::uint64_t seed = 0;
};
struct SftStep {
  Observation obs;
  HostTensor actions;  // float32 [n, chunk, action_dim]
  // Per sample, the dataset store's content key (empty: not cacheable, e.g. a tenant's own batch
  // from its arena, which it may rewrite): the frozen-feature cache's (feature_cache.hpp).
  std::vector<daemon::ContentDigest> sample_keys;
};
struct Predict {
  Observation obs;
  std::uint64_t version = 0;  // 0: the live head
};
// Features mode (heads in the tenant's process): the backbone's pooled features of the samples,
// float32 [n, dim], written at `out`: memory the request keeps alive and nexusd may write (the
// tenant's arena or a region it registered). Needs no slot; grouped with inference.
struct Features {
  Observation obs;  // state unused
  HostTensor out;
};
struct Publish {};
struct Digest {};
struct Backbone {};
struct Save { std::string tag; };
struct Load { std::string tag; };
}  // namespace op
using Op = std::variant<op::Register, op::SftStep, op::Predict, op::Features, op::Publish, op::Digest, op::Backbone,
                        op::Save, op::Load>;

enum class Fault { NotRegistered, BadRequest, BadBatch, UnknownVersion, OverBudget, NoCheckpoint, OverQuota, Internal };
struct Failure {
  Fault fault;
  std::string reason;
};
struct BackboneInfo {
  std::string name;
  std::int64_t image_size = 0, max_views = 0, max_tokens = 0, dim = 0;
};
struct Stepped {
  double loss = 0, grad_norm = 0;
  std::uint64_t step = 0;
};
struct Predicted {
  std::vector<float> actions;
  std::vector<std::int64_t> shape;
};
struct Published { std::uint64_t version = 0; };
struct Saved { std::uint64_t step = 0; };
struct Loaded { std::uint64_t step = 0; };
struct SlotDigest { std::uint64_t parameters = 0, optimizer = 0, step = 0, latest_version = 0; };
struct FeaturesWritten { std::uint32_t samples = 0, dim = 0; };
using Result = std::variant<Failure, BackboneInfo, Stepped, Predicted, Published, Saved, Loaded, SlotDigest,
                            FeaturesWritten>;

struct Request {
  std::string tenant;
  std::uint32_t uid = 0;                            // the tenant's owner: whose private files it reaches
  Op op;
  std::shared_ptr<const void> keepalive;           // holds the memory the HostTensors point into
  std::shared_ptr<const std::atomic<bool>> alive;  // false: cancelled (its tenant left); no answer
  sched::Clock::time_point arrival = sched::Clock::now();
  std::function<void(Result)> done;                 // called once on an executor lane's thread; must only queue
};

struct TenantPolicy {
  double weight = 1;   // fair share of training compute
  int priority = 0;    // higher classes are served first
  int replica = -1;    // pinned to devices[replica]; -1: placed on the least loaded
};

// The frozen-feature cache (feature_cache.hpp, docs/design/cache.md). bytes 0: off.
struct FeatureCacheConfig {
  std::uint64_t bytes = 512ull << 20;             // in host memory, in all
  std::uint64_t bytes_per_tenant = 256ull << 20;  // of those, inserted by one tenant
  std::uint64_t disk_bytes = 0;                   // the disk tier under dir (0: none)
  std::string dir;                                // <state_dir>/feature-cache when empty
  bool shared = false;                            // tenants on the same dataset content share entries
};

struct FeatureCacheStats {
  std::uint64_t hits = 0, misses = 0;  // sample lookups (a disk hit is a hit)
  std::uint64_t disk_hits = 0, inserts = 0, evictions = 0;
  std::uint64_t entries = 0, bytes = 0, disk_entries = 0, disk_bytes = 0;
};

struct ModelConfig {
  std::string backbone = "tiny";
  // One backbone replica per entry ("cpu", "cuda:N"); empty: every visible CUDA device, else
  // the CPU. An entry that cannot run here (no such CUDA device) is refused at start.
  std::vector<std::string> devices;
  std::string weights;                   // safetensors; empty: the seeded initialisation
  std::string precision = "float32";     // the backbone's arithmetic: float32, tf32, bf16 (precision.hpp)
  sched::BatchPolicy batch;              // B and T, both queues
  double group_window_s = 0.02;          // training: who may join the fair-share leader's group
  double min_training_share = 0.3;       // of the executor's recent time, while training waits
  // A training step that would take longer runs as micro-batches with gradient accumulation,
  // other tenants' turns between them (0: steps stay whole; so does deterministic mode).
  double max_training_turn_s = 0.020;
  // Executor lanes per replica (service.md, "Executor lanes"): threads that serve the Inference
  // Queue, and 0 to 4 that serve the Training Queue (0: the first inference lane serves both, a
  // turn at a time; several: WorkQueues' rules for turns side by side). Deterministic mode keeps
  // one lane for both (bitwise results need one fixed order of work).
  int inference_lanes = 2;
  int training_lanes = 2;
  int torch_threads = 0;                 // 0: all cores
  std::string state_dir = "/var/lib/nexus";  // checkpoints: <state_dir>/tenants/<uid>/<tenant>/ (0700)
  bool deterministic = false;            // one backbone pass per request (bitwise per-tenant results)
  double max_request_gflop = 2000;       // per-request cost budget (samples x FLOPs x steps)
  int versions_kept = 8;                 // published versions kept per tenant (plus pinned ones)
  std::chrono::seconds idle_evict{600};  // a detached tenant's slot is checkpointed and freed after this
  UserLimits users;                      // per Unix user: resident slots, checkpoint tags and bytes
  FeatureCacheConfig feature_cache;
  std::map<std::string, TenantPolicy> tenants;  // weights and priorities by tenant name
};

// Where an executor's (a lane's) time went, in seconds since the start: its turns, and within
// them the backbone's forward passes, packing the group's inputs and copying results out, the
// tenants' heads (forward and backward, RL update minibatches, slot operations), and their
// optimizer steps (clipping included). The rest of a turn (binding, the cache's lookups,
// scheduling) is turns - the four. Before a turn begins, it may wait for its slots' lease
// (another lane's turn holds one of its tenants: lanes, service.md): lease_s, not in turns_s.
// narrow_s: turns run on fewer threads than the cap, beside other lanes' (pass_threads.hpp). Idle: the rest.
struct ExecutorProfile {
  double turns_s = 0, backbone_s = 0, copy_s = 0, heads_s = 0, optimizer_s = 0, lease_s = 0, narrow_s = 0;
  std::string serves;  // the lane's queues: "both", "inference", "training"
};

struct ReplicaStats {
  std::string device;
  std::size_t tenants = 0;   // placed on it
  std::uint64_t groups = 0;  // its backbone passes
  std::uint64_t samples = 0;
  std::vector<ExecutorProfile> lanes;  // each executor lane's, in the replica's order
};

struct ModelStats {
  std::uint64_t groups = 0;            // backbone forward passes
  std::uint64_t grouped_requests = 0;  // sft/predict requests served by them
  std::uint64_t samples = 0;
  double backbone_seconds = 0;
  double head_seconds = 0;
  std::uint64_t input_bytes_packed = 0;  // arena bytes copied into group batches
  std::vector<ExecutorProfile> lanes;    // a replica's, per lane; ModelService::stats(): per replica in `replicas`
  std::uint64_t rerun_groups = 0;        // group passes that failed and were re-run member by member
  std::uint64_t split_steps = 0;         // SFT steps run as micro-batches (bounded training turns)
  std::size_t slots_resident = 0, slots_evicted = 0;
  std::size_t inference_queued = 0, training_queued = 0;
  double longest_training_turn_s = 0;    // what an inference request may wait behind, at most
  double longest_shared_training_turn_s = 0;  // the same, of turns run while another tenant was active
  std::vector<ReplicaStats> replicas;    // ModelService::stats(): one per device, in config order
  std::map<std::string, std::string> adapters;  // tenant -> its adapter, as registered or loaded
  FeatureCacheStats feature_cache;
};

class ModelService {
 public:
  // Loads one backbone per device (throws std::runtime_error, also for a device that cannot run)
  // and starts each replica's executor lanes, each a role of `health` (optional): "executor", or
  // "executor.N" with several replicas, and ".inferenceK" / ".training" / ".trainingK" after it for
  // its other lanes.
  ModelService(const ModelConfig& config, std::shared_ptr<metrics::Accounting> accounting,
               daemon::HealthManager* health = nullptr);
  // Stops the executors (the turn in progress finishes; queued work is answered "nexusd is
  // stopping") and checkpoints every slot that changed, so that a stop loses no finished step.
  ~ModelService();
  ModelService(const ModelService&) = delete;
  ModelService& operator=(const ModelService&) = delete;

  void submit(Request request);
  // Attached tenants are waited for when groups form; a detached one's slot is evicted after
  // the idle time (checkpointed; it comes back from the checkpoint at its next request). `uid`:
  // whose files the tenant's slot comes back from (after an eviction, or a restart).
  void tenant_attached(const std::string& tenant, std::uint32_t uid);
  void tenant_detached(const std::string& tenant);
  // The name was released (nexusctl tenant release): its slot is forgotten.
  void tenant_released(const std::string& tenant);
  // Versions an evaluation reads stay published while pinned (counted: pin twice, unpin twice).
  void pin_version(const std::string& tenant, std::uint64_t version);
  void unpin_version(const std::string& tenant, std::uint64_t version);

  // RL jobs' access to a tenant's slot: acting (Inference Queue) and update minibatches
  // (Training Queue). The port must not outlive the service.
  std::unique_ptr<PolicyPort> policy_port(const std::string& tenant);

  ModelStats stats() const;
  std::vector<UserUsage> user_usage() const;  // against config.users
  const BackboneConfig& backbone() const;  // every replica's is the same

 private:
  detail::Replica& replica_for(const std::string& tenant);  // places on first sight

  UserQuotas quotas_;  // shared by the replicas: before them, so it outlives them
  std::shared_ptr<FeatureCache> feature_cache_;  // shared by the replicas; null when off
  std::vector<std::unique_ptr<detail::Replica>> replicas_;
  mutable std::mutex placement_mu_;
  std::map<std::string, std::size_t> placement_;  // GUARDED_BY(placement_mu_): tenant -> replica
  std::map<std::string, int> pinned_;             // tenant -> replica, from config
};

}  // namespace nexus::model
