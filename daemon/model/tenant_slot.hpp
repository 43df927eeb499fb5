// A tenant's isolated training state: its head, AdamW optimizer, gradient clipping, RNG and step
// counter. Nothing here is shared with another tenant; the backbone's features come in as
// read-only inputs (views of a group's batch).
//
// Thread safety: one thread at a time per slot.
#pragma once
#include <torch/torch.h>

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <memory>
#include <mutex>
#include <set>
#include <vector>
#include <stdexcept>

#include "daemon/model/heads.hpp"

namespace nexus::model {

// A request this slot refuses; the slot's state is unchanged. `shape` marks a malformed batch,
// otherwise the numbers were bad (NaN/Inf in actions, state or loss).
class SlotError : public std::runtime_error {
 public:
  SlotError(bool shape, const std::string& reason) : std::runtime_error(reason), shape_(shape) {}
  bool shape_error() const { return shape_; }

 private:
  bool shape_;
};

struct StepResult {
  double loss = 0;
  double grad_norm = 0;
  std::int64_t step = 0;  // steps taken after this one
};

// Seconds this thread has spent in optimizer steps (clipping, the step's host read, AdamW), over
// every slot: an executor reads it before and after a turn for its profile (ExecutorProfile).
// Thread-local because a slot is only ever stepped on the executor lane running its turn.
double optimizer_seconds_this_thread();

class TenantSlot {
 public:
  // The head, its optimizer state and its RNGs live on `device` (the replica's); the head is
  // initialised on the CPU from `seed` and moved there, so it starts the same on any device.
  TenantSlot(const HeadSpec& head, const OptimizerConfig& optimizer, std::int64_t feature_dim, std::uint64_t seed,
             torch::Device device = torch::kCPU);

  // One supervised step on a batch (every tensor on the slot's device). Throws SlotError (slot
  // untouched) on bad input. Its one host synchronisation reads loss, gradient norm and their
  // finiteness together, after backward and before the optimizer step (docs/design/gpu.md).
  StepResult sft_step(const VLAFeature& features, const torch::Tensor& state, const torch::Tensor& actions);
  // Actions [n, chunk, action_dim] of the live parameters (version 0) or of a published version
  // (no grad, eval). Throws SlotError for bad input, std::out_of_range for an unknown version.
  // Sampling heads (flow) draw from the slot's inference stream, never the training RNG: an
  // evaluation mid-training leaves the training noise, and the checkpoint, bit for bit as they were.
  torch::Tensor predict(const VLAFeature& features, const torch::Tensor& state, std::uint64_t version = 0);

  // RL: actions sampled from the latest published version (the live head if none), with their
  // log-probabilities under it. Gaussian heads only; throws SlotError for other kinds.
  struct Acted {
    torch::Tensor actions;   // [n, chunk, action_dim]
    torch::Tensor log_prob;  // [n]
    std::uint64_t version = 0;
  };
  Acted act(const VLAFeature& features, const torch::Tensor& state);
  // A step split into micro-batches (bounded training turns, docs/design/service.md): begin_step
  // clears the gradients and draws the whole step's randomness; each micro_step adds its rows'
  // share of the loss gradient (rows [offset, offset + n) of the step's `total`); finish_step
  // clips and steps once, with the loss of the whole batch. The result equals sft_step on the
  // whole batch within fp32 rounding (the same draws; sums in another order). Nothing else may
  // train this slot between begin_step and finish_step (the executor keeps the tenant's other
  // training work queued meanwhile). Throws SlotError like sft_step: from micro_step for a bad
  // batch, from finish_step for NaN/Inf (no update made either way).
  struct Accumulation {
    torch::Tensor noise;                 // the whole step's draws ([total, ...]; undefined: none)
    std::vector<torch::Tensor> losses;   // each micro-batch's weighted loss (summed at the end)
    std::int64_t total = 0;
  };
  Accumulation begin_step(std::int64_t total);
  void micro_step(Accumulation& acc, const VLAFeature& features, const torch::Tensor& state,
                  const torch::Tensor& actions, std::int64_t offset);
  StepResult finish_step(Accumulation& acc);

  // Adapter tenants (HeadSpec::adapter): their losses reach back into one shared adapted backbone
  // pass, so the group runs one backward for all of them (GroupExecutor) instead of each its own.
  // step_loss clears the gradients and returns the step's loss with its graph; micro_loss is
  // micro_step without the backward. After the caller's backward, finish_deferred clips, checks
  // and steps as sft_step does (SlotError on NaN/Inf, no update made).
  torch::Tensor step_loss(const VLAFeature& features, const torch::Tensor& state, const torch::Tensor& actions);
  torch::Tensor micro_loss(Accumulation& acc, const VLAFeature& features, const torch::Tensor& state,
                           const torch::Tensor& actions, std::int64_t offset);
  StepResult finish_deferred(const torch::Tensor& loss) { return apply_gradients(loss); }
  // The adapter of the live head (version 0) or of a published version; null for a head-only
  // slot. acting_adapter: the one act() uses (the newest version, else the live head's).
  const LoraAdapterImpl* adapter(std::uint64_t version = 0) const;
  const LoraAdapterImpl* acting_adapter() const;

  // RL: one optimizer step on the loss that `loss_of` computes from the live head (clipping,
  // NaN checks and the step counter as in sft_step). Throws SlotError, slot untouched, on NaN.
  StepResult policy_step(const std::function<torch::Tensor(ActionHead&)>& loss_of);
  // policy_step cut into turns (an adapter tenant's update minibatch: bounded training turns):
  // policy_gradients returns one part's loss and gradients of the live head (adapter included),
  // leaving the slot as it was; apply_policy_gradients steps once on the parts' summed gradients
  // (a SlotError where they do not fit the head, or are NaN/Inf: no update made).
  struct PolicyPart {
    torch::Tensor loss;                 // detached
    std::vector<torch::Tensor> grads;   // one per head_->parameters(), zeros where unused
  };
  PolicyPart policy_gradients(const std::function<torch::Tensor(ActionHead&)>& loss_of);
  StepResult apply_policy_gradients(const PolicyPart& sum);

  // Publishes an immutable snapshot of the head's parameters; returns its version (1, 2, ...).
  std::uint64_t publish();
  std::uint64_t latest_version() const { return published_; }
  // Drops the published versions other than the newest `keep` (>= 1) and those in `pinned`;
  // returns how many it dropped. A dropped version answers like one never published.
  std::size_t retain(std::size_t keep, const std::set<std::uint64_t>& pinned);
  std::size_t versions_held() const { return versions_.size(); }

  // Checkpoint: `<path>.safetensors` (head parameters, AdamW moments, RNG state, the published
  // versions still held) and `<path>.json` (the manifest: head spec, optimizer config, step,
  // versions, caller's extra fields). load() throws std::runtime_error on a bad file. A
  // checkpoint saved on one device loads on any with the same draws to come (tensors stored
  // from the host, a CPU RNG everywhere); an older file's CUDA Philox state is reseeded from.
  void save(const std::string& path, const nlohmann::json& extra = {}) const;
  struct Loaded;
  // About how many bytes save() writes (parameters, AdamW moments, published versions): what a
  // checkpoint is charged before it is written.
  std::uint64_t checkpoint_bytes() const;
  static Loaded load(const std::string& path, std::int64_t feature_dim, torch::Device device = torch::kCPU);

  // FNV-1a fingerprints of everything a checkpoint holds: `parameters` covers the live head and
  // every published version kept, `optimizer` the AdamW moments and step counts and the training
  // RNG. Evaluation must leave both bitwise unchanged.
  struct Digest {
    std::uint64_t parameters = 0, optimizer = 0;
    std::int64_t step = 0;
  };
  Digest digest() const;

  ActionHead& head() { return *head_; }
  const torch::Device& device() const { return device_; }
  std::int64_t steps() const { return steps_; }

 private:
  void check_inputs(const VLAFeature& f, const torch::Tensor& state, const torch::Tensor* actions) const;
  // Clips, reads loss and norm in the step's one host synchronisation, and steps (or drops the
  // gradients and throws SlotError on NaN/Inf).
  StepResult apply_gradients(const torch::Tensor& loss);
  std::shared_ptr<ActionHead> head_;
  std::map<std::uint64_t, std::shared_ptr<ActionHead>> versions_;  // frozen copies, eval mode
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  OptimizerConfig config_;
  std::int64_t feature_dim_;
  torch::Device device_;
  // CPU generators on every device (seeded_generator); their draws move to the device.
  at::Generator rng_;            // training: SFT noise (flow), RL action sampling; checkpointed
  at::Generator inference_rng_;  // predict only; not training state, so not checkpointed
  std::int64_t steps_ = 0;
  std::uint64_t published_ = 0;  // the newest version number handed out
};

struct TenantSlot::Loaded {
  std::unique_ptr<TenantSlot> slot;
  nlohmann::json manifest;
};

}  // namespace nexus::model
