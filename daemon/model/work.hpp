// The executor's work items, one kind per variant alternative (model service internals):
//   TenantWork  a typed request from a tenant (or made by the daemon on its behalf: a job's
//               sampled SFT batch, an evaluation's predict)
//   ActWork     an RL job's rollout step: actions from the latest published version
//   SlotWork    an RL job's update minibatch: a function run on the tenant's slot
//   MicroWork   the next micro-batch of an SFT step split into bounded turns (a StepChain)
// Inference work (predict, features, act) goes to the Inference Queue, the rest to the Training
// Queue.
#pragma once
#include <torch/torch.h>

#include <future>
#include <string>
#include <variant>

#include "daemon/model/model_service.hpp"
#include "daemon/model/policy_port.hpp"
#include "daemon/model/tenant_slot.hpp"

namespace nexus::model::detail {

using Clock = sched::Clock;

struct TenantWork {
  Request request;
};

struct ActWork {
  std::string tenant;
  torch::Tensor images, tokens, mask, state;  // the daemon's own tensors (an RL job's observations)
  std::promise<PolicyPort::Acted> done;
  Clock::time_point arrival = Clock::now();
};

struct SlotWork {
  std::string tenant;
  std::function<void(TenantSlot&)> fn;
  std::promise<void> done;
  Clock::time_point arrival = Clock::now();
};

// An SFT step bigger than a training turn may take, run as micro-batches (service.md, bounded
// turns): bound once (its private copies of the whole batch), then a turn per micro-batch, each
// a MicroWork on the Training Queue; the executor queues the next when one is done, and keeps the
// tenant's other training work queued until the last. The request is answered once, after the
// last micro-batch's optimizer step (or at the first failure).
struct StepChain {
  Request request;                         // the tenant's SftStep: its reply, keepalive and alive flag
  torch::Tensor images, tokens, mask, state, actions;  // the whole batch, bound (rows taken per micro-batch)
  std::int64_t n = 0;                      // samples in the step
  std::int64_t micro = 1;                  // samples per micro-batch (the last may have fewer)
  std::int64_t next = 0;                   // the first row not yet run
  std::shared_ptr<TenantSlot::Accumulation> accumulation;  // begun at the first micro-batch
  double gflop = 0;                        // the whole step's estimated cost
};

struct MicroWork {
  std::shared_ptr<StepChain> chain;
  std::string tenant;
  Clock::time_point arrival = Clock::now();  // the step's own: fair share sees one long step
};

using Work = std::variant<TenantWork, ActWork, SlotWork, MicroWork>;

const std::string& tenant_of(const Work& w);
Clock::time_point arrival_of(const Work& w);
bool is_inference(const Work& w);   // predict, features or act
bool needs_slot(const Work& w);     // all but features
bool is_batchable(const Work& w);   // joins a group pass: SFT step (or micro-batch), predict, act
// Samples (rows) and compatibility key (view count) as the request declares them; checked later.
std::uint32_t samples_of(const Work& w);
std::uint64_t key_of(const Work& w);
bool cancelled(const Work& w);      // its tenant left: nobody to answer
// Answers a work item with a failure (TenantWork: the typed Failure; others: an exception).
void fail(Work& w, Fault fault, const std::string& reason);

}  // namespace nexus::model::detail
