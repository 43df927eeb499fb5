#include "daemon/model/adapted_backbone.hpp"

#include <cmath>
#include <stdexcept>

namespace nexus::model {
namespace {

template <class T>
T* child(torch::nn::Module& m, const std::string& name) {
  auto children = m.named_children();
  auto* found = children.find(name);
  T* typed = found ? (*found)->as<T>() : nullptr;
  if (!typed) throw std::runtime_error("the built-in backbone has no module '" + name + "' of the expected kind");
  return typed;
}

torch::Tensor parameter(torch::nn::Module& m, const std::string& name) {
  auto params = m.named_parameters(/*recurse=*/false);
  auto* found = params.find(name);
  if (!found) throw std::runtime_error("the built-in backbone has no parameter '" + name + "'");
  return *found;
}

}  // namespace

AdaptedForward::AdaptedForward(VLABackboneImpl& b) : config_(b.config()) {
  patch_embed_ = child<torch::nn::LinearImpl>(b, "patch_embed");
  token_embed_ = child<torch::nn::EmbeddingImpl>(b, "token_embed");
  patch_pos_ = parameter(b, "patch_pos"), view_embed_ = parameter(b, "view_embed");
  token_pos_ = parameter(b, "token_pos"), cls_ = parameter(b, "cls");
  for (const auto& block : *child<torch::nn::ModuleListImpl>(b, "blocks"))
    blocks_.push_back({child<torch::nn::LayerNormImpl>(*block, "ln1"), child<torch::nn::LayerNormImpl>(*block, "ln2"),
                       child<torch::nn::LinearImpl>(*block, "qkv"), child<torch::nn::LinearImpl>(*block, "proj"),
                       child<torch::nn::LinearImpl>(*block, "fc1"), child<torch::nn::LinearImpl>(*block, "fc2")});
  norm_ = child<torch::nn::LayerNormImpl>(b, "norm");
}

// EncoderBlockImpl::forward, with each projection's output passed through the tenants' adapters:
// the base GEMM on the whole group, the low-rank deltas on each tenant's own samples.
torch::Tensor AdaptedForward::block(const Block& b, std::int64_t index, const torch::Tensor& x,
                                    const torch::Tensor& key_mask, const AdapterBatch& a) const {
  const auto n = x.size(0), s = x.size(1), d = x.size(2), heads = config_.heads, dh = d / heads;
  const auto x1 = b.ln1->forward(x);
  auto qkv = a.apply_qkv(index, x1, b.qkv->forward(x1)).view({n, s, 3, heads, dh}).permute({2, 0, 3, 1, 4});
  auto scores = torch::matmul(qkv[0], qkv[1].transpose(-2, -1)) / std::sqrt(static_cast<double>(dh));
  scores = scores.masked_fill(key_mask.logical_not().view({n, 1, 1, s}), -1e9);
  auto attn = torch::matmul(torch::softmax(scores, -1), qkv[2]).transpose(1, 2).reshape({n, s, d});
  auto h = x + a.apply(index, Projection::O, attn, b.proj->forward(attn));
  const auto x2 = b.ln2->forward(h);
  const auto inner = torch::gelu(a.apply(index, Projection::MlpIn, x2, b.fc1->forward(x2)));
  return h + a.apply(index, Projection::MlpOut, inner, b.fc2->forward(inner));
}

// VLABackboneImpl::forward (backbone.cpp), step for step, with the adapted blocks.
VLAFeature AdaptedForward::operator()(const torch::Tensor& images, const torch::Tensor& tokens,
                                      const torch::Tensor& token_mask, const AdapterBatch& adapters) const {
  const auto& c = config_;
  TORCH_CHECK(images.dim() == 5 && images.size(2) == c.image_size && images.size(3) == c.image_size &&
                  images.size(4) == 3 && images.size(1) >= 1 && images.size(1) <= c.max_views,
              "images must be uint8 [N, V<=", c.max_views, ", ", c.image_size, ", ", c.image_size, ", 3]");
  TORCH_CHECK(tokens.dim() == 2 && tokens.size(1) == c.max_tokens && tokens.size(0) == images.size(0),
              "tokens must be [N, ", c.max_tokens, "]");
  const auto n = images.size(0), v = images.size(1), g = c.image_size / c.patch, p = c.patch;
  auto x = images.to(torch::kFloat32).div(255.0).sub(0.5);
  x = x.view({n, v, g, p, g, p, 3}).permute({0, 1, 2, 4, 3, 5, 6}).reshape({n, v, g * g, p * p * 3});
  auto patches = patch_embed_->forward(x) + patch_pos_.unsqueeze(1) + view_embed_.slice(0, 0, v).view({1, v, 1, c.dim});
  patches = patches.reshape({n, v * g * g, c.dim});
  auto text = token_embed_->forward(tokens.to(torch::kLong)) + token_pos_;
  auto seq = torch::cat({cls_.expand({n, 1, c.dim}), patches, text}, 1);
  auto mask = torch::cat({torch::ones({n, 1 + v * g * g}, token_mask.options().dtype(torch::kBool)), token_mask.to(torch::kBool)}, 1);
  for (std::size_t i = 0; i < blocks_.size(); ++i) seq = block(blocks_[i], static_cast<std::int64_t>(i), seq, mask, adapters);
  seq = norm_->forward(seq);
  return VLAFeature{seq, seq.select(1, 0), mask};
}

namespace {

class AdaptableBuiltin : public AdaptableBackbone {
 public:
  explicit AdaptableBuiltin(VLABackbone b) : b_(std::move(b)), adapted_(*b_) {}
  VLAFeature forward(const torch::Tensor& images, const torch::Tensor& tokens, const torch::Tensor& mask) override {
    torch::NoGradGuard no_grad;
    return b_->forward(images, tokens, mask);
  }
  VLAFeature forward_adapted(const torch::Tensor& images, const torch::Tensor& tokens, const torch::Tensor& mask,
                             const AdapterBatch& adapters, bool grad) override {
    torch::AutoGradMode mode(grad);  // the backbone's parameters are frozen: grads reach adapters only
    return adapted_(images, tokens, mask, adapters);
  }
  const BackboneConfig& config() const override { return b_->config(); }
  torch::nn::Module& module() override { return *b_; }

 private:
  VLABackbone b_;
  AdaptedForward adapted_;
};

}  // namespace

std::unique_ptr<AdaptableBackbone> make_adaptable_backbone(const BackboneConfig& config, const std::string& weights,
                                                           torch::Device device) {
  VLABackbone b(config);
  if (!weights.empty()) load_weights(*b, weights);  // on the host, then moved
  b->to(device);
  b->freeze();
  return std::make_unique<AdaptableBuiltin>(b);
}

}  // namespace nexus::model
