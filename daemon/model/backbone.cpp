#include "daemon/model/backbone.hpp"

#include <cmath>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "daemon/model/safetensors.hpp"

namespace nexus::model {

void tokenize_into(std::string_view text, torch::Tensor& tokens, torch::Tensor& mask, std::int64_t row) {
  const std::int64_t t = tokens.size(1);
  auto tok = tokens.accessor<std::int32_t, 2>();
  auto m = mask.accessor<bool, 2>();
  for (std::int64_t i = 0; i < t; ++i) {
    const bool real = i < static_cast<std::int64_t>(text.size());
    tok[row][i] = real ? static_cast<unsigned char>(text[i]) : 0;
    m[row][i] = real;
  }
}

EncoderBlockImpl::EncoderBlockImpl(std::int64_t dim, std::int64_t heads, std::int64_t mlp_ratio)
    : heads_(heads) {
  ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
  ln2_ = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({dim})));
  qkv_ = register_module("qkv", torch::nn::Linear(dim, 3 * dim));
  proj_ = register_module("proj", torch::nn::Linear(dim, dim));
  fc1_ = register_module("fc1", torch::nn::Linear(dim, mlp_ratio * dim));
  fc2_ = register_module("fc2", torch::nn::Linear(mlp_ratio * dim, dim));
}

torch::Tensor EncoderBlockImpl::forward(const torch::Tensor& x, const torch::Tensor& key_mask) {
  const auto n = x.size(0), s = x.size(1), d = x.size(2), dh = d / heads_;
  // Attention written out (not scaled_dot_product_attention) so that LibTorch 1.13, the Debian
  // fallback, builds the same model.
  auto qkv = qkv_(ln1_(x)).view({n, s, 3, heads_, dh}).permute({2, 0, 3, 1, 4});
  auto scores = torch::matmul(qkv[0], qkv[1].transpose(-2, -1)) / std::sqrt(static_cast<double>(dh));
  scores = scores.masked_fill(key_mask.logical_not().view({n, 1, 1, s}), -1e9);
  auto attn = torch::matmul(torch::softmax(scores, -1), qkv[2]).transpose(1, 2).reshape({n, s, d});
  auto h = x + proj_(attn);
  return h + fc2_(torch::gelu(fc1_(ln2_(h))));
}

VLABackboneImpl::VLABackboneImpl(const BackboneConfig& c) : config_(c) {
  // Module constructors draw from the global generator: hold it for a reproducible init.
  static std::mutex init_mu;
  std::lock_guard lock(init_mu);
  torch::manual_seed(c.init_seed);
  patch_embed_ = register_module("patch_embed", torch::nn::Linear(c.patch * c.patch * 3, c.dim));
  token_embed_ = register_module("token_embed", torch::nn::Embedding(256, c.dim));
  patch_pos_ = register_parameter("patch_pos", torch::randn({1, c.patches_per_view(), c.dim}) * 0.02);
  view_embed_ = register_parameter("view_embed", torch::randn({c.max_views, c.dim}) * 0.02);
  token_pos_ = register_parameter("token_pos", torch::randn({1, c.max_tokens, c.dim}) * 0.02);
  cls_ = register_parameter("cls", torch::zeros({1, 1, c.dim}));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (std::int64_t i = 0; i < c.layers; ++i) blocks_->push_back(EncoderBlock(c.dim, c.heads, c.mlp_ratio));
  norm_ = register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.dim})));
}

void VLABackboneImpl::freeze() {
  eval();
  for (auto& p : parameters()) p.set_requires_grad(false);
}

VLAFeature VLABackboneImpl::forward(const torch::Tensor& images, const torch::Tensor& tokens,
                                    const torch::Tensor& token_mask) {
  const auto& c = config_;
  TORCH_CHECK(images.dim() == 5 && images.size(2) == c.image_size && images.size(3) == c.image_size &&
                  images.size(4) == 3 && images.size(1) >= 1 && images.size(1) <= c.max_views,
              "images must be uint8 [N, V<=", c.max_views, ", ", c.image_size, ", ", c.image_size, ", 3]");
  TORCH_CHECK(tokens.dim() == 2 && tokens.size(1) == c.max_tokens && tokens.size(0) == images.size(0),
              "tokens must be [N, ", c.max_tokens, "]");
  const auto n = images.size(0), v = images.size(1), g = c.image_size / c.patch, p = c.patch;
  auto x = images.to(torch::kFloat32).div(255.0).sub(0.5);
  // [N, V, g, p, g, p, 3] -> [N, V, g, g, p, p, 3] -> [N, V, g*g, p*p*3]
  x = x.view({n, v, g, p, g, p, 3}).permute({0, 1, 2, 4, 3, 5, 6}).reshape({n, v, g * g, p * p * 3});
  auto patches = patch_embed_(x) + patch_pos_.unsqueeze(1) +
                 view_embed_.slice(0, 0, v).view({1, v, 1, c.dim});
  patches = patches.reshape({n, v * g * g, c.dim});
  auto text = token_embed_(tokens.to(torch::kLong)) + token_pos_;
  auto seq = torch::cat({cls_.expand({n, 1, c.dim}), patches, text}, 1);
  auto mask = torch::cat({torch::ones({n, 1 + v * g * g}, token_mask.options().dtype(torch::kBool)), token_mask.to(torch::kBool)}, 1);
  for (auto& block : *blocks_) seq = block->as<EncoderBlock>()->forward(seq, mask);
  seq = norm_(seq);
  return VLAFeature{seq, seq.select(1, 0), mask};
}

namespace {

class BuiltinBackbone : public Backbone {
 public:
  explicit BuiltinBackbone(VLABackbone b) : b_(std::move(b)) {}
  VLAFeature forward(const torch::Tensor& images, const torch::Tensor& tokens, const torch::Tensor& mask) override {
    torch::NoGradGuard no_grad;
    return b_->forward(images, tokens, mask);
  }
  const BackboneConfig& config() const override { return b_->config(); }

 private:
  VLABackbone b_;
};

}  // namespace

std::unique_ptr<Backbone> make_builtin_backbone(const BackboneConfig& config, const std::string& weights,
                                                torch::Device device) {
  VLABackbone b(config);
  if (!weights.empty()) load_weights(*b, weights);  // on the host, then moved
  b->to(device);
  b->freeze();
  return std::make_unique<BuiltinBackbone>(b);
}

void save_weights(torch::nn::Module& module, const std::string& path,
                  const std::map<std::string, std::string>& metadata) {
  SafeTensorsFile f;
  f.metadata = metadata;
  for (const auto& item : module.named_parameters()) {
    auto t = item.value().detach().to(torch::kCPU, torch::kFloat32).contiguous();
    SafeTensor st;
    st.dtype = "F32";
    st.shape = t.sizes().vec();
    st.data.resize(static_cast<std::size_t>(t.numel()) * 4);
    std::memcpy(st.data.data(), t.data_ptr<float>(), st.data.size());
    f.tensors.emplace(item.key(), std::move(st));
  }
  write_safetensors(path, f);
}

void load_weights(torch::nn::Module& module, const std::string& path) {
  const SafeTensorsFile f = read_safetensors(path);
  auto params = module.named_parameters();
  if (f.tensors.size() != params.size())
    throw std::runtime_error(path + ": holds " + std::to_string(f.tensors.size()) + " tensors, the model has " +
                             std::to_string(params.size()) + " parameters");
  torch::NoGradGuard no_grad;
  for (auto& item : params) {
    auto it = f.tensors.find(item.key());
    if (it == f.tensors.end()) throw std::runtime_error(path + ": no tensor named " + item.key());
    const SafeTensor& st = it->second;
    if (st.dtype != "F32" || st.shape != item.value().sizes().vec())
      throw std::runtime_error(path + ": tensor " + item.key() + " has another dtype or shape than the model's");
    auto src = torch::from_blob(const_cast<std::uint8_t*>(st.data.data()), st.shape, torch::kFloat32);
    item.value().copy_(src);
  }
}

}  // namespace nexus::model
