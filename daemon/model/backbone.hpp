// The built-in VLA backbone: per-view patch embedding, byte-level instruction embedding, a
// pre-norm transformer encoder. Output: VLAFeature (tokens [N, L, D], pooled [N, D] = the CLS
// token, mask [N, L] true where a token is real).
//
// Thread safety: forward() of a frozen backbone (eval, no grad) may run on several threads.
#pragma once
#include <torch/torch.h>

#include <string_view>

#include "daemon/model/backbone_config.hpp"

namespace nexus::model {

struct VLAFeature {
  torch::Tensor tokens;  // float [N, L, D]
  torch::Tensor pooled;  // float [N, D]
  torch::Tensor mask;    // bool  [N, L]
};

// The embedded default tokenizer: one token per UTF-8 byte, truncated to max_tokens.
// tokens int32 [n, max_tokens] and mask bool [n, max_tokens] rows are written at `row`.
void tokenize_into(std::string_view text, torch::Tensor& tokens, torch::Tensor& mask, std::int64_t row);

// What the model service serves: the built-in VLABackbone or a user's TorchScript module.
// Implementations are frozen; forward() runs without grad and checks its inputs.
class Backbone {
 public:
  virtual ~Backbone() = default;
  virtual VLAFeature forward(const torch::Tensor& images, const torch::Tensor& tokens, const torch::Tensor& mask) = 0;
  virtual const BackboneConfig& config() const = 0;
};

class EncoderBlockImpl : public torch::nn::Module {
 public:
  EncoderBlockImpl(std::int64_t dim, std::int64_t heads, std::int64_t mlp_ratio);
  // x [N, S, D]; key_mask bool [N, S], true = attend to this key.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& key_mask);

 private:
  std::int64_t heads_;
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr}, fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(EncoderBlock);

class VLABackboneImpl : public torch::nn::Module {
 public:
  // Deterministic initialisation from config.init_seed.
  explicit VLABackboneImpl(const BackboneConfig& config);

  // images uint8 [N, V, H, W, 3] (V <= max_views, H = W = image_size),
  // tokens int32/int64 [N, max_tokens], token_mask bool [N, max_tokens].
  VLAFeature forward(const torch::Tensor& images, const torch::Tensor& tokens, const torch::Tensor& token_mask);

  const BackboneConfig& config() const { return config_; }
  // Frozen: eval mode and no parameter requires grad.
  void freeze();

 private:
  BackboneConfig config_;
  torch::nn::Linear patch_embed_{nullptr};
  torch::nn::Embedding token_embed_{nullptr};
  torch::Tensor patch_pos_, view_embed_, token_pos_, cls_;
  torch::nn::ModuleList blocks_{nullptr};
  torch::nn::LayerNorm norm_{nullptr};
};
TORCH_MODULE(VLABackbone);

// The built-in backbone, frozen, with weights from `weights` (safetensors) or its seeded init,
// on `device` (its inputs must be there too).
std::unique_ptr<Backbone> make_builtin_backbone(const BackboneConfig& config, const std::string& weights,
                                                torch::Device device = torch::kCPU);

// Weights as safetensors (parameter names as the module names them). load_weights checks that
// the file holds exactly the module's parameters with the same shapes (float32).
void save_weights(torch::nn::Module& module, const std::string& path,
                  const std::map<std::string, std::string>& metadata = {});
void load_weights(torch::nn::Module& module, const std::string& path);

}  // namespace nexus::model
