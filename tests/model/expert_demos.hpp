// Demonstrations recorded in-process from a built-in task's scripted expert, and their backbone
// features: what the in-process learning tests train on (through nexusd the same episodes come
// from `nexusctl dataset record`).
#pragma once
#include <torch/torch.h>

#include <string>

#include "daemon/model/backbone.hpp"

namespace nexus::test {

struct ExpertDemos {
  // Per step: images uint8 [n, 1, H, W, 3], tokens int32 and mask bool [n, T], state [n, 4],
  // actions [n, chunk, 2] (the step's action and the next chunk - 1; the last repeats at the end).
  torch::Tensor images, tokens, mask, state, actions;
};

ExpertDemos record_expert(const std::string& task, int episodes, std::uint64_t seed0, const model::BackboneConfig& c,
                          int chunk);

// Push's goal (its one mocap body, in units of 0.25 m) at every step of the expert's episodes:
// actions [n, 1, 2] are the goal, the rest as record_expert. The goal seen from every stage of a
// push; the pooled feature of the pretrained tiny backbone hardly carries it (sim_learning_test).
ExpertDemos record_push_goals(int episodes, std::uint64_t seed0, const model::BackboneConfig& c);

// The frozen backbone's features of every recorded step, in passes of 256.
model::VLAFeature demo_features(model::VLABackbone& b, const ExpertDemos& d);

}  // namespace nexus::test
