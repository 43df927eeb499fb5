// An SFT step on a batch the daemon sampled from a tenant's dataset: the request an SFT job
// submits for each step, and master's DatasetSftStep route for a tenant's own.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "daemon/env/dataset_store.hpp"
#include "daemon/model/model_service.hpp"

namespace nexus::daemon {

// An SFT step on a batch the daemon sampled (a job's or a DatasetSftStepRequest's): the request
// holds the batch alive.
model::Request sampled_sft_request(const std::string& tenant, std::uint32_t uid,
                                   std::shared_ptr<const env::SampledBatch> batch, std::function<void(model::Result)> done);

}  // namespace nexus::daemon
