// User backbones: TorchScript modules (.pt, torch.jit.script; in maintenance in current PyTorch)
// and AOTInductor packages (.pt2, torch.export then torch._inductor.aoti_compile_and_package:
// the current route from PyTorch to C++). Either must provide
//   forward(images: uint8 [N, V, H, W, 3], tokens: int32 [N, T], token_mask: bool [N, T])
//       -> (tokens: float [N, L, D], pooled: float [N, D], mask: bool [N, L])
// and the geometry image_size (H = W), max_views (V <= max_views), max_tokens (T), dim (D): int
// attributes of a TorchScript module, or the package's metadata (aot_inductor.metadata) for
// AOTInductor, whose N must be exported as dynamic. Loaded on the replica's device (an
// AOTInductor package runs on the device kind it was compiled for: a mismatch is refused at
// load), frozen, and served exactly like the built-in backbone; its outputs are checked at
// every pass.
#pragma once
#include <memory>
#include <string>

#include "daemon/model/backbone.hpp"

namespace nexus::model {

// Each throws std::runtime_error naming the file and what it lacks.
std::unique_ptr<Backbone> load_torchscript_backbone(const std::string& path, torch::Device device = torch::kCPU);
// Where this build's LibTorch has no AOTInductor runtime (Debian's 1.13), it says so.
std::unique_ptr<Backbone> load_aoti_backbone(const std::string& path, torch::Device device = torch::kCPU);

// A user backbone's outputs for n samples as the model service needs them, else throws naming
// `kind` ("TorchScript", "AOTInductor").
void check_user_features(const VLAFeature& f, std::int64_t n, std::int64_t dim, const char* kind);

}  // namespace nexus::model
