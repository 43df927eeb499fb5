// AOTInductor packages as backbones (torchscript_backbone.hpp has the contract). The runtime
// (torch::inductor::AOTIModelPackageLoader) is in LibTorch 2.6 and later; Debian's 1.13, the
// fallback where PyPI cannot be reached, has none, and then loading says so. That is detected
// from the headers the build sees, not assumed.
#include <torch/torch.h>

#include <stdexcept>
#include <string>

#include "daemon/model/torchscript_backbone.hpp"

#if __has_include(<torch/csrc/inductor/aoti_package/model_package_loader.h>)
#include <torch/csrc/inductor/aoti_package/model_package_loader.h>
#define NEXUS_HAVE_AOTI 1
#endif

namespace nexus::model {

#ifdef NEXUS_HAVE_AOTI
namespace {

class AotiBackbone : public Backbone {
 public:
  AotiBackbone(std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader, BackboneConfig config)
      : loader_(std::move(loader)), config_(std::move(config)) {}

  // One caller at a time: a replica's executor (the loader's runner is not shared between them).
  VLAFeature forward(const torch::Tensor& images, const torch::Tensor& tokens, const torch::Tensor& mask) override {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> inputs = {images.contiguous(), tokens.to(torch::kInt32).contiguous(),
                                         mask.to(torch::kBool).contiguous()};
    std::vector<torch::Tensor> out;
    try {
      out = loader_->run(inputs);
    } catch (const c10::Error& e) {
      throw std::runtime_error(std::string("AOTInductor backbone: ") + e.what_without_backtrace());
    }
    if (out.size() != 3) throw std::runtime_error("AOTInductor backbone must return (tokens, pooled, mask)");
    VLAFeature f{out[0], out[1], out[2].to(torch::kBool)};
    check_user_features(f, images.size(0), config_.dim, "AOTInductor");
    return f;
  }
  const BackboneConfig& config() const override { return config_; }

 private:
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader_;
  BackboneConfig config_;
};

}  // namespace

std::unique_ptr<Backbone> load_aoti_backbone(const std::string& path, torch::Device device) {
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader;
  try {
    loader = std::make_unique<torch::inductor::AOTIModelPackageLoader>(
        path, "model", /*run_single_threaded=*/false, /*num_runners=*/1,
        device.is_cuda() ? device.index() : static_cast<c10::DeviceIndex>(-1));
  } catch (const std::exception& e) {
    throw std::runtime_error("AOTInductor backbone " + path + ": " + e.what());
  }
  const auto metadata = loader->get_metadata();
  // A package runs on the device kind it was compiled for (aoti_compile_and_package records it).
  if (const auto kind = metadata.find("AOTI_DEVICE_KEY");
      kind != metadata.end() && kind->second != (device.is_cuda() ? "cuda" : "cpu"))
    throw std::runtime_error("AOTInductor backbone " + path + ": compiled for " + kind->second + ", this replica is " +
                             device.str() + "; export it for that device, or list a matching one in model.devices");
  BackboneConfig c;
  c.name = "aoti";
  auto geometry = [&](const char* key) -> std::int64_t {
    const auto it = metadata.find(key);
    std::int64_t v = 0;
    try {
      if (it != metadata.end()) v = std::stoll(it->second);
    } catch (const std::exception&) {
    }
    if (v <= 0)
      throw std::runtime_error("AOTInductor backbone " + path + ": needs metadata '" + key +
                               "' (a positive integer; aoti_compile_and_package(..., inductor_configs="
                               "{\"aot_inductor.metadata\": {...}}))");
    return v;
  };
  c.image_size = geometry("image_size");
  c.max_views = geometry("max_views");
  c.max_tokens = geometry("max_tokens");
  c.dim = geometry("dim");
  return std::make_unique<AotiBackbone>(std::move(loader), c);
}

#else

std::unique_ptr<Backbone> load_aoti_backbone(const std::string& path, torch::Device) {
  throw std::runtime_error("AOTInductor backbone " + path + ": this nexusd's LibTorch (" TORCH_VERSION
                           ") has no AOTInductor runtime; build against LibTorch 2.6 or later (scripts/setup.sh "
                           "takes it from PyPI), or export TorchScript");
}

#endif

}  // namespace nexus::model
