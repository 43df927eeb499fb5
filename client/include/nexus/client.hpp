// libnexus: a tenant's connection to nexusd.
//
//   auto client = nexus::Client::attach({.tenant = "alice-reach"});
//   nexus::Tensor t = client->alloc(nexus::DType::UInt8, {1 << 20});   // in the shared arena
//   fill(t.raw());                                                      // written once, in place
//   auto digest = client->digest(t);                                    // blocking form
//   auto later = client->ping_async(bytes);  ...  later.get();          // asynchronous form
//
// Thread safety: a Client may be used from several threads; submissions are serialized and
// one thread at a time drives the response ring on behalf of all waiters.
// Failures throw nexus::Error; a daemon that dies is reported as ErrorCode::DaemonGone within
// the caller's timeout, never as a hang.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "nexus/env.hpp"
#include "nexus/error.hpp"
#include "nexus/status.hpp"
#include "nexus/tenant.hpp"
#include "nexus/tensor.hpp"

namespace nexus {

// How a caller waits for a reply or for ring space.
enum class WaitMode {
  Adaptive,  // spin for ClientOptions::spin, then block on the doorbell
  Spin,      // never block: lowest latency, burns a core while waiting
  Block      // block on the doorbell at once: no CPU while waiting
};

struct ClientOptions {
  std::string socket_path = "/run/nexus/nexusd.sock";
  std::string tenant;                        // 1-64 of [A-Za-z0-9._-]; bound to your uid
  std::uint32_t ring_bytes = 256 * 1024;     // per ring
  std::uint64_t client_arena_bytes = 64ull << 20;
  std::uint64_t output_arena_bytes = 16ull << 20;
  WaitMode wait = WaitMode::Adaptive;
  std::chrono::microseconds spin{50};
  std::chrono::milliseconds timeout{10000};  // default deadline of blocking calls
  bool block_when_full = true;               // false: a full request ring throws WouldBlock
};

namespace detail {
struct ClientState;
}

// A reply that may not have arrived yet. get() drives the response ring until it has.
// Must not outlive its Client.
template <class T>
class Future {
 public:
  bool ready() const;
  // Blocks until the reply arrives or `timeout` passes (then throws Timeout).
  T get(std::optional<std::chrono::milliseconds> timeout = std::nullopt);
  std::uint64_t request_id() const { return id_; }

 private:
  friend class Client;
  Future(detail::ClientState* state, std::uint64_t id) : state_(state), id_(id) {}
  detail::ClientState* state_;
  std::uint64_t id_;
};

struct DigestResult {
  std::uint64_t fnv1a = 0;
  std::uint64_t bytes = 0;
};

class Client {
 public:
  // Connects, authenticates (your uid), maps the segment. Throws nexus::Error.
  static std::unique_ptr<Client> attach(const ClientOptions& options);
  ~Client();  // detaches
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  std::uint64_t session_id() const;
  const ClientOptions& options() const;

  // A tensor in the client arena. Throws ArenaFull or BadTensor.
  Tensor alloc(DType dtype, std::vector<std::int64_t> shape);

  // Echo: the daemon returns the payload (at most 64 KiB).
  Future<std::vector<std::uint8_t>> ping_async(std::span<const std::uint8_t> payload);
  std::vector<std::uint8_t> ping(std::span<const std::uint8_t> payload);

  // The daemon reads the tensor in place and returns its FNV-1a digest.
  Future<DigestResult> digest_async(const Tensor& tensor);
  DigestResult digest(const Tensor& tensor);

  // ---- the model (nexus/tenant.hpp) ----
  // Creates (or replaces) this tenant's slot: head, optimizer, data schema.
  BackboneInfo register_tenant(const TenantSpec& spec);
  // The resident backbone's geometry, without registering (for example to evaluate a slot that
  // an earlier attachment trained).
  BackboneInfo backbone();
  // One SFT step on a batch; actions float32 [n, chunk, action_dim] in the arena.
  Future<SftResult> sft_step_async(const Observation& obs, const Tensor& actions);
  SftResult sft_step(const Observation& obs, const Tensor& actions);
  // Actions of the live head (version 0) or of a published version. `dataset`: a dataset you
  // loaded with normalize; the state is given, and the actions come back, in its units.
  Future<Prediction> predict_async(const Observation& obs, std::uint64_t version = 0, const std::string& dataset = "");
  Prediction predict(const Observation& obs, std::uint64_t version = 0, const std::string& dataset = "");
  // Features mode, for a head that lives in your process: the backbone's pooled features of the
  // samples, float32 [n, dim], written by nexusd into `out` (in the arena or a region). Needs
  // no registered head; the observation's state is ignored.
  Future<FeaturesResult> features_async(const Observation& obs, const Tensor& out);
  FeaturesResult features(const Observation& obs, const Tensor& out);

  // ---- regions: memory of yours that nexusd maps too (needs [ipc] allow_device_regions) ----
  // A sealed memfd of `bytes`, mapped here and handed to nexusd over the control socket.
  // Throws PermissionDenied where the daemon has regions off.
  Region register_host_region(std::uint64_t bytes);
  // CUDA memory of `bytes` (rounded up to the device's granularity) on `device`, allocated with
  // the driver's virtual memory API (cuMemCreate), exported as a descriptor and mapped by nexusd
  // on its device. Throws WrongMessageType where this process or nexusd has no CUDA driver.
  // Features are written there in place (complete when the reply arrives); inputs there are
  // copied to nexusd's host once per tensor, so finish your writes before you send a request.
  Region register_device_region(std::uint64_t bytes, int device = 0);
  // nexusd lets go of it (requests in flight keep it until they finish); later requests naming
  // it get UnknownRegion. Your mapping stays while your handles do.
  void unregister_region(const Region& region);

  // Freezes the head's current parameters as a new version; returns it.
  std::uint64_t publish();
  // Fingerprints of this tenant's head parameters and optimizer state, and its step count.
  SlotDigest slot_digest();
  // Checkpoints in the daemon's state directory, under this tenant, by tag ([A-Za-z0-9._-]).
  // save() returns the step saved; load() replaces the slot (head, optimizer, RNG, step) and
  // returns its step.
  std::uint64_t save(const std::string& tag);
  std::uint64_t load(const std::string& tag);

  // ---- datasets, environments and RL jobs (nexus/env.hpp) ----
  // Opens `path` here, with your own permissions, and hands nexusd the open file (never the
  // path): nexusd reads exactly what you may read. It keeps the demonstrations under `name`
  // (1-64 of [A-Za-z0-9._-]; loading a name again replaces it). Throws PermissionDenied if you
  // cannot read the file, BadDataset (naming the path) if it is not a valid demonstration file.
  // Views (cameras) and state keys come from the file's layout unless `options` names them;
  // views are resized to the backbone's image size. See DatasetOptions.
  DatasetInfo dataset_load(const std::string& name, const std::string& path, std::uint64_t seed = 0);
  DatasetInfo dataset_load(const std::string& name, const std::string& path, const DatasetOptions& options);
  // One SFT step on `batch` samples nexusd draws from the dataset: images, instruction, state,
  // and `chunk` consecutive actions (your head's chunk).
  Future<SftResult> dataset_sft_step_async(const std::string& name, std::int32_t batch, std::int32_t chunk = 1);
  SftResult dataset_sft_step(const std::string& name, std::int32_t batch, std::int32_t chunk = 1);

  // Opens sessions of a built-in task, rendered at the backbone's geometry.
  EnvSessions env_open(const std::string& task, std::int32_t count, std::int32_t max_steps = 0);
  // Resets (one seed per session) or steps (action_dim floats per session) the sessions; their
  // observations are written into images uint8 [n, 1, H, W, 3] and state float32 [n, state_dim].
  EnvStepResult env_reset(std::span<const std::uint64_t> ids, std::span<const std::uint64_t> seeds,
                          const Tensor& images, const Tensor& state);
  EnvStepResult env_step(std::span<const std::uint64_t> ids, std::span<const float> actions, const Tensor& images,
                         const Tensor& state);
  std::uint32_t env_close(std::span<const std::uint64_t> ids);
  // Starts an RL job on this tenant's registered gaussian head (chunk 1, the task's state and
  // action dims); returns the starting policy's version. One job per tenant at a time; it stops
  // when the tenant detaches.
  std::uint64_t rl_start(const RlOptions& options);
  RlStatus rl_status(bool stop = false);

  // ---- jobs the daemon runs (nexus/env.hpp): queued, running, finished, failed, cancelled ----
  std::uint64_t job_start(const JobSpec& spec);
  JobInfo job(std::uint64_t id);          // throws UnknownJob for another tenant's
  std::vector<JobInfo> jobs();            // this tenant's, RL jobs included
  JobInfo job_cancel(std::uint64_t id);   // the job's state after (cancelled, or already ended)

 private:
  explicit Client(std::unique_ptr<detail::ClientState> state);
  std::unique_ptr<detail::ClientState> state_;
};

// FNV-1a 64 of a byte range: what digest() should return for it.
std::uint64_t fnv1a(std::span<const std::uint8_t> bytes);

}  // namespace nexus
