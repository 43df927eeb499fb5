#include "daemon/model/torchscript_backbone.hpp"

#include <torch/script.h>

#include <stdexcept>

namespace nexus::model {
namespace {

class TorchScriptBackbone : public Backbone {
 public:
  TorchScriptBackbone(torch::jit::script::Module module, BackboneConfig config)
      : module_(std::move(module)), config_(std::move(config)) {}

  VLAFeature forward(const torch::Tensor& images, const torch::Tensor& tokens, const torch::Tensor& mask) override {
    torch::NoGradGuard no_grad;
    const auto out = module_.forward({images, tokens, mask});
    if (!out.isTuple() || out.toTuple()->elements().size() != 3)
      throw std::runtime_error("TorchScript backbone must return (tokens, pooled, mask)");
    const auto& e = out.toTuple()->elements();
    VLAFeature f{e[0].toTensor(), e[1].toTensor(), e[2].toTensor().to(torch::kBool)};
    check_user_features(f, images.size(0), config_.dim, "TorchScript");
    return f;
  }
  const BackboneConfig& config() const override { return config_; }

 private:
  torch::jit::script::Module module_;
  BackboneConfig config_;
};

}  // namespace

void check_user_features(const VLAFeature& f, std::int64_t n, std::int64_t dim, const char* kind) {
  if (f.tokens.dim() != 3 || f.tokens.size(0) != n || f.tokens.size(2) != dim || f.pooled.dim() != 2 ||
      f.pooled.size(0) != n || f.pooled.size(1) != dim || f.mask.dim() != 2 || f.mask.size(0) != n ||
      f.mask.size(1) != f.tokens.size(1) || f.pooled.scalar_type() != torch::kFloat32)
    throw std::runtime_error(std::string(kind) + " backbone returned other than float [N, L, D], [N, D], bool [N, L]");
}

std::unique_ptr<Backbone> load_torchscript_backbone(const std::string& path, torch::Device device) {
  torch::jit::script::Module m;
  try {
    m = torch::jit::load(path, device);
  } catch (const c10::Error& e) {
    throw std::runtime_error("TorchScript backbone " + path + ": " + e.what_without_backtrace());
  }
  BackboneConfig c;
  c.name = "torchscript";
  auto attr = [&](const char* name) -> std::int64_t {
    if (!m.hasattr(name) || !m.attr(name).isInt())
      throw std::runtime_error("TorchScript backbone " + path + ": needs an int attribute '" + name + "'");
    return m.attr(name).toInt();
  };
  c.image_size = attr("image_size");
  c.max_views = attr("max_views");
  c.max_tokens = attr("max_tokens");
  c.dim = attr("dim");
  if (c.image_size <= 0 || c.max_views <= 0 || c.max_tokens <= 0 || c.dim <= 0)
    throw std::runtime_error("TorchScript backbone " + path + ": attributes must be positive");
  m.eval();
  for (auto p : m.parameters()) p.set_requires_grad(false);
  return std::make_unique<TorchScriptBackbone>(std::move(m), c);
}

}  // namespace nexus::model
