// Tenants' adapters through nexusd (docs/design/adapters.md): a spec out of range is refused with
// a typed error; adapter tenants train beside head-only ones in shared passes, one with a huge
// learning rate harming nobody; a pinned version evaluates as published; features mode returns
// the adapted features; a stop and a restart bring the adapter back.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>

#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "nexus/client.hpp"
#include "error_code.hpp"
#include "processes.hpp"

using namespace nexus::test;

namespace {

constexpr int kBatch = 6;

struct Batch {
  nexus::Tensor images, tokens, mask, actions;
  nexus::Observation obs() const { return {&images, &tokens, &mask, nullptr}; }
};

// A fixed batch per seed: actions follow the image's mean brightness, so there is something to learn.
Batch make_batch(nexus::Client& c, const nexus::BackboneInfo& bb, unsigned seed) {
  std::mt19937 rng(seed);
  Batch b{c.alloc(nexus::DType::UInt8, {kBatch, 1, bb.image_size, bb.image_size, 3}),
          c.alloc(nexus::DType::Int32, {kBatch, bb.max_tokens}), c.alloc(nexus::DType::UInt8, {kBatch, bb.max_tokens}),
          c.alloc(nexus::DType::Float32, {kBatch, 1, 2})};
  const std::size_t per = b.images.raw().size() / kBatch;
  auto* act = reinterpret_cast<float*>(b.actions.raw().data());
  for (int i = 0; i < kBatch; ++i) {
    const auto level = static_cast<int>(rng() % 200);
    for (std::size_t k = 0; k < per; ++k) b.images.raw()[i * per + k] = static_cast<std::uint8_t>(level + rng() % 56);
    act[2 * i] = static_cast<float>(level) / 100.0f - 1.0f;
    act[2 * i + 1] = 0.5f;
  }
  for (auto& v : b.tokens.raw()) v = 0;
  for (auto& v : b.mask.raw()) v = 1;
  return b;
}

nexus::TenantSpec adapted(int rank, double lr = 1e-3) {
  nexus::TenantSpec s{.head = {.kind = "mlp_chunk", .action_dim = 2, .chunk = 1, .hidden = 64}, .seed = 3};
  s.head.adapter.rank = rank;
  s.optimizer.lr = lr;
  return s;
}

std::vector<std::string> flags(const std::string& state) {
  return {"--weights", tiny_weights_path(), "--log-level", "warn", "--state-dir", state};
}

}  // namespace

TEST_CASE("adapter tenants train beside head-only ones in shared passes: a bad spec is a typed error: versions, "
          "features and a restart keep the adapter",
          "[integration][model][adapters]") {
  TempDir dir;
  const std::string state = dir.path + "/state";
  nexus::SlotDigest before_stop;
  std::vector<float> pinned_actions;
  {
    Daemon d(flags(state));
    auto opts = [&](const std::string& t) {
      return nexus::ClientOptions{.socket_path = d.socket(), .tenant = t, .timeout = std::chrono::seconds(120)};
    };
    auto ada = nexus::Client::attach(opts("ada"));
    // Out of range: rank, projections, blocks (tiny has two), alpha.
    for (auto bad : {[] { auto s = adapted(65); return s; }(), [] { auto s = adapted(8); s.head.adapter.targets = 64; return s; }(),
                     [] { auto s = adapted(8); s.head.adapter.blocks = 0b100; return s; }(),
                     [] { auto s = adapted(8); s.head.adapter.alpha = -1; return s; }(),
                     [] { auto s = adapted(0); s.head.adapter.alpha = 4; return s; }()})
      CHECK(code_of([&] { ada->register_tenant(bad); }) == nexus::ErrorCode::BadMessage);
    const auto bb = ada->register_tenant(adapted(8));
    auto plain = nexus::Client::attach(opts("plain"));
    plain->register_tenant(adapted(0));
    auto wild = nexus::Client::attach(opts("wild"));
    wild->register_tenant(adapted(4, /*lr=*/9.0));

    const int steps = 40;
    std::vector<std::vector<double>> losses(3);
    std::vector<int> refused(3, 0), other_errors(3, 0);
    std::vector<nexus::Client*> clients = {ada.get(), plain.get(), wild.get()};
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t)
      threads.emplace_back([&, t] {
        auto& c = *clients[static_cast<std::size_t>(t)];
        for (int i = 0; i < steps; ++i) {
          const auto b = make_batch(c, bb, static_cast<unsigned>(i % 4));
          try {
            losses[static_cast<std::size_t>(t)].push_back(c.sft_step(b.obs(), b.actions).loss);
          } catch (const nexus::Error& e) {
            ++(e.code() == nexus::ErrorCode::BadBatch ? refused : other_errors)[static_cast<std::size_t>(t)];
          }
        }
      });
    for (auto& th : threads) th.join();
    const auto st = nexus::query_status(d.socket());
    INFO("groups " << st.model_groups << " requests " << st.model_requests);
    CHECK(st.model_requests > st.model_groups);  // some passes served several tenants
    for (int t = 0; t < 2; ++t) {
      INFO("tenant " << t);
      CHECK(refused[static_cast<std::size_t>(t)] == 0);
      CHECK(other_errors[static_cast<std::size_t>(t)] == 0);
      REQUIRE(losses[static_cast<std::size_t>(t)].size() == steps);
      CHECK(losses[static_cast<std::size_t>(t)].back() < losses[static_cast<std::size_t>(t)].front());
    }
    CHECK(other_errors[2] == 0);  // the wild one: its steps go through or are refused (BadBatch), nothing else

    // A published version evaluates as it was published, however the adapter trains on.
    const auto probe = make_batch(*ada, bb, 99);
    const auto v = ada->publish();
    pinned_actions = ada->predict(probe.obs(), v).actions;
    for (int i = 0; i < 5; ++i) ada->sft_step(probe.obs(), probe.actions);
    CHECK(ada->predict(probe.obs(), v).actions == pinned_actions);
    CHECK(ada->predict(probe.obs()).actions != pinned_actions);

    // Features mode returns the tenant's adapted features: not the plain backbone's.
    auto out_a = ada->alloc(nexus::DType::Float32, {kBatch, bb.feature_dim});
    auto out_p = plain->alloc(nexus::DType::Float32, {kBatch, bb.feature_dim});
    const auto probe_p = make_batch(*plain, bb, 99);
    ada->features(probe.obs(), out_a);
    plain->features(probe_p.obs(), out_p);
    CHECK(out_a.raw().size() == out_p.raw().size());
    CHECK_FALSE(std::equal(out_a.raw().begin(), out_a.raw().end(), out_p.raw().begin()));

    // nexusctl tenants shows each tenant's adapter.
    const pid_t ctl = spawn({nexusctl_path(), "-s", d.socket(), "tenants", "--json"}, {.stdout_path = dir.path + "/t.json"});
    REQUIRE(wait_exit(ctl, std::chrono::seconds(30)) == 0);
    std::map<std::string, std::string> shown;
    const auto listed = nlohmann::json::parse(read_file(dir.path + "/t.json"));
    for (const auto& t : listed["tenants"])
      shown[t["name"].get<std::string>()] = t["adapter"].get<std::string>();
    CHECK(shown["ada"] == "rank 8, alpha 8, q k v o mlp_in mlp_out, blocks all");
    CHECK(shown["wild"] == "rank 4, alpha 4, q k v o mlp_in mlp_out, blocks all");
    CHECK(shown["plain"].empty());

    before_stop = ada->slot_digest();
    ada.reset(), plain.reset(), wild.reset();
    INFO(read_file(d.log_path()));
    REQUIRE(d.stop() == 0);  // every changed slot checkpointed, adapters included
  }
  Daemon d(flags(state));
  auto ada = nexus::Client::attach({.socket_path = d.socket(), .tenant = "ada", .timeout = std::chrono::seconds(120)});
  const auto bb = ada->backbone();
  const auto after = ada->slot_digest();
  CHECK(after.parameters == before_stop.parameters);
  CHECK(after.optimizer == before_stop.optimizer);
  CHECK(after.step == before_stop.step);
  const auto probe = make_batch(*ada, bb, 99);
  CHECK(ada->predict(probe.obs(), after.latest_version).actions == pinned_actions);
}

namespace {

// ada's losses over 6 steps on a deterministic nexusd, alone or beside a head-only tenant
// training at the same time.
std::vector<double> deterministic_losses(bool beside) {
  TempDir dir;
  auto args = flags(dir.path + "/state");
  args.push_back("--deterministic");
  Daemon d(args);
  auto opts = [&](const std::string& t) {
    return nexus::ClientOptions{.socket_path = d.socket(), .tenant = t, .timeout = std::chrono::seconds(120)};
  };
  auto ada = nexus::Client::attach(opts("ada"));
  const auto bb = ada->register_tenant(adapted(8));
  std::thread other;
  if (beside)
    other = std::thread([&] {
      auto plain = nexus::Client::attach(opts("plain"));
      plain->register_tenant(adapted(4));
      for (int i = 0; i < 6; ++i) {
        const auto b = make_batch(*plain, bb, static_cast<unsigned>(50 + i));
        plain->sft_step(b.obs(), b.actions);
      }
    });
  std::vector<double> losses;
  for (int i = 0; i < 6; ++i) {
    const auto b = make_batch(*ada, bb, static_cast<unsigned>(i));
    losses.push_back(ada->sft_step(b.obs(), b.actions).loss);
  }
  if (other.joinable()) other.join();
  return losses;
}

}  // namespace

TEST_CASE("deterministic mode: an adapter tenant's losses are bitwise the same alone and beside another adapter",
          "[integration][model][adapters][equivalence]") {
  const auto alone = deterministic_losses(false), beside = deterministic_losses(true);
  CHECK(alone == beside);
  CHECK(alone.back() != alone.front());  // it trained
}

// RL with an adapter (adapters.md, RL): the job's records keep their observations and each
// update re-runs the adapted backbone on them, so the adapter learns, which features mode shows;
// the backbone itself does not move (a head-only tenant's features stay bitwise as they were).
// A job whose observations would not fit the job's bound is refused before it starts.
TEST_CASE("an RL job trains an adapter tenant's adapter through the backbone and leaves the backbone as it was",
          "[integration][model][adapters][rl]") {
  TempDir dir;
  Daemon d(flags(dir.path + "/state"));
  auto opts = [&](const std::string& t) {
    return nexus::ClientOptions{.socket_path = d.socket(), .tenant = t, .timeout = std::chrono::seconds(120)};
  };
  auto rla = nexus::Client::attach(opts("rla"));
  nexus::TenantSpec spec{.head = {.kind = "gaussian", .state_dim = 4, .action_dim = 2, .chunk = 1, .hidden = 64}, .seed = 3};
  spec.head.adapter.rank = 4;
  const auto bb = rla->register_tenant(spec);
  auto plain = nexus::Client::attach(opts("plain"));
  plain->register_tenant(adapted(0));

  auto features_of = [&](nexus::Client& c) {
    const auto probe = make_batch(c, bb, 7);
    auto out = c.alloc(nexus::DType::Float32, {kBatch, bb.feature_dim});
    c.features(probe.obs(), out);
    return std::vector<std::uint8_t>(out.raw().begin(), out.raw().end());
  };
  const auto adapted_before = features_of(*rla), plain_before = features_of(*plain);
  CHECK(adapted_before == plain_before);  // a new adapter (B = 0) changes nothing

  // Over the bound: 16 x 4096 steps of 64 px frames, four records in flight, is about 3 GiB.
  // (A head-only tenant keeps features alone and may run it.)
  try {
    rla->rl_start({.sessions = 16, .horizon = 4096, .iterations = 1});
    FAIL("an RL job over the observation bound started");
  } catch (const nexus::Error& e) {
    CHECK(e.code() == nexus::ErrorCode::JobFailed);
    CHECK(std::string(e.what()).find("MiB a job may hold") != std::string::npos);
  }

  auto run = [&](const nexus::RlOptions& o) {
    rla->rl_start(o);
    nexus::RlStatus st;
    for (int i = 0; i < 1200; ++i) {  // at most 2 minutes
      st = rla->rl_status();
      if (st.state != "running") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    INFO(o.algorithm << " " << st.state << ": " << st.error);
    CHECK(st.state == "done");
    CHECK(st.iterations == o.iterations);
    return st;
  };
  const auto ppo = run({.sessions = 4, .horizon = 8, .iterations = 3, .epochs = 2, .minibatch = 16, .synchronous = true});
  // What its records may hold: every step's frame, tokens and mask, in the record being collected,
  // the two queued and the one being updated on. (Minibatches run as parts while others are
  // active or inference ran within 2 s: tests/model/rl_adapter_test.cpp holds the parts to the whole.)
  const std::uint64_t per_step = std::uint64_t(bb.image_size) * bb.image_size * 3 + std::uint64_t(bb.max_tokens) * 5;
  CHECK(ppo.observation_bytes == 4 * 8 * per_step * (2 + 2));
  INFO("minibatches run as parts: " << ppo.split_minibatches);
  // The job's update turns ran while inference (its own acting) was recent: they count among the
  // shared turns, which an RL minibatch's turn once did not (the only training turns here).
  CHECK(nexus::query_status(d.socket()).longest_shared_training_turn_s > 0);
  const auto after_ppo = features_of(*rla);
  CHECK(after_ppo != adapted_before);  // the adapter learned: the updates reached it
  run({.algorithm = "grpo", .sessions = 4, .group_size = 2, .iterations = 2, .max_steps = 6, .epochs = 2,
       .minibatch = 16, .synchronous = true});
  CHECK(features_of(*rla) != after_ppo);
  CHECK(features_of(*plain) == plain_before);  // the backbone did not move
}

// [model] precision bf16 through nexusd (precision.hpp): a head-only tenant's features come back
// float32, within the bf16 bound (tests/model/precision_test.cpp) of a float32 daemon's and not
// equal to them; an adapter tenant beside it trains in the same passes (its loss falls).
TEST_CASE("a bf16 daemon serves features within the bound of a float32 daemon's and trains adapters in its passes",
          "[integration][model][adapters][precision]") {
  TempDir dir;
  auto features = [&](const std::vector<std::string>& extra, const std::string& state) {
    auto f = flags(dir.path + state);
    f.insert(f.end(), extra.begin(), extra.end());
    Daemon d(f);
    auto c = nexus::Client::attach({.socket_path = d.socket(), .tenant = "plain", .timeout = std::chrono::seconds(120)});
    const auto bb = c->register_tenant(adapted(0));
    const auto probe = make_batch(*c, bb, 11);
    auto out = c->alloc(nexus::DType::Float32, {kBatch, bb.feature_dim});
    c->features(probe.obs(), out);
    std::vector<float> v(static_cast<std::size_t>(kBatch * bb.feature_dim));
    std::memcpy(v.data(), out.raw().data(), v.size() * sizeof(float));
    if (!extra.empty()) {  // the bf16 daemon: an adapter tenant trains in passes beside the plain one's
      auto ada = nexus::Client::attach({.socket_path = d.socket(), .tenant = "ada", .timeout = std::chrono::seconds(120)});
      ada->register_tenant(adapted(4, 3e-3));
      const auto batch = make_batch(*ada, bb, 12);
      std::vector<double> losses;
      for (int i = 0; i < 30; ++i) {  // both in flight at once: they may share a pass
        auto step = ada->sft_step_async(batch.obs(), batch.actions);
        c->features(probe.obs(), out);
        losses.push_back(step.get().loss);
      }
      INFO("adapter tenant at bf16: first loss " << losses.front() << ", last " << losses.back());
      CHECK(std::isfinite(losses.back()));
      CHECK(losses.back() < losses.front());
    }
    return v;
  };
  const auto f32 = features({}, "/f32"), bf16 = features({"--precision", "bf16"}, "/bf16");
  REQUIRE(f32.size() == bf16.size());
  double largest = 0, difference = 0;
  for (std::size_t i = 0; i < f32.size(); ++i)
    largest = std::max(largest, std::abs(double(f32[i]))), difference = std::max(difference, std::abs(double(bf16[i]) - f32[i]));
  INFO("bf16 against float32 through nexusd: " << difference / largest << " of the largest feature");
  CHECK(difference > 0);
  CHECK(difference <= 0.02 * largest);
}
