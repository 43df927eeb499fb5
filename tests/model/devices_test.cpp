// The device-agnostic pieces of the model code (daemon/model/devices.hpp) and a slot's device
// contract. On a machine without a GPU the CUDA cases say so and check only what the CPU can:
// that a CUDA entry is refused with the reason, and that a checkpoint from a CUDA slot loads here.
// scripts/gpu-check.sh runs the same binary where a GPU is.
#include <ATen/CPUGeneratorImpl.h>
#include <ATen/record_function.h>
#include <torch/torch.h>
#undef CHECK
#include <catch2/catch.hpp>

#include <cmath>
#include <string_view>
#include <nlohmann/json.hpp>

#include "daemon/model/devices.hpp"
#include "daemon/model/safetensors.hpp"
#include "daemon/model/tenant_slot.hpp"
#include "processes.hpp"

using namespace nexus;

namespace {

bool have_cuda() {
  if (torch::cuda::is_available()) return true;
  WARN("no CUDA device here: the CUDA half of this case did not run");
  return false;
}

model::VLAFeature random_features(std::int64_t n, std::int64_t dim, torch::Device device = torch::kCPU) {
  torch::manual_seed(5);
  return {torch::randn({n, 4, dim}).to(device), torch::randn({n, dim}).to(device),
          torch::ones({n, 4}, torch::kBool).to(device)};
}

}  // namespace

TEST_CASE("devices: cpu and visible cuda:N are devices, anything else is refused with the reason", "[model][devices]") {
  CHECK(model::parse_device("cpu") == torch::Device(torch::kCPU));
  CHECK(model::parse_device("cpu:0") == torch::Device(torch::kCPU));
  CHECK_THROWS_WITH(model::parse_device("tpu:0"), Catch::Contains("\"tpu:0\" is not a device"));
  CHECK_THROWS_WITH(model::parse_device("cuda:x"), Catch::Contains("is not a device"));
  CHECK_THROWS_WITH(model::parse_device("cuda:63"), Catch::Contains("CUDA device(s) visible to nexusd"));
  const auto all = model::resolve_devices({});
  const auto visible = torch::cuda::is_available() ? torch::cuda::device_count() : 0;
  if (visible == 0) {
    REQUIRE(all.size() == 1);
    CHECK(all[0].is_cpu());
  } else {
    REQUIRE(all.size() == visible);
    for (std::size_t i = 0; i < all.size(); ++i) CHECK(all[i] == torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(i)));
  }
  CHECK(model::resolve_devices({"cpu", "cpu"}).size() == 2);
}

TEST_CASE("devices: a CPU slot generator is the CPU generator of the seed, bit for bit", "[model][devices]") {
  auto ours = model::seeded_generator(42);
  auto reference = at::make_generator<at::CPUGeneratorImpl>(42);
  torch::randn({7}, ours);  // both streams advance alike, normals' cached halves included
  torch::randn({7}, reference);
  CHECK(torch::equal(torch::randn({5, 3}, ours), torch::randn({5, 3}, reference)));
  CHECK(torch::equal(ours.get_state(), reference.get_state()));
  auto again = model::seeded_generator(42);
  CHECK_FALSE(torch::equal(again.get_state(), ours.get_state()));  // a fresh stream, not a shared one
}

TEST_CASE("devices: a slot's noise is its seed's CPU stream on every device: drawn on the host and moved",
          "[model][devices]") {
  auto gen = model::seeded_generator(5);
  auto reference = at::make_generator<at::CPUGeneratorImpl>(5);
  const auto as_double = torch::TensorOptions().dtype(torch::kFloat64);
  const auto normal = model::normal_draws({4, 3}, gen, as_double);
  CHECK(normal.dtype() == torch::kFloat64);
  CHECK(torch::equal(normal, torch::randn({4, 3}, reference, torch::kFloat32).to(torch::kFloat64)));
  CHECK(torch::equal(model::uniform_draws({6}, gen, torch::kFloat32), torch::rand({6}, reference, torch::kFloat32)));
  // A flow head's source noise and times: the same draws, in that order, scaled.
  const model::HeadSpec spec{.kind = "flow", .action_dim = 2, .chunk = 3, .hidden = 16};
  auto head = model::make_head(spec, 32);
  auto drawn = head->draw_noise(5, gen, torch::kFloat32);
  auto x0 = torch::randn({5, 6}, reference, torch::kFloat32) * spec.flow_noise;
  auto t = torch::rand({5, 1}, reference, torch::kFloat32);
  CHECK(torch::equal(drawn, torch::cat({x0, t}, 1)));
  CHECK(torch::equal(gen.get_state(), reference.get_state()));
  if (!have_cuda()) return;
  const torch::Device gpu(torch::kCUDA, 0);
  auto on_gpu = model::seeded_generator(5), on_cpu = model::seeded_generator(5);
  CHECK(torch::equal(head->draw_noise(7, on_gpu, torch::TensorOptions().device(gpu)).cpu(),
                     head->draw_noise(7, on_cpu, torch::kFloat32)));
}

TEST_CASE("devices: gradient clipping keeps its norm on the device and equals LibTorch's", "[model][devices]") {
  auto make = [] {
    torch::manual_seed(11);
    auto net = torch::nn::Linear(8, 3);
    net->forward(torch::randn({16, 8})).pow(2).sum().backward();
    return net;
  };
  auto ours = make(), reference = make();
  const auto norm = model::clip_gradients(ours->parameters(), 0.5);
  CHECK(norm.dim() == 0);  // a tensor: reading it is the caller's one sync
  const double expected = torch::nn::utils::clip_grad_norm_(reference->parameters(), 0.5);
  CHECK(norm.item<double>() == Approx(expected).epsilon(1e-6));
  REQUIRE(expected > 0.5);  // so clipping acted
  for (std::size_t i = 0; i < ours->parameters().size(); ++i)
    CHECK(torch::allclose(ours->parameters()[i].grad(), reference->parameters()[i].grad(), 1e-6, 1e-7));
  double clipped = 0;
  for (const auto& p : ours->parameters()) clipped += p.grad().pow(2).sum().item<double>();
  CHECK(std::sqrt(clipped) == Approx(0.5).epsilon(1e-4));
  auto untouched = make();
  const auto before = untouched->weight.grad().clone();
  CHECK(model::clip_gradients(untouched->parameters(), 0).item<double>() == Approx(expected).epsilon(1e-6));
  CHECK(torch::equal(untouched->weight.grad(), before));  // max_norm 0: the norm only
}

TEST_CASE("devices: a NaN loss is refused after backward, with no update and the slot's state unchanged",
          "[model][devices][isolation]") {
  model::TenantSlot slot({.kind = "mlp_chunk", .action_dim = 2, .chunk = 1, .hidden = 16}, {}, 32, 3);
  const auto f = random_features(4, 32);
  slot.sft_step(f, {}, torch::zeros({4, 1, 2}));
  const auto before = slot.digest();
  auto gen = model::seeded_generator(1);
  try {
    slot.policy_step([&](model::ActionHead& head) { return head.loss(f, {}, torch::zeros({4, 1, 2}), gen) * std::nan(""); });
    FAIL("a NaN loss made a step");
  } catch (const model::SlotError& e) {
    CHECK(std::string(e.what()).find("loss is NaN or Inf; no update made") != std::string::npos);
  }
  const auto after = slot.digest();
  CHECK(after.parameters == before.parameters);
  CHECK(after.optimizer == before.optimizer);
  CHECK(after.step == before.step);
  // And the next good step is as if the refused one never happened: no stale gradient.
  model::TenantSlot twin({.kind = "mlp_chunk", .action_dim = 2, .chunk = 1, .hidden = 16}, {}, 32, 3);
  twin.sft_step(f, {}, torch::zeros({4, 1, 2}));
  CHECK(slot.sft_step(f, {}, torch::ones({4, 1, 2})).loss == twin.sft_step(f, {}, torch::ones({4, 1, 2})).loss);
  CHECK(slot.digest().parameters == twin.digest().parameters);
}

TEST_CASE("devices: a checkpoint whose RNG is a CUDA state (written before slots drew on the host) loads reseeded", "[model][devices]") {
  test::TempDir dir;
  const model::HeadSpec spec{.kind = "flow", .action_dim = 2, .chunk = 2, .hidden = 16};
  model::TenantSlot slot(spec, {}, 32, 8);
  slot.sft_step(random_features(4, 32), {}, torch::zeros({4, 2, 2}));
  const auto path = dir.path + "/slot";
  slot.save(path);
  auto file = model::read_safetensors(path + ".safetensors");
  auto manifest = nlohmann::json::parse(file.metadata.at("nexus.manifest"));
  CHECK(manifest.at("rng_device") == "cpu");
  CHECK(file.tensors.at("rng").data.size() ==
        static_cast<std::size_t>(at::make_generator<at::CPUGeneratorImpl>(1).get_state().numel()));
  // What a slot on a GPU writes: its generator's kind, and a Philox state (seed and offset).
  manifest["rng_device"] = "cuda";
  file.metadata["nexus.manifest"] = manifest.dump();
  file.tensors["rng"] = model::SafeTensor{"U8", {16}, std::vector<std::uint8_t>(16, 7)};
  model::write_safetensors(path + "_cuda.safetensors", file, 0600);
  const auto a = model::TenantSlot::load(path + "_cuda", 32), b = model::TenantSlot::load(path + "_cuda", 32);
  CHECK(a.slot->digest().parameters == slot.digest().parameters);  // parameters and moments carried over
  CHECK(a.slot->digest().optimizer == b.slot->digest().optimizer);  // the reseeded stream: a function of the file
  CHECK(a.slot->digest().optimizer != slot.digest().optimizer);
  const auto f = random_features(4, 32);
  CHECK(a.slot->sft_step(f, {}, torch::zeros({4, 2, 2})).loss == b.slot->sft_step(f, {}, torch::zeros({4, 2, 2})).loss);
}

TEST_CASE("devices: a slot on a CUDA device trains like one on the CPU, and its checkpoint loads on the CPU",
          "[model][devices][cuda]") {
  if (!have_cuda()) return;
  const torch::Device gpu(torch::kCUDA, 0);
  for (const char* kind : {"mlp_chunk", "flow"}) {  // flow draws noise and times every step
    INFO(kind);
    const model::HeadSpec spec{.kind = kind, .action_dim = 2, .chunk = 2, .hidden = 32};
    model::TenantSlot on_cpu(spec, {}, 32, 4), on_gpu(spec, {}, 32, 4, gpu);
    REQUIRE(on_gpu.head().parameters().front().device() == gpu);
    torch::manual_seed(9);
    const auto target = torch::randn({8, 2, 2});
    for (int i = 0; i < 20; ++i) {
      const auto a = on_cpu.sft_step(random_features(8, 32), {}, target);
      const auto b = on_gpu.sft_step(random_features(8, 32, gpu), {}, target.to(gpu));
      INFO("step " << i << ": cpu " << a.loss << ", cuda " << b.loss);
      CHECK(b.loss == Approx(a.loss).epsilon(1e-3));
    }
    test::TempDir dir;
    on_gpu.save(dir.path + "/gpu");
    auto back = model::TenantSlot::load(dir.path + "/gpu", 32);
    CHECK(back.slot->digest().parameters == on_gpu.digest().parameters);
    const auto f = random_features(8, 32);
    if (spec.kind == "mlp_chunk")  // a flow prediction draws from each slot's own inference stream
      CHECK(torch::allclose(back.slot->predict(f, {}), on_gpu.predict(random_features(8, 32, gpu), {}).cpu(), 1e-4, 1e-5));
  }
}

namespace {

// Counts, on this thread, the reads of a tensor's value back to the host (`.item()`, a tensor
// used as a bool: both reach aten::_local_scalar_dense). On a GPU each one waits for the
// device; on the CPU they are counted through LibTorch's RecordFunction observer.
class HostReads {
 public:
  HostReads() : handle_(at::addThreadLocalCallback(at::RecordFunctionCallback(&on_op))) { count() = 0; }
  ~HostReads() { at::removeCallback(handle_); }
  HostReads(const HostReads&) = delete;
  HostReads& operator=(const HostReads&) = delete;
  int seen() const { return count(); }

 private:
  static int& count() {
    static thread_local int n = 0;
    return n;
  }
  static std::unique_ptr<at::ObserverContext> on_op(const at::RecordFunction& fn) {
    if (std::string_view(fn.name()) == "aten::_local_scalar_dense") ++count();
    return nullptr;
  }
  at::RecordFunctionGuard enabled_{true};
  at::CallbackHandle handle_;
};

}  // namespace

TEST_CASE("devices: a step reads nothing back to the host but its one result copy, and predict reads nothing",
          "[model][devices]") {
  const auto f = random_features(8, 32);
  const auto target = torch::zeros({8, 2, 2});
  for (const char* kind : {"mlp_chunk", "flow", "gaussian"}) {
    INFO(kind);
    model::TenantSlot slot({.kind = kind, .action_dim = 2, .chunk = 2, .hidden = 16}, {}, 32, 1);
    slot.sft_step(f, {}, target);  // AdamW's state exists from here on
    {
      HostReads reads;
      slot.sft_step(f, {}, target);
      // One: the finiteness check of host actions (check_inputs), which device tensors skip
      // (bind() checked their host copies). The step's loss and norm come back through one
      // device-to-host copy read in place, not .item().
      CHECK(reads.seen() == 1);
    }
    HostReads reads;
    slot.predict(f, {});
    CHECK(reads.seen() == 0);
  }
}

TEST_CASE("devices: a group's inputs are packed once and reach the device equal, the CPU's without a copy",
          "[model][devices]") {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(3);
  const std::vector<torch::Tensor> parts = {torch::randint(0, 256, {2, 1, 8, 8, 3}, gen, torch::kUInt8),
                                            torch::randint(0, 256, {3, 1, 8, 8, 3}, gen, torch::kUInt8),
                                            torch::randint(0, 256, {1, 1, 8, 8, 3}, gen, torch::kUInt8)};
  const auto expected = torch::cat(parts);
  const auto on_cpu = model::pack_rows(parts, torch::kCPU);
  CHECK(torch::equal(on_cpu, expected));
  CHECK(model::upload(on_cpu, torch::kCPU).data_ptr() == on_cpu.data_ptr());  // the CPU's: no copy
  CHECK_FALSE(model::upload(torch::Tensor(), torch::kCPU).defined());
  if (!have_cuda()) return;
  const torch::Device cuda("cuda:0");
  const auto packed = model::pack_rows(parts, cuda);
  CHECK(packed.device() == cuda);
  CHECK(torch::equal(packed.cpu(), expected));
  auto state = torch::randn({4, 3}, gen);
  const auto uploaded = model::upload(state, cuda);
  state.fill_(7);  // the upload is a snapshot: what the tenant writes after it does not reach the device
  CHECK_FALSE(torch::equal(uploaded.cpu(), state));
}
