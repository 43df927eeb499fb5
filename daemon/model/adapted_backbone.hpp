// The built-in backbone as the model service serves it: VLABackbone's own forward, and the same
// forward with tenants' adapters on its projections (lora.hpp), one grouped pass for all.
//
// Kept apart from backbone.{hpp,cpp} on purpose: those are sources of the committed weights'
// pretraining recipe (weights/recipe_files.cmake), and adapters change nothing about pretraining.
// The adapted forward reads the backbone's modules by name; with every adapter's B zero it is
// bitwise VLABackboneImpl::forward (tests/model/adapters_test.cpp holds it to that, so the two
// cannot drift apart unnoticed).
//
// Thread safety: as Backbone (executor lanes run passes, several at once: the backbone is frozen,
// so a pass, with adapters' gradients recorded or not, changes nothing any other pass reads).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "daemon/model/backbone.hpp"
#include "daemon/model/lora.hpp"

namespace nexus::model {

// VLABackboneImpl::forward with `adapters` applied in every block (lora.hpp). Holds pointers
// into `backbone`, which must outlive it.
class AdaptedForward {
 public:
  explicit AdaptedForward(VLABackboneImpl& backbone);  // throws std::runtime_error if a module is missing
  VLAFeature operator()(const torch::Tensor& images, const torch::Tensor& tokens, const torch::Tensor& token_mask,
                        const AdapterBatch& adapters) const;

 private:
  struct Block {
    torch::nn::LayerNormImpl *ln1, *ln2;
    torch::nn::LinearImpl *qkv, *proj, *fc1, *fc2;
  };
  torch::Tensor block(const Block& b, std::int64_t index, const torch::Tensor& x, const torch::Tensor& key_mask,
                      const AdapterBatch& a) const;
  BackboneConfig config_;
  torch::nn::LinearImpl* patch_embed_;
  torch::nn::EmbeddingImpl* token_embed_;
  torch::Tensor patch_pos_, view_embed_, token_pos_, cls_;
  std::vector<Block> blocks_;
  torch::nn::LayerNormImpl* norm_;
};

// A backbone that takes tenants' adapters. Only the built-in one does: a user's TorchScript or
// AOTInductor graph does not name its projections.
class AdaptableBackbone : public Backbone {
 public:
  // `grad`: record the adapters' part of the graph (a training pass); the backbone's own weights
  // never get gradients.
  virtual VLAFeature forward_adapted(const torch::Tensor& images, const torch::Tensor& tokens, const torch::Tensor& mask,
                                     const AdapterBatch& adapters, bool grad) = 0;
  // The module whose parameters and buffers are the weights (the feature cache digests them).
  virtual torch::nn::Module& module() = 0;
};

// make_builtin_backbone's backbone (frozen, `weights` or its seeded init, on `device`), adaptable.
std::unique_ptr<AdaptableBackbone> make_adaptable_backbone(const BackboneConfig& config, const std::string& weights,
                                                           torch::Device device = torch::kCPU);

}  // namespace nexus::model
