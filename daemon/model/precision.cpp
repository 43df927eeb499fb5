#include "daemon/model/precision.hpp"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <stdexcept>

#include "daemon/model/adapted_backbone.hpp"

namespace nexus::model {
namespace {

// Autocast to bfloat16 for this thread's ops on `device`'s type while it lives, then the state
// it found. Nested scopes are counted, as torch.autocast counts them: the cast-weights cache is
// cleared when the outermost one ends.
class Bf16Autocast {
 public:
  explicit Bf16Autocast(torch::Device device) : type_(device.type()) {
#if TORCH_VERSION_MAJOR >= 2
    was_enabled_ = at::autocast::is_autocast_enabled(type_);
    was_dtype_ = at::autocast::get_autocast_dtype(type_);
    at::autocast::set_autocast_enabled(type_, true);
    at::autocast::set_autocast_dtype(type_, at::kBFloat16);
#else  // LibTorch 1.x (Debian's fallback): one switch per device kind
    if (type_ == at::kCUDA) {
      was_enabled_ = at::autocast::is_enabled(), was_dtype_ = at::autocast::get_autocast_gpu_dtype();
      at::autocast::set_enabled(true), at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
    } else {
      was_enabled_ = at::autocast::is_cpu_enabled(), was_dtype_ = at::autocast::get_autocast_cpu_dtype();
      at::autocast::set_cpu_enabled(true), at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    }
#endif
    at::autocast::increment_nesting();
  }
  ~Bf16Autocast() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
#if TORCH_VERSION_MAJOR >= 2
    at::autocast::set_autocast_enabled(type_, was_enabled_);
    at::autocast::set_autocast_dtype(type_, was_dtype_);
#else
    if (type_ == at::kCUDA) {
      at::autocast::set_enabled(was_enabled_), at::autocast::set_autocast_gpu_dtype(was_dtype_);
    } else {
      at::autocast::set_cpu_enabled(was_enabled_), at::autocast::set_autocast_cpu_dtype(was_dtype_);
    }
#endif
  }
  Bf16Autocast(const Bf16Autocast&) = delete;
  Bf16Autocast& operator=(const Bf16Autocast&) = delete;

 private:
  at::DeviceType type_;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kBFloat16;
};

// The heads' contract: float32 features whatever the backbone computed in.
VLAFeature as_float32(VLAFeature f) {
  f.tokens = f.tokens.to(torch::kFloat32);
  f.pooled = f.pooled.to(torch::kFloat32);
  return f;
}

class Bf16Backbone final : public Backbone {
 public:
  Bf16Backbone(std::unique_ptr<Backbone> inner, torch::Device device) : inner_(std::move(inner)), device_(device) {}
  VLAFeature forward(const torch::Tensor& images, const torch::Tensor& tokens, const torch::Tensor& mask) override {
    Bf16Autocast autocast(device_);
    return as_float32(inner_->forward(images, tokens, mask));
  }
  const BackboneConfig& config() const override { return inner_->config(); }

 private:
  std::unique_ptr<Backbone> inner_;
  torch::Device device_;
};

class Bf16AdaptableBackbone final : public AdaptableBackbone {
 public:
  Bf16AdaptableBackbone(std::unique_ptr<AdaptableBackbone> inner, torch::Device device)
      : inner_(std::move(inner)), device_(device) {}
  VLAFeature forward(const torch::Tensor& images, const torch::Tensor& tokens, const torch::Tensor& mask) override {
    Bf16Autocast autocast(device_);
    return as_float32(inner_->forward(images, tokens, mask));
  }
  // The cast back to float32 is part of the graph: an adapter's gradient flows through it.
  VLAFeature forward_adapted(const torch::Tensor& images, const torch::Tensor& tokens, const torch::Tensor& mask,
                             const AdapterBatch& adapters, bool grad) override {
    Bf16Autocast autocast(device_);
    return as_float32(inner_->forward_adapted(images, tokens, mask, adapters, grad));
  }
  const BackboneConfig& config() const override { return inner_->config(); }
  torch::nn::Module& module() override { return inner_->module(); }

 private:
  std::unique_ptr<AdaptableBackbone> inner_;
  torch::Device device_;
};

}  // namespace

std::optional<Precision> parse_precision(std::string_view name) {
  if (name == "float32") return Precision::Float32;
  if (name == "tf32") return Precision::TF32;
  if (name == "bf16") return Precision::BF16;
  return std::nullopt;
}

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::Float32: return "float32";
    case Precision::TF32: return "tf32";
    case Precision::BF16: return "bf16";
  }
  return "float32";
}

Precision effective_precision(Precision requested, torch::Device device) {
  return requested == Precision::TF32 && !device.is_cuda() ? Precision::Float32 : requested;
}

Precision configured_precision(const std::string& setting, const std::string& kind, torch::Device device) {
  const auto precision = parse_precision(setting);
  if (!precision) throw std::runtime_error("[model] precision must be float32, tf32 or bf16, not '" + setting + "'");
  if (*precision == Precision::BF16 && kind == "aoti")
    throw std::runtime_error("[model] precision bf16 does not apply to an AOTInductor package: it runs at the precision "
                             "it was compiled in (compile it under bf16 autocast instead)");
  return effective_precision(*precision, device);
}

std::unique_ptr<Backbone> with_precision(std::unique_ptr<Backbone> inner, Precision precision, torch::Device device) {
  switch (effective_precision(precision, device)) {
    case Precision::Float32:
      return inner;
    case Precision::TF32:
      at::globalContext().setAllowTF32CuBLAS(true);
      at::globalContext().setAllowTF32CuDNN(true);
      return inner;
    case Precision::BF16:
      if (dynamic_cast<AdaptableBackbone*>(inner.get()))
        return std::make_unique<Bf16AdaptableBackbone>(
            std::unique_ptr<AdaptableBackbone>(static_cast<AdaptableBackbone*>(inner.release())), device);
      return std::make_unique<Bf16Backbone>(std::move(inner), device);
  }
  return inner;
}

}  // namespace nexus::model
