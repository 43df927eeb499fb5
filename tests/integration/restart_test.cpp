// A clean stop loses no finished training: SIGTERM (systemctl stop, an upgrade) or `nexusctl
// drain` between two SFT steps, a restart on the same state directory, and the tenant, attaching
// again as the same Unix user, takes its next step from where it was: the same loss as a run that
// never stopped (bitwise: deterministic mode, the same batches), so head, AdamW moments, step and
// RNG all came back. At c0d0e58 the slot was gone after the restart (NotRegistered).
#include <catch2/catch.hpp>

#include <random>

#include "nexus/client.hpp"
#include "nexus/status.hpp"
#include "processes.hpp"

using namespace nexus::test;

namespace {

constexpr int kBatch = 8;

// A fixed batch per step index: the same bytes in every run.
struct Batch {
  nexus::Tensor images, tokens, mask, state, actions;
};

Batch make_batch(nexus::Client& c, const nexus::BackboneInfo& bb, int step) {
  std::mt19937 rng(1000 + step);
  Batch b{c.alloc(nexus::DType::UInt8, {kBatch, 1, bb.image_size, bb.image_size, 3}),
          c.alloc(nexus::DType::Int32, {kBatch, bb.max_tokens}), c.alloc(nexus::DType::UInt8, {kBatch, bb.max_tokens}),
          c.alloc(nexus::DType::Float32, {kBatch, 4}), c.alloc(nexus::DType::Float32, {kBatch, 2, 2})};
  for (auto& v : b.images.raw()) v = static_cast<std::uint8_t>(rng());
  auto* tok = reinterpret_cast<std::int32_t*>(b.tokens.raw().data());
  for (std::int64_t i = 0; i < kBatch * bb.max_tokens; ++i) tok[i] = static_cast<std::int32_t>(rng() % 256);
  for (auto& v : b.mask.raw()) v = 1;
  std::normal_distribution<float> normal;
  for (auto* t : {&b.state, &b.actions}) {
    auto* f = reinterpret_cast<float*>(t->raw().data());
    for (std::size_t i = 0; i < t->raw().size() / 4; ++i) f[i] = normal(rng);
  }
  return b;
}

double step(nexus::Client& c, const nexus::BackboneInfo& bb, int i) {
  const auto b = make_batch(c, bb, i);
  const nexus::Observation obs{&b.images, &b.tokens, &b.mask, &b.state};
  return c.sft_step(obs, b.actions).loss;
}

const nexus::TenantSpec kSpec{.head = {.kind = "flow", .state_dim = 4, .action_dim = 2, .chunk = 2}, .seed = 11};

std::vector<std::string> flags(const std::string& state) {
  return {"--weights", tiny_weights_path(), "--deterministic", "--log-level", "warn", "--state-dir", state};
}

nexus::ClientOptions as(const Daemon& d, const std::string& tenant) {
  return {.socket_path = d.socket(), .tenant = tenant, .timeout = std::chrono::seconds(120)};
}

// Steps 0..5 without a stop: the losses the resumed run must reproduce.
std::vector<double> uninterrupted(const std::string& tenant) {
  TempDir dir;
  Daemon d(flags(dir.path + "/state"));
  auto c = nexus::Client::attach(as(d, tenant));
  const auto bb = c->register_tenant(kSpec);
  std::vector<double> losses;
  for (int i = 0; i < 6; ++i) losses.push_back(step(*c, bb, i));
  return losses;
}

}  // namespace

TEST_CASE("SIGTERM between two SFT steps, a restart, and the next step's loss is the uninterrupted run's",
          "[integration][model][restart]") {
  const auto reference = uninterrupted("resumer");
  TempDir dir;
  const std::string state = dir.path + "/state";
  {
    Daemon d(flags(state));
    auto c = nexus::Client::attach(as(d, "resumer"));
    const auto bb = c->register_tenant(kSpec);
    for (int i = 0; i < 3; ++i) CHECK(step(*c, bb, i) == reference[static_cast<std::size_t>(i)]);
    c.reset();  // detached: its slot stays resident (idle eviction is minutes away)
    INFO(read_file(d.log_path()));
    REQUIRE(d.stop() == 0);  // SIGTERM: a clean exit, every changed slot checkpointed
  }
  {
    Daemon d(flags(state));
    auto c = nexus::Client::attach(as(d, "resumer"));
    const auto bb = c->backbone();  // no register: that would start a fresh slot
    INFO(read_file(d.log_path()));
    CHECK(c->slot_digest().step == 3);
    CHECK(step(*c, bb, 3) == reference[3]);
    CHECK(step(*c, bb, 4) == reference[4]);  // the AdamW moments came back too
    c.reset();
    // The same through `nexusctl drain` (root may drain).
    const pid_t ctl = spawn({nexusctl_path(), "-s", d.socket(), "drain"}, {.stdout_path = dir.path + "/drain.out"});
    CHECK(wait_exit(ctl, std::chrono::seconds(30)) == 0);
    CHECK_THAT(read_file(dir.path + "/drain.out"), Catch::Contains("draining"));
    CHECK(wait_exit(d.pid(), std::chrono::seconds(60)) == 0);
  }
  Daemon d(flags(state));
  auto c = nexus::Client::attach(as(d, "resumer"));
  CHECK(step(*c, c->backbone(), 5) == reference[5]);
  CHECK(c->slot_digest().step == 6);
}

TEST_CASE("a restored slot comes back only to the Unix user that owned it, and a fresh register replaces it",
          "[integration][model][restart]") {
  TempDir dir;
  const std::string state = dir.path + "/state";
  {
    Daemon d(flags(state));
    auto c = nexus::Client::attach(as(d, "owner"));
    const auto bb = c->register_tenant(kSpec);
    step(*c, bb, 0);
    c.reset();
    REQUIRE(d.stop() == 0);
  }
  // The eviction file lives under the owner's uid: another uid claiming a released name finds no
  // slot (access_test covers other users attaching); here, a fresh registration starts over.
  Daemon d(flags(state));
  auto c = nexus::Client::attach(as(d, "owner"));
  CHECK(c->slot_digest().step == 1);
  c->register_tenant(kSpec);
  CHECK(c->slot_digest().step == 0);
  c.reset();
  REQUIRE(d.stop() == 0);
  Daemon again(flags(state));
  auto back = nexus::Client::attach(as(again, "owner"));
  CHECK(back->slot_digest().step == 0);  // the replaced slot did not come back
}
