#include "daemon/model/devices.hpp"

#include <mutex>
#include <optional>
#include <stdexcept>

namespace nexus::model {
namespace {

std::size_t visible_cuda_devices() { return torch::cuda::is_available() ? torch::cuda::device_count() : 0; }

}  // namespace

torch::Device parse_device(const std::string& name) {
  std::optional<torch::Device> d;
  try {
    d.emplace(name);
  } catch (const c10::Error&) {
  }
  if (!d || !(d->is_cpu() || d->is_cuda()))
    throw std::runtime_error("model.devices: \"" + name + "\" is not a device (\"cpu\" or \"cuda:N\")");
  if (d->is_cpu()) return torch::kCPU;  // "cpu:0" and "cpu" are one CPU
  const auto visible = visible_cuda_devices();
  if (!d->has_index()) d->set_index(0);
  if (d->index() >= static_cast<c10::DeviceIndex>(visible))
    throw std::runtime_error("model.devices: \"" + name + "\": " + std::to_string(visible) +
                             " CUDA device(s) visible to nexusd" +
                             (visible == 0 ? " (no NVIDIA driver, no GPU, or CUDA_VISIBLE_DEVICES hides them); use \"cpu\""
                                           : ""));
  return *d;
}

std::vector<torch::Device> resolve_devices(const std::vector<std::string>& names) {
  std::vector<torch::Device> out;
  for (const auto& n : names) out.push_back(parse_device(n));
  if (!out.empty()) return out;
  const auto visible = visible_cuda_devices();
  for (std::size_t i = 0; i < visible; ++i) out.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>(i));
  if (out.empty()) out.emplace_back(torch::kCPU);
  return out;
}

std::unique_lock<std::mutex> lock_global_generator() {
  static std::mutex mu;
  return std::unique_lock(mu);
}

std::unique_lock<std::mutex> seed_global_generator(std::uint64_t seed) {
  auto lock = lock_global_generator();
  torch::manual_seed(seed);
  return lock;
}

at::Generator seeded_generator(std::uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }

// A copy from pageable memory to a GPU stalls the host until the device has caught up with
// everything queued before it; from page-locked memory it is queued like a kernel.
torch::Tensor upload(const torch::Tensor& host, torch::Device device) {
  if (!host.defined() || !device.is_cuda() || !host.is_cpu()) return host.defined() ? host.to(device) : host;
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

torch::Tensor pack_rows(const std::vector<torch::Tensor>& parts, torch::Device device) {
  if (!device.is_cuda() || parts.empty()) return torch::cat(parts).to(device);
  auto sizes = parts.front().sizes().vec();
  sizes[0] = 0;
  for (const auto& p : parts) sizes[0] += p.size(0);
  auto packed = torch::empty(sizes, parts.front().options().pinned_memory(true));
  torch::cat_out(packed, parts, 0);
  return packed.to(device, /*non_blocking=*/true);
}

namespace {
torch::Tensor on_device(const torch::Tensor& host, const torch::TensorOptions& options) {
  return upload(host.to(options.dtype().toScalarType()), options.device());  // no copy when both match
}
}  // namespace

torch::Tensor normal_draws(at::IntArrayRef sizes, at::Generator& gen, const torch::TensorOptions& options) {
  return on_device(torch::randn(sizes, gen, torch::kFloat32), options);
}

torch::Tensor uniform_draws(at::IntArrayRef sizes, at::Generator& gen, const torch::TensorOptions& options) {
  return on_device(torch::rand(sizes, gen, torch::kFloat32), options);
}

torch::Tensor host_copy(const torch::Tensor& t) { return t.is_cpu() ? t.clone() : t.to(torch::kCPU); }

torch::Tensor clip_gradients(const std::vector<torch::Tensor>& parameters, double max_norm) {
  std::vector<torch::Tensor> norms, grads;
  for (const auto& p : parameters)
    if (p.grad().defined()) grads.push_back(p.grad().data()), norms.push_back(p.grad().data().norm(2));
  if (grads.empty()) return parameters.empty() ? torch::zeros({}) : torch::zeros({}, parameters.front().options());
  auto total = norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2);
  if (max_norm > 0) {
    const auto coef = torch::clamp_max(max_norm / (total + 1e-6), 1.0);
    for (auto& g : grads) g.mul_(coef);
  }
  return total;
}

}  // namespace nexus::model
