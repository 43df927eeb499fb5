// nexus-bench adapters: per-tenant LoRA adapters on one backbone (docs/design/adapters.md),
// in-process (LibTorch, no IPC: the compute itself). For T tenants, each with a rank-r adapter
// on every block and projection, and `batch` samples each, side by side in one run:
//   grouped   one adapted pass over all T*batch samples (the segmented shrink/expand)
//   serial    T adapted passes of `batch` samples, one per tenant
//   plain     one pass over the same T*batch samples with no adapters
//   plain serial  T passes of `batch` samples with no adapters: plain serial / plain is what
//             grouping alone gains on this machine, the bound on grouped / serial
// for inference (no grad) and training (forward and the backward into the adapters). Cells are
// interleaved and each is the median of --repeats; figures are ratios of times measured together.
#include <torch/cuda.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "daemon/model/adapted_backbone.hpp"
#include "adapters.hpp"

namespace nexus::bench {
namespace {

using Clock = std::chrono::steady_clock;

using Options = AdaptersOptions;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Cell {
  double grouped = 0, serial = 0, plain = 0, plain_serial = 0;  // seconds per round
};

Cell measure(model::VLABackbone& bb, const std::vector<model::LoraAdapter>& adapters, int t, const Options& o,
             bool training) {
  const model::AdaptedForward forward(*bb);
  const auto& c = bb->config();
  const torch::Device dev(o.device);
  const std::int64_t n = std::int64_t(t) * o.batch;
  const auto images = torch::randint(0, 256, {n, 1, c.image_size, c.image_size, 3}).to(torch::kUInt8).to(dev);
  const auto tokens = torch::randint(0, 256, {n, c.max_tokens}).to(torch::kInt32).to(dev);
  const auto mask = torch::ones({n, c.max_tokens}, torch::kBool).to(dev);
  auto run = [&](std::int64_t first, std::int64_t rows, int from, int count, bool adapted) {
    model::AdapterBatch batch;
    if (adapted)
      for (int k = 0; k < count; ++k) batch.segments.push_back({std::int64_t(k) * o.batch, o.batch, adapters[from + k].get()});
    torch::AutoGradMode grad(training && adapted);
    const auto im = images.narrow(0, first, rows), tk = tokens.narrow(0, first, rows), mk = mask.narrow(0, first, rows);
    const auto f = adapted ? forward(im, tk, mk, batch) : bb->forward(im, tk, mk);
    if (training && adapted) f.pooled.sum().backward();
  };
  auto timed = [&](const std::function<void()>& f) {
    const auto t0 = Clock::now();
    for (int r = 0; r < o.rounds; ++r) f();
    if (dev.is_cuda()) torch::cuda::synchronize();
    return std::chrono::duration<double>(Clock::now() - t0).count() / o.rounds;
  };
  auto grouped = [&] { run(0, n, 0, t, true); };
  auto serial = [&] {
    for (int k = 0; k < t; ++k) run(std::int64_t(k) * o.batch, o.batch, k, 1, true);
  };
  auto plain = [&] { run(0, n, 0, t, false); };
  auto plain_serial = [&] {
    for (int k = 0; k < t; ++k) run(std::int64_t(k) * o.batch, o.batch, k, 1, false);
  };
  grouped(), serial(), plain(), plain_serial();  // warm-up
  std::vector<double> g, s, p, ps;
  for (int i = 0; i < o.repeats; ++i) {
    g.push_back(timed(grouped)), s.push_back(timed(serial)), p.push_back(timed(plain));
    ps.push_back(timed(plain_serial));
  }
  for (auto& a : adapters)
    for (auto& param : a->parameters()) param.mutable_grad() = torch::Tensor();
  return {median(g), median(s), median(p), median(ps)};
}

}  // namespace

int run_adapters(const AdaptersOptions& o) {
  const auto config = model::named_backbone(o.backbone);
  if (!config) {
    std::fprintf(stderr, "nexus-bench adapters: unknown backbone %s (tiny, small)\n", o.backbone.c_str());
    return 2;
  }
  const torch::Device dev(o.device);
  model::VLABackbone bb(*config);
  bb->to(dev);
  bb->freeze();
  model::AdapterSpec spec;
  spec.rank = o.rank, spec.layers = config->layers, spec.dim = config->dim, spec.mlp_hidden = config->mlp_ratio * config->dim;
  const int most = *std::max_element(o.tenants.begin(), o.tenants.end());
  std::vector<model::LoraAdapter> adapters;
  for (int k = 0; k < most; ++k) {
    torch::manual_seed(k);
    adapters.emplace_back(spec);
    adapters.back()->to(dev);
    torch::NoGradGuard no_grad;
    for (auto& p : adapters.back()->parameters()) p.normal_(0, 0.02);  // non-zero B: real work
  }
  std::uint64_t backbone_bytes = 0, adapter_bytes = 0;
  for (const auto& p : bb->parameters()) backbone_bytes += p.nbytes();
  for (const auto& p : adapters[0]->parameters()) adapter_bytes += p.nbytes();
  nlohmann::json figures = {{"backbone", o.backbone}, {"device", o.device}, {"rank", o.rank}, {"batch", o.batch},
                            {"threads", torch::get_num_threads()}, {"backbone_bytes", backbone_bytes},
                            {"adapter_bytes", adapter_bytes},
                            {"adapter_fraction_of_backbone", double(adapter_bytes) / double(backbone_bytes)}};
  std::printf("backbone %s, rank %d on all %lld blocks x 6 projections, batch %d per tenant, %d thread(s)\n",
              o.backbone.c_str(), o.rank, static_cast<long long>(config->layers), o.batch, torch::get_num_threads());
  std::printf("adapter %.1f KiB = %.2f%% of the backbone's %.1f MiB\n", adapter_bytes / 1024.0,
              100.0 * double(adapter_bytes) / double(backbone_bytes), backbone_bytes / 1048576.0);
  for (const bool training : {false, true}) {
    const char* mode = training ? "train" : "infer";
    std::printf("%s:  T   grouped ms   serial ms   plain ms   grouped/serial speed-up   adapter overhead   "
                "no adapters: grouped/serial\n",
                mode);
    for (int t : o.tenants) {
      const Cell c = measure(bb, adapters, t, o, training);
      const double speedup = c.serial / c.grouped, overhead = c.grouped / c.plain - 1;
      const double plain_speedup = c.plain_serial / c.plain;
      std::printf("%s: %2d   %10.2f   %9.2f   %8.2f   %23.2fx   %15.1f%%   %26.2fx\n", mode, t, 1e3 * c.grouped,
                  1e3 * c.serial, 1e3 * c.plain, speedup, 100 * overhead, plain_speedup);
      std::fflush(stdout);
      const std::string key = std::string(mode) + ".T" + std::to_string(t);
      figures[key + ".grouped_over_serial_speedup"] = speedup;
      figures[key + ".adapter_overhead"] = overhead;
      figures[key + ".plain_grouped_over_serial_speedup"] = plain_speedup;
    }
  }
  std::printf("(plain in train mode: the forward alone, no adapter to reach; overhead there is forward+backward "
              "against it)\n");
  if (o.json) std::printf("%s\n", figures.dump().c_str());
  return 0;
}

}  // namespace nexus::bench
