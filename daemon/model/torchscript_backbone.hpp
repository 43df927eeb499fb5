// User backbones as TorchScript. The file's module must provide:
//   forward(images: uint8 [N, V, H, W, 3], tokens: int32 [N, T], token_mask: bool [N, T])
//       -> (tokens: float [N, L, D], pooled: float [N, D], mask: bool [N, L])
//   int attributes image_size (H = W), max_views (V <= max_views), max_tokens (T), dim (D).
// It is loaded on the CPU, frozen (eval, no grad) and served exactly like the built-in one.
#pragma once
#include <memory>
#include <string>

#include "daemon/model/backbone.hpp"

namespace nexus::model {

// Throws std::runtime_error naming the file and what it lacks.
std::unique_ptr<Backbone> load_torchscript_backbone(const std::string& path);

}  // namespace nexus::model
