// Regions ([ipc] allow_device_regions): memory a tenant registers with nexusd, named by offset
// in requests, written by features mode. Tried as an attacker would: an id from another
// attachment, a tensor that fits the region it was cut from but not the one its id names
// there, an id after unregister, a tenant SIGKILLed while registered, and a daemon with regions
// off. (Unsealed and short memfds: tests/unit/regions_test.cpp, on the RegionTable itself.)
#include <catch2/catch.hpp>

#include <signal.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "nexus/client.hpp"
#include "processes.hpp"
#include "schema/cuda_vmm.hpp"
#include "tenant_run.hpp"

using namespace nexus::test;
using nexus::DType;
using nexus::ErrorCode;

namespace {

std::vector<std::string> daemon_args(const TempDir& dir, bool allow) {
  std::vector<std::string> a = {"--weights", tiny_weights_path(), "--log-level", "warn", "--state-dir", dir.path + "/state"};
  if (allow) a.push_back("--allow-device-regions");
  return a;
}

std::unique_ptr<nexus::Client> attach(const Daemon& d, const std::string& name) {
  return nexus::Client::attach({.socket_path = d.socket(), .tenant = name, .timeout = std::chrono::seconds(60)});
}

// An observation of n samples cut from `region` at 0 (images, tokens, mask), and the bytes it
// needs. Inputs are synthetic: what matters here is where they lie.
struct RegionObs {
  nexus::Tensor images, tokens, mask;
  nexus::Observation obs() const { return {&images, &tokens, &mask, nullptr}; }
};
std::uint64_t obs_bytes(const nexus::BackboneInfo& bb, std::int64_t n) {
  return static_cast<std::uint64_t>(n * bb.image_size * bb.image_size * 3 + n * bb.max_tokens * 5);
}
RegionObs obs_in(const nexus::Region& r, const nexus::BackboneInfo& bb, std::int64_t n) {
  const std::uint64_t img = static_cast<std::uint64_t>(n * bb.image_size * bb.image_size * 3);
  RegionObs o{r.tensor(DType::UInt8, {n, 1, bb.image_size, bb.image_size, 3}, 0),
              r.tensor(DType::Int32, {n, bb.max_tokens}, img),
              r.tensor(DType::UInt8, {n, bb.max_tokens}, img + static_cast<std::uint64_t>(n * bb.max_tokens * 4))};
  for (std::int64_t i = 0; i < n; ++i) nexus::tokenize("reach the red ball", o.tokens, o.mask, i);
  return o;
}

ErrorCode code_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const nexus::Error& e) {
    return e.code();
  }
  return ErrorCode::None;
}

}  // namespace

TEST_CASE("regions are refused unless the daemon allows them", "[integration][model][regions]") {
  TempDir dir;
  Daemon daemon(daemon_args(dir, false));
  auto c = attach(daemon, "alice");
  CHECK(code_of([&] { c->register_host_region(1 << 20); }) == ErrorCode::PermissionDenied);
  c->ping({});  // the attachment serves on
}

TEST_CASE("requests by offset in a region: predictions equal the arena's, and foreign, stale and out-of-bounds "
          "references are typed errors",
          "[integration][model][regions]") {
  TempDir dir;
  Daemon daemon(daemon_args(dir, true));
  auto alice = attach(daemon, "alice");
  const auto bb = alice->register_tenant({.head = {.kind = "mlp_chunk", .action_dim = 2, .chunk = 2}});
  const std::int64_t n = 4;
  const auto big = alice->register_host_region(obs_bytes(bb, n) + (1 << 20));
  const auto in_region = obs_in(big, bb, n);
  for (std::size_t i = 0; i < in_region.images.bytes(); ++i) in_region.images.raw()[i] = static_cast<std::uint8_t>(i * 7);

  // The same observation in the arena: the same actions.
  auto images = alice->alloc(DType::UInt8, {n, 1, bb.image_size, bb.image_size, 3});
  auto tokens = alice->alloc(DType::Int32, {n, bb.max_tokens});
  auto mask = alice->alloc(DType::UInt8, {n, bb.max_tokens});
  std::memcpy(images.raw().data(), in_region.images.raw().data(), images.bytes());
  std::memcpy(tokens.raw().data(), in_region.tokens.raw().data(), tokens.bytes());
  std::memcpy(mask.raw().data(), in_region.mask.raw().data(), mask.bytes());
  const auto from_arena = alice->predict({&images, &tokens, &mask, nullptr});
  const auto from_region = alice->predict(in_region.obs());
  CHECK(from_region.actions == from_arena.actions);

  // Features written into the arena from region inputs: the shape is checked.
  auto wrong = alice->alloc(DType::Float32, {n, bb.feature_dim + 1});
  CHECK(code_of([&] { alice->features(in_region.obs(), wrong); }) == ErrorCode::BadBatch);

  // Another attachment: alice's ids mean nothing there, or name its own, smaller region.
  auto mallory = attach(daemon, "mallory");
  CHECK(code_of([&] { mallory->features(in_region.obs(), wrong); }) == ErrorCode::UnknownRegion);
  const auto small = mallory->register_host_region(4096);
  REQUIRE(small.id() == big.id());  // ids are per attachment: the same number, another region
  CHECK(code_of([&] { mallory->features(in_region.obs(), wrong); }) == ErrorCode::TensorOutOfBounds);
  CHECK(code_of([&] { mallory->predict(in_region.obs()); }) == ErrorCode::TensorOutOfBounds);

  // After unregister: the id is stale for requests, and for a second unregister.
  alice->unregister_region(big);
  CHECK(code_of([&] { alice->predict(in_region.obs()); }) == ErrorCode::UnknownRegion);
  CHECK(code_of([&] { alice->unregister_region(big); }) == ErrorCode::UnknownRegion);
  // Requests that take arena tensors only refuse a region's.
  CHECK(code_of([&] { alice->digest(in_region.images); }) == ErrorCode::BadMessage);
  CHECK(alice->predict({&images, &tokens, &mask, nullptr}).actions == from_arena.actions);  // alice serves on
}

TEST_CASE("a head in the tenant's process learns on features written into its region, and a SIGKILLed tenant's "
          "region is unmapped",
          "[integration][model][regions]") {
  TempDir dir;
  Daemon daemon(daemon_args(dir, true));
  const auto [rc, report] = run_json({NEXUS_TEST_FEATURES_TENANT, "--socket", daemon.socket(), "--tenant", "erin",
                                      "--train", "512", "--heldout", "256"},
                                     dir, "erin");
  INFO(read_file(dir.path + "/erin.err"));
  REQUIRE(rc == 0);
  INFO(report.dump());
  CHECK(report["heldout_mse"].get<double>() < 0.5 * report["baseline_mse"].get<double>());

  REQUIRE(eventually([&] { return count_mappings(daemon.pid(), "nexus-region") == 0; }, std::chrono::seconds(5)));
  const pid_t victim = spawn({NEXUS_TEST_FEATURES_TENANT, "--socket", daemon.socket(), "--tenant", "victim",
                              "--train", "100000", "--heldout", "1"},
                             {.stdout_path = dir.path + "/victim.out", .stderr_path = dir.path + "/victim.err"});
  REQUIRE(eventually([&] { return count_mappings(daemon.pid(), "nexus-region") == 1; }, std::chrono::seconds(30)));
  // Mapped once; the descriptor is not kept (closed just after the mmap: waited for).
  CHECK(eventually([&] { return count_fds(daemon.pid(), "nexus-region") == 0; }));
  ::kill(victim, SIGKILL);
  wait_exit(victim, std::chrono::seconds(10));
  CHECK(eventually([&] { return count_mappings(daemon.pid(), "nexus-region") == 0; }, std::chrono::seconds(10)));
}

// A CUDA region (cuMemCreate memory, exported as a descriptor). Without a driver the client
// says so and sends nothing; with one, nexusd maps it, reads inputs from it and writes features
// into it (scripts/gpu-check.sh runs that half).
TEST_CASE("a device region: without a CUDA driver the client refuses with the reason and registers nothing and with one features go through it",
          "[integration][model][regions][cuda]") {
  TempDir dir;
  Daemon daemon(daemon_args(dir, true));
  auto c = attach(daemon, "alice");
  if (const auto why = nexus::cuda_vmm::driver_unavailable_reason(); !why.empty()) {
    WARN("no CUDA driver here: " << why);
    try {
      c->register_device_region(1 << 20);
      FAIL("a device region was made without a driver");
    } catch (const nexus::Error& e) {
      CHECK(e.code() == ErrorCode::WrongMessageType);
      CHECK_THAT(e.what(), Catch::Contains("cannot make a CUDA region") && Catch::Contains(why));
    }
    CHECK(c->register_host_region(1 << 20).id() == 1);  // nothing was registered before it
    return;
  }
  const auto region = c->register_device_region(1 << 20);
  CHECK(region.id() == 1);
  CHECK(region.device() == 0);
  CHECK(region.device_address() != 0);
  CHECK(region.raw().empty());
  CHECK(c->register_host_region(1 << 20).id() == 2);

  // Features of one observation written into the device region equal the arena's, bit for bit,
  // and the observation read from the device region gives them too.
  const auto bb = c->backbone();
  const std::int64_t n = 2;
  auto images = c->alloc(DType::UInt8, {n, 1, bb.image_size, bb.image_size, 3});
  auto tokens = c->alloc(DType::Int32, {n, bb.max_tokens});
  auto mask = c->alloc(DType::UInt8, {n, bb.max_tokens});
  for (std::size_t i = 0; i < images.bytes(); ++i) images.raw()[i] = static_cast<std::uint8_t>(i * 7);
  for (std::int64_t i = 0; i < n; ++i) nexus::tokenize("reach the red ball", tokens, mask, i);
  auto in_arena = c->alloc(DType::Float32, {n, bb.feature_dim});
  c->features({&images, &tokens, &mask, nullptr}, in_arena);
  const auto out_bytes = static_cast<std::uint64_t>(n * bb.feature_dim * 4);
  REQUIRE(region.bytes() >= out_bytes + images.bytes() + tokens.bytes() + mask.bytes());
  const auto out = region.tensor(DType::Float32, {n, bb.feature_dim}, 0);
  c->features({&images, &tokens, &mask, nullptr}, out);
  std::vector<std::uint8_t> back(out_bytes);
  REQUIRE(nexus::cuda_vmm::copy_to_host(region.device(), region.device_address(), back.data(), back.size()).empty());
  CHECK(std::memcmp(back.data(), in_arena.raw().data(), back.size()) == 0);
  std::uint64_t at = out_bytes;
  auto on_device = [&](const nexus::Tensor& t) {
    REQUIRE(nexus::cuda_vmm::copy_from_host(region.device(), region.device_address() + at, t.raw().data(), t.bytes()).empty());
    auto moved = region.tensor(t.dtype(), t.shape(), at);
    at += t.bytes();
    return moved;
  };
  const auto d_images = on_device(images), d_tokens = on_device(tokens), d_mask = on_device(mask);
  auto from_device = c->alloc(DType::Float32, {n, bb.feature_dim});
  c->features({&d_images, &d_tokens, &d_mask, nullptr}, from_device);
  CHECK(std::memcmp(from_device.raw().data(), in_arena.raw().data(), out_bytes) == 0);

  c->unregister_region(region);
  CHECK(code_of([&] { c->unregister_region(region); }) == ErrorCode::UnknownRegion);
}
