// The Environment Service with real MuJoCo sessions: ownership, per-session errors, and a
// session that faults. The faulting session is a real reach task wrapped so that its step throws
// after a few steps, plugged in through the service's session factory (the seam external
// environments use): what is under test is the service's isolation, not the simulator.
#include <catch2/catch.hpp>

#include <cmath>

#include "daemon/env/builtin_session.hpp"
#include "daemon/env/env_service.hpp"

using namespace nexus::env;

namespace {

class FaultAfter final : public EnvSession {
 public:
  FaultAfter(std::unique_ptr<EnvSession> inner, int steps) : inner_(std::move(inner)), left_(steps) {}
  const SessionSpec& spec() const override { return inner_->spec(); }
  void reset(std::uint64_t seed) override { inner_->reset(seed); }
  StepOutcome step(std::span<const float> a) override {
    if (left_-- <= 0) throw std::runtime_error("simulator diverged");
    return inner_->step(a);
  }
  void observe(std::uint8_t* rgb, float* state) override { inner_->observe(rgb, state); }
  std::string instruction() const override { return inner_->instruction(); }

 private:
  std::unique_ptr<EnvSession> inner_;
  int left_;
};

struct Buffers {
  explicit Buffers(std::size_t n) : images(n * 64 * 64 * 3), state(n * 4) {}
  std::vector<std::uint8_t> images;
  std::vector<float> state;
};

}  // namespace

TEST_CASE("env sessions are stepped in parallel and belong to the tenant that opened them", "[unit][env]") {
  EnvService envs({.workers = 1});
  auto a = envs.open("alice", "reach", 4, 64, 0);
  auto b = envs.open("bob", "push", 1, 64, 0);
  REQUIRE(a.ids.size() == 4);
  CHECK(a.spec.max_steps == 40);
  CHECK(b.spec.max_steps == 80);
  Buffers buf(4);
  auto r = envs.reset("alice", a.ids, std::vector<std::uint64_t>{1, 2, 3, 4}, buf.images.data(), buf.state.data());
  for (const auto& s : r) CHECK(s.error.empty());
  // The same seed gives the same observation; different seeds differ.
  Buffers again(4);
  envs.reset("alice", a.ids, std::vector<std::uint64_t>{1, 1, 3, 4}, again.images.data(), again.state.data());
  CHECK(std::equal(again.images.begin(), again.images.begin() + 64 * 64 * 3, again.images.begin() + 64 * 64 * 3));
  CHECK_THROWS_AS(envs.step("bob", a.ids, std::vector<float>(8, 0.f), buf.images.data(), buf.state.data()), EnvError);
  CHECK(envs.close("bob", a.ids) == 0);
  CHECK_THROWS_AS(envs.step("alice", a.ids, std::vector<float>(7, 0.f), buf.images.data(), buf.state.data()), EnvError);
  auto s = envs.step("alice", a.ids, std::vector<float>(8, 1.f), buf.images.data(), buf.state.data());
  for (const auto& x : s) CHECK(x.error.empty());
  envs.tenant_detached("alice");
  CHECK(envs.sessions() == 1);
}

TEST_CASE("the Environment Service caps sessions per tenant and in all", "[unit][env]") {
  EnvService envs({.workers = 0, .max_sessions_per_tenant = 2, .max_sessions = 3});
  envs.open("alice", "reach", 2, 64, 0);
  CHECK_THROWS_AS(envs.open("alice", "reach", 1, 64, 0), EnvError);  // alice's own cap
  envs.open("bob", "reach", 1, 64, 0);
  CHECK_THROWS_AS(envs.open("carol", "reach", 1, 64, 0), EnvError);  // nexusd's cap
  CHECK(envs.sessions() == 3);
}

TEST_CASE("a session that throws is failed for good and alone, and the tenant opens a new one", "[unit][env]") {
  EnvService envs({.workers = 1}, [](const std::string& task, int size, int max_steps, int count, std::optional<uid_t>) {
    auto made = make_builtin_sessions(task == "flaky" ? "reach" : task, size, max_steps, count);
    if (task == "flaky")
      for (auto& s : made) s = std::make_unique<FaultAfter>(std::move(s), 2);
    return made;
  });
  auto flaky = envs.open("alice", "flaky", 1, 64, 0);
  auto good = envs.open("alice", "reach", 1, 64, 0);
  auto other = envs.open("bob", "reach", 1, 64, 0);
  std::vector<std::uint64_t> both{flaky.ids[0], good.ids[0]};
  Buffers buf(2);
  envs.reset("alice", both, std::vector<std::uint64_t>{5, 6}, buf.images.data(), buf.state.data());
  envs.reset("bob", other.ids, std::vector<std::uint64_t>{7}, buf.images.data(), buf.state.data());
  std::vector<float> act(4, 0.2f);
  for (int i = 0; i < 2; ++i) {
    auto r = envs.step("alice", both, act, buf.images.data(), buf.state.data());
    CHECK(r[0].error.empty());
  }
  auto r = envs.step("alice", both, act, buf.images.data(), buf.state.data());
  CHECK(r[0].failed);
  CHECK(r[0].error.find("simulator diverged") != std::string::npos);
  CHECK(r[1].error.empty());  // its neighbour in the same call stepped on
  r = envs.step("alice", both, act, buf.images.data(), buf.state.data());
  CHECK(r[0].failed);  // and stays failed
  CHECK(r[0].error.find("open a new one") != std::string::npos);
  CHECK(envs.step("bob", other.ids, std::vector<float>{0.2f, 0.2f}, buf.images.data(), buf.state.data())[0].error.empty());
  CHECK(envs.close("alice", flaky.ids) == 1);
  auto fresh = envs.open("alice", "reach", 1, 64, 0);
  CHECK(envs.reset("alice", fresh.ids, std::vector<std::uint64_t>{8}, buf.images.data(), buf.state.data())[0].error.empty());
  // A non-finite action is the caller's error, not a fault.
  auto nan = envs.step("alice", fresh.ids, std::vector<float>{std::nanf(""), 0.f}, buf.images.data(), buf.state.data());
  CHECK_FALSE(nan[0].failed);
  CHECK(nan[0].error.find("finite") != std::string::npos);
}
