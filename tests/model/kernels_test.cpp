// kernels/: the CPU reference versions against LibTorch (the backbone's own preprocessing, and
// narrow()), and the CUDA versions against the CPU ones, bitwise, where a GPU is present.
// LibTorch first: c10 defines a glog-style CHECK that aborts; Catch must define the last one.
#include <torch/torch.h>
#undef CHECK
#include <catch2/catch.hpp>

#include <vector>

#include "kernels/group_pack.hpp"
#include "kernels/partition_scatter.hpp"
#include "kernels/sgmv.hpp"
#include "daemon/model/lora.hpp"
#ifdef NEXUS_WITH_CUDA
#include <cuda_runtime.h>
#endif

using namespace nexus::kernels;

namespace {

// Three requests of 3, 0 and 2 samples, two views of 64x64, patch 8 (tiny's geometry).
struct PackCase {
  PackGeometry g{.views = 2, .image_size = 64, .patch = 8};
  std::vector<torch::Tensor> images;
  std::vector<PackSource> sources;
  std::int64_t samples = 0;
  PackCase() {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(7);
    for (std::int64_t n : {3, 0, 2}) {
      images.push_back(torch::randint(0, 256, {n, g.views, g.image_size, g.image_size, 3}, gen, torch::kUInt8));
      sources.push_back({images.back().data_ptr<std::uint8_t>(), n});
      samples += n;
    }
  }
  // What VLABackboneImpl::forward does to its images (daemon/model/backbone.cpp), after the
  // model service's torch::cat of the group.
  torch::Tensor libtorch_reference() const {
    const auto n = samples, v = g.views, grid = g.image_size / g.patch, p = g.patch;
    auto x = torch::cat(images).to(torch::kFloat32).div(255.0).sub(0.5);
    return x.view({n, v, grid, p, grid, p, 3}).permute({0, 1, 2, 4, 3, 5, 6}).reshape({n, v, grid * grid, p * p * 3});
  }
};

bool cuda_device_present() {
#ifdef NEXUS_WITH_CUDA
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
#else
  return false;
#endif
}

}  // namespace

TEST_CASE("group pack (CPU reference) is bitwise the backbone's cat + convert + patchify", "[kernels]") {
  PackCase c;
  auto out = torch::empty({c.samples, c.g.views, 64, 8 * 8 * 3});
  group_pack_cpu(c.sources.data(), c.sources.size(), c.g, out.data_ptr<float>());
  CHECK(torch::equal(out, c.libtorch_reference()));
}

TEST_CASE("partition scatter (CPU reference) copies each target's rows, refuses overlaps and overruns",
          "[kernels]") {
  auto features = torch::randn({10, 6});
  std::vector<torch::Tensor> outs = {torch::zeros({4, 6}), torch::zeros({1, 6}), torch::zeros({3, 6})};
  const std::vector<ScatterTarget> targets = {{outs[0].data_ptr<float>(), 6, 4},
                                              {outs[1].data_ptr<float>(), 0, 1},
                                              {outs[2].data_ptr<float>(), 2, 3}};
  partition_scatter_cpu(features.data_ptr<float>(), 10, 6, targets.data(), targets.size());
  CHECK(torch::equal(outs[0], features.narrow(0, 6, 4)));
  CHECK(torch::equal(outs[1], features.narrow(0, 0, 1)));
  CHECK(torch::equal(outs[2], features.narrow(0, 2, 3)));
  float spare[60];
  const std::vector<ScatterTarget> overlap = {{spare, 0, 3}, {spare, 2, 2}};
  CHECK_THROWS_AS(partition_scatter_cpu(features.data_ptr<float>(), 10, 6, overlap.data(), overlap.size()), std::invalid_argument);
  const std::vector<ScatterTarget> overrun = {{spare, 8, 3}};
  CHECK_THROWS_AS(partition_scatter_cpu(features.data_ptr<float>(), 10, 6, overrun.data(), overrun.size()), std::invalid_argument);
  const std::vector<ScatterTarget> negative = {{spare, -1, 1}};
  CHECK_THROWS_AS(partition_scatter_cpu(features.data_ptr<float>(), 10, 6, negative.data(), negative.size()), std::invalid_argument);
}

namespace {

// Three tenants' adapters (ranks 3, 8 and 1) over 5 samples of 4 tokens; sample 2 has none.
struct SgmvCase {
  std::int64_t n = 5, s = 4, in = 24, out = 20, max_rank = 8;
  torch::Tensor x = torch::randn({n, s, in}, at::make_generator<at::CPUGeneratorImpl>(4));
  std::vector<std::int64_t> first = {0, 3, 4}, rows = {2, 1, 1}, ranks = {3, 8, 1};
  std::vector<double> scales = {2.0, 0.25, 1.0};
  std::vector<torch::Tensor> as, bs;
  SgmvCase() {
    auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
    for (auto r : ranks) as.push_back(torch::randn({in, r}, gen)), bs.push_back(torch::randn({r, out}, gen));
  }
  // Segments over token rows (sample i's tokens are rows i*s .. i*s+s-1).
  std::vector<SgmvSegment> segments(bool device_weights, std::vector<torch::Tensor>& keep) const {
    std::vector<SgmvSegment> out_segments;
    for (std::size_t k = 0; k < first.size(); ++k) {
      auto a = device_weights ? as[k].to(torch::kCUDA) : as[k];
      auto b = device_weights ? bs[k].to(torch::kCUDA) : bs[k];
      keep.push_back(a), keep.push_back(b);
      out_segments.push_back({first[k] * s, rows[k] * s, a.data_ptr<float>(), b.data_ptr<float>(), ranks[k],
                              static_cast<float>(scales[k])});
    }
    return out_segments;
  }
};

}  // namespace

TEST_CASE("SGMV shrink and expand (CPU reference) are the model's segmented LoRA delta: bad segments refused",
          "[kernels][adapters]") {
  SgmvCase c;
  std::vector<torch::Tensor> keep;
  const auto segments = c.segments(false, keep);
  const SgmvShape shape{c.n * c.s, c.in, c.out, c.max_rank};
  auto h = torch::full({c.n * c.s, c.max_rank}, 7.0f);  // every entry is written
  auto y = torch::zeros({c.n * c.s, c.out});
  sgmv_shrink_cpu(c.x.data_ptr<float>(), h.data_ptr<float>(), shape, segments.data(), segments.size());
  sgmv_expand_cpu(h.data_ptr<float>(), y.data_ptr<float>(), shape, segments.data(), segments.size());
  const auto expected = nexus::model::segmented_lora_delta(c.x, c.first, c.rows, c.as, c.bs, c.scales, c.out);
  CHECK((y.view({c.n, c.s, c.out}) - expected).abs().max().item<double>() < 1e-5 * std::max(1.0, expected.abs().max().item<double>()));
  CHECK(torch::equal(h.narrow(0, 2 * c.s, c.s), torch::zeros({c.s, c.max_rank})));  // sample 2: no segment
  auto overlap = segments;
  overlap[1].first_row = 1;
  CHECK_THROWS_AS(sgmv_shrink_cpu(c.x.data_ptr<float>(), h.data_ptr<float>(), shape, overlap.data(), overlap.size()),
                  std::invalid_argument);
  auto too_wide = segments;
  too_wide[0].rank = 9;
  CHECK_THROWS_AS(sgmv_expand_cpu(h.data_ptr<float>(), y.data_ptr<float>(), shape, too_wide.data(), too_wide.size()),
                  std::invalid_argument);
  auto overrun = segments;
  overrun[2].rows = 5;
  CHECK_THROWS_AS(sgmv_shrink_cpu(c.x.data_ptr<float>(), h.data_ptr<float>(), shape, overrun.data(), overrun.size()),
                  std::invalid_argument);
}

TEST_CASE("CUDA kernels match their CPU references bitwise (needs a GPU)", "[kernels][cuda]") {
  if (!cuda_device_present()) {
    WARN("no CUDA device here: the CUDA kernels are compiled and linked, not run");
    return;
  }
#ifdef NEXUS_WITH_CUDA
  PackCase c;
  const auto floats = c.samples * c.g.floats_per_sample();
  std::vector<PackSource> device_sources;
  std::vector<void*> allocations;
  for (const auto& s : c.sources) {
    const auto bytes = static_cast<std::size_t>(s.samples * c.g.floats_per_sample());
    void* d = nullptr;
    REQUIRE(cudaMalloc(&d, bytes + 1) == cudaSuccess);
    REQUIRE(cudaMemcpy(d, s.images, bytes, cudaMemcpyHostToDevice) == cudaSuccess);
    allocations.push_back(d);
    device_sources.push_back({static_cast<const std::uint8_t*>(d), s.samples});
  }
  float* d_out = nullptr;
  REQUIRE(cudaMalloc(&d_out, floats * sizeof(float)) == cudaSuccess);
  REQUIRE(group_pack_cuda(device_sources.data(), device_sources.size(), c.g, d_out, nullptr) == 0);
  auto gpu = torch::empty({c.samples, c.g.views, 64, 192});
  REQUIRE(cudaMemcpy(gpu.data_ptr<float>(), d_out, floats * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  auto cpu = torch::empty_like(gpu);
  group_pack_cpu(c.sources.data(), c.sources.size(), c.g, cpu.data_ptr<float>());
  CHECK(torch::equal(gpu, cpu));

  // Scatter the packed batch's rows (one row per sample) into three device buffers.
  const std::int64_t row = c.g.floats_per_sample();
  std::vector<float*> d_dst(3);
  const std::int64_t firsts[] = {3, 0, 1}, counts[] = {2, 1, 2};
  std::vector<ScatterTarget> targets;
  for (int k = 0; k < 3; ++k) {
    REQUIRE(cudaMalloc(&d_dst[k], counts[k] * row * sizeof(float)) == cudaSuccess);
    targets.push_back({d_dst[k], firsts[k], counts[k]});
  }
  REQUIRE(partition_scatter_cuda(d_out, c.samples, row, targets.data(), targets.size(), nullptr) == 0);
  auto flat = cpu.view({c.samples, row});
  for (int k = 0; k < 3; ++k) {
    auto got = torch::empty({counts[k], row});
    REQUIRE(cudaMemcpy(got.data_ptr<float>(), d_dst[k], counts[k] * row * sizeof(float), cudaMemcpyDeviceToHost) ==
            cudaSuccess);
    CHECK(torch::equal(got, flat.narrow(0, firsts[k], counts[k])));
    cudaFree(d_dst[k]);
  }
  cudaFree(d_out);
  for (void* d : allocations) cudaFree(d);

  // SGMV: the same sums in the same order (no FMA contraction on either side): within fp32 rounding.
  SgmvCase sc;
  std::vector<torch::Tensor> host_keep, device_keep;
  const auto host_segments = sc.segments(false, host_keep);
  const auto device_segments = sc.segments(true, device_keep);
  const SgmvShape shape{sc.n * sc.s, sc.in, sc.out, sc.max_rank};
  auto h = torch::empty({sc.n * sc.s, sc.max_rank});
  auto y = torch::randn({sc.n * sc.s, sc.out});
  auto y_gpu = y.to(torch::kCUDA);
  auto h_gpu = torch::empty({sc.n * sc.s, sc.max_rank}, torch::kCUDA);
  auto x_gpu = sc.x.to(torch::kCUDA);
  sgmv_shrink_cpu(sc.x.data_ptr<float>(), h.data_ptr<float>(), shape, host_segments.data(), host_segments.size());
  sgmv_expand_cpu(h.data_ptr<float>(), y.data_ptr<float>(), shape, host_segments.data(), host_segments.size());
  REQUIRE(sgmv_shrink_cuda(x_gpu.data_ptr<float>(), h_gpu.data_ptr<float>(), shape, device_segments.data(),
                           device_segments.size(), nullptr) == 0);
  REQUIRE(sgmv_expand_cuda(h_gpu.data_ptr<float>(), y_gpu.data_ptr<float>(), shape, device_segments.data(),
                           device_segments.size(), nullptr) == 0);
  CHECK(torch::allclose(h_gpu.cpu(), h, 1e-5, 1e-5));
  CHECK(torch::allclose(y_gpu.cpu(), y, 1e-5, 1e-5));
#endif
}
