// The devices the model service runs on ([model] devices), and the few device-specific pieces
// the model code needs. Everything else in the model code is device-agnostic: a tensor is made
// with the options of one already on its device, and a CUDA branch is a run-time test of
// `device.is_cuda()`, never an #ifdef, so every branch compiles wherever LibTorch does.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace nexus::model {

// "cpu" or "cuda:N" (N a visible CUDA device); throws std::runtime_error naming the entry and why
// it cannot run here ("cuda:1": 1 CUDA device visible).
torch::Device parse_device(const std::string& name);
// The replicas' devices: `names` parsed, or where it is empty every visible CUDA device, else the CPU.
std::vector<torch::Device> resolve_devices(const std::vector<std::string>& names);

// A tenant's random stream: exactly at::make_generator<at::CPUGeneratorImpl>(seed), whatever
// device the tenant's slot is on. Its draws are made on the host and moved (the two functions
// below), so one seed gives the same noise on the CPU and on any GPU: a CUDA generator is a
// Philox stream, which would give other draws than the CPU's Mersenne Twister for the same seed
// (a flow head trained on cuda:0 differed from the CPU's by 14.7, relative, on an H200), and it
// would make a checkpoint's RNG state device-specific.
at::Generator seeded_generator(std::uint64_t seed);
// N(0, 1) and U[0, 1) draws of `sizes` from the CPU generator `gen`, made in float32 on the
// host, then moved to `options`' device and dtype (a few kilobytes per step: one small copy).
torch::Tensor normal_draws(at::IntArrayRef sizes, at::Generator& gen, const torch::TensorOptions& options);
torch::Tensor uniform_draws(at::IntArrayRef sizes, at::Generator& gen, const torch::TensorOptions& options);

// LibTorch's global CPU generator, seeded with `seed`, held by the caller until the lock goes.
// Module initialisations draw from it (a head's, an adapter's, an RL job's value head): they are
// a function of their seed only while nothing else seeds or draws from it meanwhile, and turns
// on several executor lanes (two training lanes register tenants and start jobs side by side)
// would otherwise interleave their draws. Every such initialisation takes this lock.
[[nodiscard]] std::unique_lock<std::mutex> seed_global_generator(std::uint64_t seed);
// The same lock without seeding: for modules made only to be overwritten (a published version's
// copy of a head, a checkpoint's versions), whose draws would otherwise land between another
// thread's seeding and its draws. (The backbone's own initialisation runs once per replica,
// before its lanes start, under its own lock.)
[[nodiscard]] std::unique_lock<std::mutex> lock_global_generator();

// `host` on `device`: to a GPU through page-locked memory without waiting for the copy (the host
// goes on queueing the pass; LibTorch's pinned allocator keeps the block until the copy has
// run, and the tensor is snapshotted into it before this returns), elsewhere `.to(device)`
// (no copy on the CPU). Undefined stays undefined.
torch::Tensor upload(const torch::Tensor& host, torch::Device device);
// The rows of `parts` (each [n_i, ...], one dtype, on the host) concatenated on `device`: on a
// GPU packed once into page-locked memory and copied without waiting; on the CPU one cat.
torch::Tensor pack_rows(const std::vector<torch::Tensor>& parts, torch::Device device);

// The host copy of a result (the one device-to-host copy a reply needs). On the CPU a tensor
// that may be a view of the group's batch is cloned, so it outlives the batch either way.
torch::Tensor host_copy(const torch::Tensor& t);

// Gradient clipping as LibTorch's clip_grad_norm_ (same operations, so bitwise the same
// gradients), but the total norm stays a tensor on the parameters' device: reading it is the
// caller's one host synchronisation. max_norm <= 0: the norm only, gradients untouched.
torch::Tensor clip_gradients(const std::vector<torch::Tensor>& parameters, double max_norm);

}  // namespace nexus::model
