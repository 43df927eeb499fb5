// kernels/: the CPU reference versions against LibTorch (the backbone's own preprocessing, and
// narrow()), and the CUDA versions against the CPU ones, bitwise, where a GPU is present.
// LibTorch first: c10 defines a glog-style CHECK that aborts; Catch must define the last one.
#include <torch/torch.h>
#undef CHECK
#include <catch2/catch.hpp>

#include <vector>

#include "kernels/group_pack.hpp"
#include "kernels/partition_scatter.hpp"
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
#endif
}
