// The ceiling for nexus-bench group: the same backbone pass in this process, no IPC, on the
// daemon's device and at its precision; and that device's GEMM rate at that precision.
// On a GPU, passes are timed with CUDA events on the device's current stream (c10::Event, so
// this file needs no CUDA headers and builds against a CPU-only LibTorch too); on the CPU with
// the steady clock.
#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <chrono>
#include <map>
#include <tuple>

#include "daemon/model/adapted_backbone.hpp"
#include "daemon/model/devices.hpp"
#include "daemon/model/precision.hpp"
#include "group.hpp"
#include "latency.hpp"

namespace nexus::bench {
namespace {

using Clock = std::chrono::steady_clock;

// Seconds `fn` keeps `device` busy: CUDA events around it on a GPU, the wall clock on the CPU.
template <class Fn>
double device_seconds(torch::Device device, Fn&& fn) {
#if TORCH_VERSION_MAJOR >= 2
  if (device.is_cuda()) {
    const c10::DeviceGuard guard(device);
    const auto stream = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->getStream(device);
    c10::Event start(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
    c10::Event stop(c10::DeviceType::CUDA, c10::EventFlag::BACKEND_DEFAULT);
    start.record(stream);
    fn();
    stop.record(stream);
    stop.synchronize();
    return start.elapsedTime(stop) / 1000.0;  // milliseconds
  }
#endif
  if (device.is_cuda()) torch::cuda::synchronize();
  const auto t0 = Clock::now();
  fn();
  if (device.is_cuda()) torch::cuda::synchronize();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// The daemon's backbone, as the daemon makes it: frozen, seeded weights, on the device, at the precision.
model::Backbone& backbone_for(const std::string& name, const std::string& device, const std::string& precision) {
  static std::map<std::tuple<std::string, std::string, std::string>, std::unique_ptr<model::Backbone>> cache;
  auto& b = cache[{name, device, precision}];
  if (!b) {
    const torch::Device dev(device);
    b = model::with_precision(model::make_adaptable_backbone(*model::named_backbone(name), "", dev),
                              model::configured_precision(precision, name, dev), dev);
  }
  return *b;
}

struct Batch {
  torch::Tensor images, tokens, mask;
};

Batch batch_of(const model::BackboneConfig& c, std::int64_t n, torch::Device device) {
  return {torch::randint(0, 256, {n, 1, c.image_size, c.image_size, 3}).to(torch::kUInt8).to(device),
          torch::randint(0, 256, {n, c.max_tokens}).to(torch::kInt32).to(device),
          torch::ones({n, c.max_tokens}, torch::kBool).to(device)};
}

double forward_seconds(model::Backbone& b, std::int64_t n, int repeats, torch::Device device) {
  const auto in = batch_of(b.config(), n, device);
  b.forward(in.images, in.tokens, in.mask);  // warm-up
  return device_seconds(device, [&] {
    for (int i = 0; i < repeats; ++i) b.forward(in.images, in.tokens, in.mask);
  });
}

}  // namespace

std::string resolve_device(const std::string& device) {
  if (device != "auto") return model::parse_device(device).str();  // names what is no device, or not visible
  return torch::cuda::is_available() ? "cuda:0" : "cpu";
}

InProcess inprocess_throughput(const GroupOptions& o, int tenants, int batch) {
  const torch::Device device(o.device);
  auto& b = backbone_for(o.backbone, o.device, o.precision);
  InProcess r;
  const double samples = double(tenants) * batch * o.rounds;
  r.grouped_sps = samples / forward_seconds(b, std::int64_t(tenants) * batch, o.rounds, device);
  r.serial_sps = samples / forward_seconds(b, batch, o.rounds * tenants, device);
  return r;
}

double inprocess_batch1_p50_us(const GroupOptions& o, int passes) {
  const torch::Device device(o.device);
  auto& b = backbone_for(o.backbone, o.device, o.precision);
  const auto in = batch_of(b.config(), 1, device);
  b.forward(in.images, in.tokens, in.mask);  // warm-up
  std::vector<double> us;
  for (int i = 0; i < passes; ++i)
    us.push_back(1e6 * device_seconds(device, [&] { b.forward(in.images, in.tokens, in.mask); }));
  return percentiles(us).p50_us;
}

double backbone_flops_per_sample(const std::string& name) {
  const auto c = *model::named_backbone(name);
  const double s = double(c.sequence_length(1)), d = double(c.dim), p = double(c.patch * c.patch * 3);
  const double per_layer = 2 * s * d * 3 * d     // qkv
                           + 2 * 2 * s * s * d   // scores and weighted sum
                           + 2 * s * d * d       // output projection
                           + 2 * 2 * s * d * c.mlp_ratio * d;  // MLP
  return double(c.patches_per_view()) * 2 * p * d + double(c.layers) * per_layer;
}

double peak_gemm_flops(const std::string& device_name, const std::string& precision) {
  const torch::Device device(device_name);
  // Big enough to reach a GPU's matrix rate; on the CPU, what the cores give a 1024 GEMM.
  const std::int64_t n = device.is_cuda() ? 8192 : 1024;
  const auto dtype = precision == "bf16" ? torch::kBFloat16 : torch::kFloat32;
  auto& ctx = at::globalContext();
  const bool tf32_was = ctx.allowTF32CuBLAS();
  if (device.is_cuda()) ctx.setAllowTF32CuBLAS(precision == "tf32");
  auto a = torch::randn({n, n}).to(device, dtype), b = torch::randn({n, n}).to(device, dtype);
  torch::mm(a, b);  // warm-up
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const double secs = device_seconds(device, [&] { torch::mm(a, b); });
    best = std::max(best, 2.0 * n * n * n / secs);
  }
  if (device.is_cuda()) ctx.setAllowTF32CuBLAS(tf32_was);
  return best;
}

}  // namespace nexus::bench
