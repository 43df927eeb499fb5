// The executor's work items, one kind per variant alternative (model service internals):
//   TenantWork  a typed request from a tenant (or made by the daemon on its behalf: a job's
//               sampled SFT batch, an evaluation's predict)
//   ActWork     an RL job's rollout step: actions from the latest published version
//   SlotWork    an RL job's update minibatch: a function run on the tenant's slot
// Inference work (predict, features, act) goes to the Inference Queue, the rest to the Training
// Queue.
#pragma once
#include <torch/torch.h>

#include <future>
#include <string>
#include <variant>

#include "daemon/model/model_service.hpp"
#include "daemon/model/policy_port.hpp"

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

using Work = std::variant<TenantWork, ActWork, SlotWork>;

const std::string& tenant_of(const Work& w);
Clock::time_point arrival_of(const Work& w);
bool is_inference(const Work& w);   // predict, features or act
bool needs_slot(const Work& w);     // all but features
bool is_batchable(const Work& w);   // joins a group pass: SFT step, predict, act
// Samples (rows) and compatibility key (view count) as the request declares them; checked later.
std::uint32_t samples_of(const Work& w);
std::uint64_t key_of(const Work& w);
bool cancelled(const Work& w);      // its tenant left: nobody to answer
// Answers a work item with a failure (TenantWork: the typed Failure; others: an exception).
void fail(Work& w, Fault fault, const std::string& reason);

}  // namespace nexus::model::detail
