// Bounded training turns (docs/design/service.md): a step split into micro-batches with
// gradient accumulation equals the unsplit step, and the Training Queue serves another tenant
// between a big step's micro-batches, on a fake clock.
// LibTorch first: c10 defines a glog-style CHECK that aborts; Catch must define the last one.
#include <torch/torch.h>
#undef CHECK
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "daemon/model/devices.hpp"
#include "daemon/model/tenant_slot.hpp"
#include "daemon/model/work_queues.hpp"
#include "daemon/rl/policy_update.hpp"

using namespace nexus;

namespace {

model::VLAFeature features(std::int64_t n, std::int64_t dim) {
  torch::manual_seed(11);
  return {torch::randn({n, 4, dim}), torch::randn({n, dim}), torch::ones({n, 4}, torch::kBool)};
}

model::VLAFeature rows(const model::VLAFeature& f, std::int64_t from, std::int64_t n) {
  return {f.tokens.narrow(0, from, n), f.pooled.narrow(0, from, n), f.mask.narrow(0, from, n)};
}

double max_difference(model::TenantSlot& a, model::TenantSlot& b) {
  double worst = 0;
  const auto pa = a.head().parameters(), pb = b.head().parameters();
  for (std::size_t i = 0; i < pa.size(); ++i) worst = std::max(worst, (pa[i] - pb[i]).abs().max().item<double>());
  return worst;
}

// A tenant's request of kind Op (SftStep or Predict) on `n` 8x8 images, arrived at `at`.
template <class Op>
model::detail::Work request_of(const std::string& tenant, std::int64_t n, sched::Clock::time_point at) {
  model::Request r;
  r.tenant = tenant;
  Op o;
  o.obs.images.shape = {n, 1, 8, 8, 3};
  r.op = o;
  r.arrival = at;
  return model::detail::Work{model::detail::TenantWork{std::move(r)}};
}

}  // namespace

TEST_CASE("a step split into micro-batches equals the unsplit step, draws and optimizer state included",
          "[model][turns]") {
  for (const std::string kind : {"mlp_chunk", "flow", "gaussian"}) {
    DYNAMIC_SECTION(kind) {
      const model::HeadSpec spec{.kind = kind, .state_dim = 3, .action_dim = 2, .chunk = 2, .hidden = 32};
      model::TenantSlot whole(spec, {}, 48, 7), split(spec, {}, 48, 7);
      const std::int64_t n = 16;
      const auto f = features(n, 48);
      torch::manual_seed(12);
      const auto state = torch::randn({n, 3});
      for (int step = 0; step < 3; ++step) {
        const auto actions = torch::randn({n, 2, 2});
        const auto a = whole.sft_step(f, state, actions);
        auto acc = split.begin_step(n);
        for (const auto& [from, count] : {std::pair{0, 5}, {5, 6}, {11, 5}})
          split.micro_step(acc, rows(f, from, count), state.narrow(0, from, count), actions.narrow(0, from, count), from);
        const auto b = split.finish_step(acc);
        CHECK(b.step == a.step);
        CHECK(b.loss == Approx(a.loss).epsilon(1e-5));
        CHECK(b.grad_norm == Approx(a.grad_norm).epsilon(1e-4));
        CHECK(max_difference(whole, split) < 1e-5);
      }
      // The RNG streams moved alike: the next unsplit steps agree too.
      const auto actions = torch::randn({n, 2, 2});
      CHECK(split.sft_step(f, state, actions).loss == Approx(whole.sft_step(f, state, actions).loss).epsilon(1e-5));
    }
  }
}

TEST_CASE("a split step with a NaN in one micro-batch makes no update", "[model][turns][isolation]") {
  model::TenantSlot slot({.kind = "mlp_chunk", .action_dim = 2, .chunk = 1, .hidden = 16}, {}, 32, 3);
  const auto f = features(8, 32);
  slot.sft_step(f, {}, torch::zeros({8, 1, 2}));
  const auto before = slot.digest();
  auto acc = slot.begin_step(8);
  slot.micro_step(acc, rows(f, 0, 4), {}, torch::zeros({4, 1, 2}), 0);
  auto bad = torch::zeros({4, 1, 2});
  bad[0][0][0] = std::numeric_limits<float>::infinity();
  CHECK_THROWS_AS(slot.micro_step(acc, rows(f, 4, 4), {}, bad, 4), model::SlotError);
  CHECK(slot.digest().parameters == before.parameters);
  CHECK(slot.digest().step == before.step);
  CHECK(slot.sft_step(f, {}, torch::zeros({8, 1, 2})).step == 2);  // and the next step is whole again
}

TEST_CASE("the Training Queue serves another tenant between a big step's micro-batches, on a fake clock",
          "[model][turns][sched]") {
  using namespace model::detail;
  sched::FairShare share;
  WorkQueues q;
  const auto t0 = sched::Clock::time_point{} + std::chrono::seconds(100);
  auto step = [&](const std::string& tenant, std::int64_t n) { return request_of<model::op::SftStep>(tenant, n, t0); };
  // The big tenant is between two micro-batches of a 128-sample step, one more step queued behind
  // it; the small tenant's 4-sample step arrives.
  auto chain = std::make_shared<StepChain>();
  chain->request.tenant = "big";
  chain->images = torch::zeros({128, 1, 8, 8, 3}, torch::kUInt8);
  chain->n = 128, chain->micro = 16, chain->next = 16;
  q.push_continuation(MicroWork{chain, "big", t0});
  q.push(step("big", 128), share, false);
  q.push(step("small", 4), share, false);
  share.charge(tenant_id("big"), 0.05);  // its first micro-batch's compute
  const sched::BatchPolicy batch{64, std::chrono::microseconds(2000)};
  const sched::TrainingPolicy training{batch, 0.02};
  std::chrono::microseconds wait{};
  const std::set<std::uint64_t> active = {tenant_id("big"), tenant_id("small")};
  auto turn = q.next(t0 + std::chrono::milliseconds(1), batch, training, {}, active, share, false, wait);
  REQUIRE(turn);
  // The small tenant leads (less compute), and the big step's next micro-batch rides in its pass;
  // the big tenant's queued step does not, while its micro-batches are unfinished.
  std::vector<std::string> who;
  bool micro_rode = false;
  for (const auto& w : turn->works) {
    who.push_back(tenant_of(w));
    micro_rode = micro_rode || std::holds_alternative<MicroWork>(w);
    CHECK_FALSE((tenant_of(w) == "big" && std::holds_alternative<TenantWork>(w)));
  }
  CHECK(who.front() == "small");
  CHECK(micro_rode);
  share.charge(tenant_id("small"), 0.006), share.charge(tenant_id("big"), 0.02);
  // The executor queues the next micro-batch. The small tenant (a closed loop between its reply
  // and its next step) is behind: the Training Queue holds up to T for it ...
  const auto t1 = t0 + std::chrono::milliseconds(30);
  q.push_continuation(MicroWork{chain, "big", t1});
  turn = q.next(t1 + std::chrono::microseconds(500), batch, training, {}, active, share, false, wait);
  CHECK_FALSE(turn);
  CHECK(wait == std::chrono::microseconds(1500));
  // ... and its next step, arriving within T, goes first again with the micro-batch riding.
  auto next_small = step("small", 4);
  std::get<TenantWork>(next_small).request.arrival = t1 + std::chrono::milliseconds(1);
  q.push(std::move(next_small), share, false);
  turn = q.next(t1 + std::chrono::milliseconds(1), batch, training, {}, active, share, false, wait);
  REQUIRE(turn);
  REQUIRE(turn->works.size() == 2);
  CHECK(tenant_of(turn->works.front()) == "small");  // the leader, then the rider
  CHECK(tenant_of(turn->works.back()) == "big");
  CHECK(std::holds_alternative<MicroWork>(turn->works.back()));
  // With the chain no longer queued, the big tenant's next step may go.
  turn = q.next(t1 + std::chrono::milliseconds(2), batch, training, {}, active, share, false, wait);
  REQUIRE(turn);
  CHECK(tenant_of(turn->works.front()) == "big");
  CHECK(std::holds_alternative<TenantWork>(turn->works.front()));
}

TEST_CASE("with several training lanes a tenant's turns never overlap and the tenant ahead in virtual time waits",
          "[model][turns][sched][lanes]") {
  using namespace model::detail;
  sched::FairShare share;
  WorkQueues q;
  q.set_concurrent_training(true);
  const auto t0 = sched::Clock::time_point{} + std::chrono::seconds(100);
  auto step = [&](const std::string& tenant) { return request_of<model::op::SftStep>(tenant, 4, t0); };
  const sched::BatchPolicy batch{64, std::chrono::microseconds(2000)};
  const sched::TrainingPolicy training{batch, 0.02};
  std::chrono::microseconds wait{};
  const std::set<std::uint64_t> active = {tenant_id("a"), tenant_id("b")};
  auto next_at = [&](sched::Clock::time_point now) {
    return q.next(now, batch, training, {}, active, share, false, wait, WorkQueues::Serves::Training);
  };
  auto next = [&] { return next_at(t0); };
  auto only = [](const std::optional<WorkQueues::Turn>& t) { return t && t->works.size() == 1 ? tenant_of(t->works[0]) : ""; };
  const auto long_turn = std::chrono::milliseconds(10);  // a turn's length, T or more
  share.charge(tenant_id("a"), 0.05);
  // a's step goes on one lane (b is away: with lanes to spare nobody is waited for).
  q.push(step("a"), share, false);
  CHECK(only(next()) == "a");
  // b is behind a: its step starts beside a's on another lane.
  q.push(step("b"), share, false);
  CHECK(only(next()) == "b");
  CHECK(q.training_running(tenant_id("a")));
  CHECK(q.training_running(tenant_id("b")));
  // Neither tenant's next step starts while its last one runs.
  q.push(step("b"), share, false);
  q.push(step("a"), share, false);
  CHECK_FALSE(next());
  // b's turn ends, charged past a: ahead of a, whose turn still runs, b waits ...
  share.charge(tenant_id("b"), 0.3);
  q.training_done({tenant_id("b")}, t0, long_turn);
  CHECK_FALSE(q.training_running(tenant_id("b")));
  CHECK_FALSE(next());
  // ... until a's ends: then a (now behind) leads, and b still waits beside it.
  share.charge(tenant_id("a"), 0.1);
  q.training_done({tenant_id("a")}, t0, long_turn);
  CHECK(only(next()) == "a");
  CHECK_FALSE(next());
  // a's turn ends with nothing of a's queued: a closed loop between its reply and its next step,
  // behind b. A free lane does not give b the turn at once: a is expected back for T (rule 1c) ...
  using std::chrono::microseconds, std::chrono::milliseconds;
  q.training_done({tenant_id("a")}, t0, long_turn);
  CHECK_FALSE(next_at(t0 + microseconds(500)));
  CHECK(wait == microseconds(1500));
  // ... and its next step, arriving within T, goes first.
  q.push(step("a"), share, false);
  CHECK(only(next_at(t0 + milliseconds(1))) == "a");
  // Ahead after that turn, a is not waited for: b goes as a's turn ends.
  share.charge(tenant_id("a"), 0.2);
  q.training_done({tenant_id("a")}, t0 + milliseconds(5), long_turn);
  CHECK(only(next_at(t0 + milliseconds(5))) == "b");
  // Behind again, a is waited for only until its turn's end + T, whether or not it comes.
  share.charge(tenant_id("b"), 0.3);
  q.training_done({tenant_id("b")}, t0 + milliseconds(6), long_turn);
  q.push(step("b"), share, false);
  CHECK_FALSE(next_at(t0 + milliseconds(6)));
  CHECK(wait == microseconds(1000));
  CHECK(only(next_at(t0 + milliseconds(7))) == "b");
  // Still behind, a is not waited for after a turn shorter than T (a slot operation) ...
  q.training_done({tenant_id("b")}, t0 + milliseconds(8), long_turn);
  q.push(step("a"), share, false);
  CHECK(only(next_at(t0 + milliseconds(8))) == "a");
  q.training_done({tenant_id("a")}, t0 + milliseconds(9), milliseconds(1));
  q.push(step("b"), share, false);
  CHECK(only(next_at(t0 + milliseconds(9))) == "b");
  // ... nor after a turn that failed ...
  q.training_done({tenant_id("b")}, t0 + milliseconds(10), long_turn);
  q.push(step("a"), share, false);
  CHECK(only(next_at(t0 + milliseconds(10))) == "a");
  q.training_done({tenant_id("a")}, t0 + milliseconds(11), {});
  q.push(step("b"), share, false);
  CHECK(only(next_at(t0 + milliseconds(11))) == "b");
  // ... nor once it is no longer active (detached), though after a long turn it would be.
  q.training_done({tenant_id("b")}, t0 + milliseconds(12), long_turn);
  q.push(step("a"), share, false);
  CHECK(only(next_at(t0 + milliseconds(12))) == "a");
  q.training_done({tenant_id("a")}, t0 + milliseconds(13), long_turn);
  q.push(step("b"), share, false);
  CHECK_FALSE(next_at(t0 + milliseconds(13)));
  const std::set<std::uint64_t> b_only = {tenant_id("b")};
  const auto turn = q.next(t0 + milliseconds(13), batch, training, {}, b_only, share, false, wait, WorkQueues::Serves::Training);
  CHECK(only(turn) == "b");
}

TEST_CASE("a lane that serves both waits for the sooner of an owed training turn and an inference group",
          "[model][turns][sched]") {
  using namespace model::detail;
  sched::FairShare share;
  WorkQueues q;
  const auto t0 = sched::Clock::time_point{} + std::chrono::seconds(100);
  const sched::BatchPolicy batch{64, std::chrono::microseconds(2000)};
  const sched::TrainingPolicy training{batch, 0.02};
  using std::chrono::microseconds;
  // Training is owed. a's step has waited 1.5 ms for b (behind a, between its steps: rule 1b);
  // c's predict has just come and waits for d, attached, to join its group.
  share.charge(tenant_id("a"), 0.05);
  q.push(request_of<model::op::SftStep>("a", 4, t0), share, false);
  q.push(request_of<model::op::Predict>("c", 1, t0 + microseconds(1500)), share, false);
  const std::set<std::uint64_t> active = {tenant_id("a"), tenant_id("b")};
  const std::map<std::uint64_t, sched::Clock::time_point> due = {{tenant_id("c"), t0 + microseconds(1500)},
                                                                 {tenant_id("d"), t0 + microseconds(1500)}};
  std::chrono::microseconds wait{};
  CHECK_FALSE(q.next(t0 + microseconds(1500), batch, training, due, active, share, true, wait));
  // The lane wakes when a's wait ends (0.5 ms), not when c's group would go (2 ms).
  CHECK(wait == microseconds(500));
  // Not owed, the same queues give the same sooner wait.
  CHECK_FALSE(q.next(t0 + microseconds(1500), batch, training, due, active, share, false, wait));
  CHECK(wait == microseconds(500));
}

TEST_CASE("an inference group does not wait for a tenant whose request is in another lane's pass",
          "[model][turns][sched][lanes]") {
  using namespace model::detail;
  sched::FairShare share;
  WorkQueues q;
  const auto t0 = sched::Clock::time_point{} + std::chrono::seconds(100);
  auto predict = [&](const std::string& tenant) { return request_of<model::op::Predict>(tenant, 1, t0); };
  const sched::BatchPolicy batch{64, std::chrono::microseconds(2000)};
  const sched::TrainingPolicy training{batch, 0.02};
  std::chrono::microseconds wait{};
  const std::set<std::uint64_t> none;
  // Three tenants, each due as t0; a's request goes on one inference lane (everyone else is away:
  // the window passed).
  const std::map<std::uint64_t, sched::Clock::time_point> due = {
      {tenant_id("a"), t0}, {tenant_id("b"), t0}, {tenant_id("c"), t0}};
  auto next = [&](std::chrono::microseconds at) {
    return q.next(t0 + at, batch, training, due, none, share, false, wait, WorkQueues::Serves::Inference);
  };
  q.push(predict("a"), share, false);
  const auto first = next(std::chrono::microseconds(2000));
  REQUIRE(first);
  // While a's pass runs, b's request waits for c only (a cannot send another before its reply) ...
  q.push(predict("b"), share, false);
  CHECK_FALSE(next(std::chrono::microseconds(500)));
  CHECK(wait == std::chrono::microseconds(1500));
  // ... and goes as soon as c's is in, not at the end of the window.
  q.push(predict("c"), share, false);
  const auto second = next(std::chrono::microseconds(600));
  REQUIRE(second);
  CHECK(second->works.size() == 2);
  // Both passes end; a new request of a's waits for b and c again.
  q.inference_done({tenant_id("a")});
  q.inference_done({tenant_id("b"), tenant_id("c")});
  q.push(predict("a"), share, false);
  CHECK_FALSE(next(std::chrono::microseconds(100)));
}

TEST_CASE("an inference group waits only for tenants due within its window", "[model][turns][sched]") {
  using namespace model::detail;
  using std::chrono::microseconds, std::chrono::milliseconds;
  sched::FairShare share;
  WorkQueues q;
  const auto t0 = sched::Clock::time_point{} + std::chrono::seconds(100);
  auto predict = [&](const std::string& tenant, milliseconds at) {
    return request_of<model::op::Predict>(tenant, 1, t0 + at);
  };
  const sched::BatchPolicy batch{64, microseconds(2000)};
  const sched::TrainingPolicy training{batch, 0.02};
  std::chrono::microseconds wait{};
  const std::set<std::uint64_t> none;
  std::map<std::uint64_t, sched::Clock::time_point> due;
  auto next = [&](milliseconds at) {
    return q.next(t0 + at, batch, training, due, none, share, false, wait, WorkQueues::Serves::Inference);
  };
  const auto a = tenant_id("a"), b = tenant_id("b");
  // b is due 5 ms on (its simulators step longer than T): a's request goes alone, at once.
  q.push(predict("a", milliseconds(0)), share, false);
  due = {{a, t0}, {b, t0 + milliseconds(5)}};
  auto turn = next(milliseconds(0));
  REQUIRE(turn);
  CHECK(turn->works.size() == 1);
  q.inference_done({a});
  // b due within the window: waited for, and joins.
  q.push(predict("a", milliseconds(10)), share, false);
  due = {{a, t0 + milliseconds(10)}, {b, t0 + milliseconds(11)}};
  CHECK_FALSE(next(milliseconds(10)));
  CHECK(wait == microseconds(2000));
  q.push(predict("b", milliseconds(11)), share, false);
  turn = next(milliseconds(11));
  REQUIRE(turn);
  CHECK(turn->works.size() == 2);
  q.inference_done({a, b});
  // b overdue by more than T (paused: an RL job's update): not waited for.
  q.push(predict("a", milliseconds(20)), share, false);
  due = {{a, t0 + milliseconds(20)}, {b, t0 + milliseconds(17)}};
  turn = next(milliseconds(20));
  REQUIRE(turn);
  CHECK(turn->works.size() == 1);
}

TEST_CASE("heads made on several lanes at once are the ones their seeds give", "[model][turns][lanes]") {
  // Two training lanes register tenants and start RL jobs side by side; both initialise modules
  // from LibTorch's global generator (model::seed_global_generator). Without the lock, one
  // thread's seeding lands between another's seeding and its draws.
  const model::HeadSpec spec{.kind = "mlp_chunk", .action_dim = 2, .chunk = 2, .hidden = 64};
  auto parameters = [&](std::uint64_t seed) { return model::TenantSlot(spec, {}, 48, seed).digest().parameters; };
  const auto five = parameters(5), seven = parameters(7);
  const auto value = rl::ValueHead(48, 0, 64, 99)->parameters();
  std::atomic<int> wrong{0};
  std::vector<std::thread> lanes;
  for (int t = 0; t < 3; ++t)
    lanes.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        if (t == 2) {  // an RL job's value head
          if (!torch::equal(rl::ValueHead(48, 0, 64, 99)->parameters()[0], value[0])) ++wrong;
          continue;
        }
        if (parameters(t == 0 ? 5 : 7) != (t == 0 ? five : seven)) ++wrong;
      }
    });
  for (auto& l : lanes) l.join();
  CHECK(wrong == 0);
}
