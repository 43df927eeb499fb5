// The dataset side of the Master's routing: DatasetLoad (the file comes as the descriptor the
// tenant opened and sent) into the Environment Service's dataset store, and DatasetSftStep as a
// batch sampled there and submitted to the model service as an SFT step; a PredictRequest that
// names a dataset, in that dataset's units.
#pragma once
#include <functional>
#include <memory>
#include <variant>
#include <vector>

#include "daemon/env/dataset_store.hpp"
#include "daemon/ipc/service_port.hpp"
#include "daemon/master/model_routes.hpp"
#include "daemon/model/model_service.hpp"

namespace nexus::daemon {

// image_size and max_views: the backbone's (views are resized to it; more views are refused).
std::vector<std::uint8_t> handle_dataset_load(env::DatasetStore& store, const ServiceRequest& r, std::int64_t image_size,
                                              std::int64_t max_views);

// Samples the batch and submits the step; `reply` gets the answer's bytes once (now for a
// refusal, from the executor for the step's result).
void submit_dataset_sft_step(env::DatasetStore& store, model::ModelService& model, const ServiceRequest& r,
                             std::function<void(std::vector<std::uint8_t>)> reply);

// A PredictRequest that names a dataset loaded with normalize: the model request with its state
// normalised (in a copy it owns) and its answer's actions put back in the dataset's units.
std::variant<model::Request, ModelRouteError> normalized_predict(env::DatasetStore& store, const ServiceRequest& r,
                                                                 std::function<void(model::Result)> done);

}  // namespace nexus::daemon
