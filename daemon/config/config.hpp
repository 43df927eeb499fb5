// nexusd configuration: a TOML file (systemd/nexusd.toml documents every key) overridden by
// command-line flags. Every bound has a default here and a typed error when it is reached.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "schema/protocol.hpp"

namespace nexus::daemon {

struct TenantWeight {  // [tenants.NAME]
  double weight = 1;   // fair share of training compute
  int priority = 0;    // higher classes are served first
  int replica = -1;    // pinned to model.devices[replica]; -1: the least loaded replica
};

struct DaemonConfig {
  // [daemon]
  std::string socket_path = schema::kDefaultSocketPath;
  // Who may connect: the socket file's mode and group (members attach; tenant names are then
  // decided per connection by SO_PEERCRED). The group is left as is if it does not exist.
  std::uint32_t socket_mode = 0660;
  std::string socket_group = "nexus";
  std::uint32_t max_tenants = 64;
  std::uint32_t max_tenants_per_uid = 16;    // tenants one Unix user may have attached at once
  std::uint32_t max_names_per_uid = 1024;    // tenant names bound to one Unix user (attached or not)
  std::uint32_t max_names = 16384;           // tenant names bound in all
  // Threads for the transport's slow, tenant-sized work (digests), off the reactor; each tenant
  // has at most one running at a time there.
  std::uint32_t io_workers = 2;
  std::uint64_t max_segment_bytes = 1ull << 30;  // per tenant: rings + both arenas; also each region's cap
  // [ipc] allow_device_regions: tenants may register memory of their own (regions) and name
  // tensors in it by offset, or have features written into it (docs/design/gpu.md).
  bool allow_device_regions = false;
  std::uint32_t max_pending_connections = 256;   // accepted, not yet attached (Busy beyond)
  std::uint32_t max_pending_per_uid = 64;        // ... of one Unix user
  std::chrono::milliseconds handshake_timeout{5000};  // a connection that has not attached by then is closed
  std::uint32_t max_in_flight = 8;           // a tenant's requests handed to the services, unanswered
  std::uint64_t request_bytes_per_tenant = 64ull << 20;  // what those hold in memory
  std::chrono::microseconds spin{100};       // reactor busy-polls this long after the last work
  std::string log_level = "info";
  // [model] ("none" runs the transport alone)
  std::string backbone = "tiny";
  // One backbone replica per entry ([model] devices): "cpu" or "cuda:N". Empty (unset): every
  // visible CUDA device, else the CPU (the model service resolves it at start).
  std::vector<std::string> devices;
  // Safetensors of the backbone. Empty: the embedded default (tiny: the pretrained weights
  // committed in weights/, installed under <datadir>/nexus/weights); "seeded": the seeded,
  // untrained initialisation. See resolve_weights().
  std::string weights;
  std::string precision = "float32";  // the backbone's arithmetic: float32, tf32, bf16 (nexusd.toml)
  std::string state_dir = "/var/lib/nexus";     // checkpoints
  std::uint32_t batch_samples = 64;             // B: a group flushes at this many samples
  std::chrono::microseconds batch_wait{2000};   // T: ... or when its oldest request waited this long
  bool deterministic = false;                   // bitwise results whatever the group (no grouping)
  double group_window_ms = 20;                  // training: who joins the fair-share leader's group
  double min_training_share = 0.3;              // training's floor of the executor when inference saturates it
  std::uint32_t inference_lanes = 2;            // executor lanes per replica serving inference
  std::uint32_t training_lanes = 2;             // and training (0: the first inference lane serves both)
  std::uint32_t torch_threads = 0;              // LibTorch's intra-op threads per pass (0: one per core)
  double max_training_turn_ms = 20;             // a bigger SFT step runs as micro-batches (0: never split)
  double max_request_gflop = 2000;              // per-request cost budget
  std::uint32_t versions_kept = 8;              // published versions kept per tenant (+ pinned)
  std::chrono::seconds idle_evict{600};         // a detached tenant's slot: checkpointed and freed after
  std::uint32_t max_slots_per_uid = 32;         // resident slots of one Unix user's tenants
  std::uint32_t max_checkpoints_per_uid = 256;  // checkpoint tags of one Unix user's tenants
  std::uint64_t checkpoint_bytes_per_uid = 4ull << 30;  // their bytes on disk
  std::map<std::string, TenantWeight> tenants;  // [tenants.NAME] weight, priority, replica
  // [feature_cache] (docs/design/cache.md): dataset SFT steps' backbone features, by content
  std::uint64_t feature_cache_bytes = 512ull << 20;             // mib (0: off)
  std::uint64_t feature_cache_bytes_per_tenant = 256ull << 20;  // mib_per_tenant
  std::uint64_t feature_cache_disk_bytes = 0;                   // disk_mib (0: no disk tier)
  bool feature_cache_shared = false;                            // shared: across tenants, same content
  // [env]
  std::uint32_t env_workers = 1;
  std::chrono::milliseconds external_open_timeout{10000};
  std::chrono::milliseconds external_step_timeout{10000};
  std::chrono::milliseconds external_step_per_session{1000};  // added to a step's deadline per session named
  std::uint32_t datasets_per_tenant = 8;
  std::uint64_t dataset_bytes_per_tenant = 2ull << 30;
  std::uint64_t dataset_bytes_total = 8ull << 30;
  // Tenants' dataset files are parsed by this helper process in a sandbox (empty: the
  // nexus-dataset-reader beside nexusd), which must finish within the timeout.
  std::string dataset_reader;
  std::chrono::milliseconds dataset_parse_timeout{120000};
  // External environments: name -> the Unix socket its simulator process listens on. Tenants
  // open its tasks as "<name>:<task>".
  std::map<std::string, std::string> external_envs;
  // [rollout] Where rollout engines (nexus-rollout) attach: empty, the control socket's directory
  // + /rollout.sock; "none": no engines (the in-daemon pool only). Same mode and group as the
  // control socket; who may attach is decided per connection (engine_registry.hpp).
  std::string rollout_socket;
  std::uint32_t rollout_max_engines = 16;
  std::uint32_t rollout_max_capacity = 256;  // sessions one engine may take
  std::uint32_t rollout_max_engines_per_uid = 4;  // another user's own engines (half of max_engines in all)
  // Autoscaling (off while autoscale_max is 0): engines started with `spawn` (argv; "{socket}"
  // and "{n}" replaced; empty: nexus-rollout beside nexusd, named auto-{n}) while sessions run in
  // nexusd for want of room, drained when idle for autoscale_idle_s, between min and max.
  std::uint32_t autoscale_min = 0, autoscale_max = 0;
  std::uint32_t autoscale_idle_s = 60;
  std::uint32_t autoscale_sessions_per_engine = 16;
  std::vector<std::string> autoscale_spawn;
  // [jobs]
  std::uint32_t jobs_running_per_tenant = 2;
  std::uint32_t jobs_running = 16;
  std::uint32_t jobs_per_tenant = 32;        // a tenant's jobs queued or running (LimitExceeded beyond)
  std::uint32_t jobs_total = 1024;           // every tenant's jobs queued or running
  // Observations adapter tenants' RL jobs of one Unix user keep in memory at once (QuotaExceeded beyond).
  std::uint64_t rl_observation_bytes_per_uid = 1ull << 30;
  std::chrono::milliseconds job_heartbeat{60000};  // a job loop silent this long is restarted
  // Test only (nexusd --inject-fault NAME): faults the Health Manager's tests provoke.
  std::vector<std::string> inject_faults;
  // [metrics]
  std::string metrics_textfile;                  // empty: none written
  std::chrono::seconds metrics_interval{15};
  std::string timeline_path;                     // busy intervals as CSV at exit (nexus-bench workload)
};

// The weights file the model service loads for `c`: c.weights if it names a file, "" for the
// seeded initialisation ("seeded", or no embedded weights for this backbone), else the embedded
// default's path (the first of the compiled-in weights directories that holds it).
std::string resolve_weights(const DaemonConfig& c);

// Loads `path` over the defaults; throws std::runtime_error with the file and key on bad input.
DaemonConfig load_config_file(const std::string& path, DaemonConfig base = {});

// The rollout socket's path ("" when engines are off).
std::string rollout_socket_path(const DaemonConfig& c);

// `nexusd --check-config`: prints what `c` resolves to (socket, weights, state, bounds) and the
// problems that would stop or weaken the daemon (weights not found, no such socket group);
// returns 0 if it would start, 2 if not.
int check_config(const DaemonConfig& c, const std::string& source);

}  // namespace nexus::daemon
