// The Training Queue's pick and its fair-share bookkeeping, with a fake clock: who leads, who
// joins the group, when it waits, and that weights and idling come out as the policy says.
#include <catch2/catch.hpp>

#include "daemon/sched/fair_share.hpp"

using namespace nexus::sched;
using namespace std::chrono_literals;

namespace {

const Clock::time_point t0{};

TrainingRequest sft(std::uint64_t tenant, Clock::time_point at, std::uint32_t samples = 16, std::uint64_t key = 1) {
  return {tenant, key, samples, true, at};
}
TrainingRequest alone(std::uint64_t tenant, Clock::time_point at) { return {tenant, 0, 1, false, at}; }

TrainingPolicy policy(std::uint32_t max_samples = 64, double window = 0.02) {
  return {{max_samples, std::chrono::microseconds(2000)}, window};
}

}  // namespace

TEST_CASE("the tenant with the least virtual time leads, whoever arrived first", "[sched][fair]") {
  std::map<std::uint64_t, TenantShare> shares{{1, {5.0}}, {2, {1.0}}};
  const TrainingRequest q[] = {sft(1, t0), sft(2, t0 + 1us)};
  const auto d = pick_training(q, shares, {1, 2}, t0 + 3ms, policy(64, 0.02));
  REQUIRE(d.take == std::vector<std::size_t>{1});  // tenant 1 is 4 s ahead: it does not join
}

TEST_CASE("a split step's next micro-batch rides in the leader's group however far ahead its tenant is",
          "[sched][fair][turns]") {
  std::map<std::uint64_t, TenantShare> shares{{1, {5.0}}, {2, {1.0}}, {3, {0.0, 1.0, 1}}, {4, {1.01}}};
  auto micro = [](std::uint64_t tenant, Clock::time_point at, std::uint32_t samples = 16) {
    TrainingRequest r = sft(tenant, at, samples);
    r.continuation = true;
    return r;
  };
  const TrainingRequest q[] = {micro(1, t0), sft(1, t0 + 1us), sft(2, t0 + 2us)};
  auto d = pick_training(q, shares, {1, 2}, t0 + 3ms, policy(64, 0.02));
  // Tenant 2 leads; tenant 1 is 4 s ahead: its micro-batch rides, after the leader; its next
  // whole step does not.
  CHECK(d.take == std::vector<std::size_t>{2, 0});
  d = pick_training(q, shares, {1, 2}, t0 + 3ms, policy(20, 0.02));
  CHECK(d.take == std::vector<std::size_t>{2});  // no room for it: the leader goes alone
  // Nor does it ride with a higher priority class.
  const TrainingRequest q2[] = {micro(1, t0), sft(3, t0 + 2us)};
  d = pick_training(q2, shares, {1, 3}, t0 + 3ms, policy(64, 0.02));
  CHECK(d.take == std::vector<std::size_t>{1});
  // A tenant with two steps split: when the first's micro-batch has no room, the second's does
  // not overtake it.
  const TrainingRequest q3[] = {micro(1, t0, 16), micro(1, t0 + 1us, 4), sft(2, t0 + 2us)};
  d = pick_training(q3, shares, {1, 2}, t0 + 3ms, policy(24, 0.02));
  CHECK(d.take == std::vector<std::size_t>{2});
  // A rider neither fills the group early nor takes a member's room: tenant 4 (within the
  // window, away just now) is still waited for up to T.
  const TrainingRequest q4[] = {micro(1, t0, 48), sft(2, t0 + 100us)};
  d = pick_training(q4, shares, {1, 2, 4}, t0 + 1ms, policy(64, 0.02));
  CHECK(d.take.empty());
  CHECK(d.wait == std::chrono::microseconds(1100));
  d = pick_training(q4, shares, {1, 2, 4}, t0 + 3ms, policy(64, 0.02));
  CHECK(d.take == std::vector<std::size_t>{1, 0});
}

TEST_CASE("tenants within the window join the leader's group, in arrival order, up to B", "[sched][fair]") {
  std::map<std::uint64_t, TenantShare> shares{{1, {1.00}}, {2, {1.01}}, {3, {1.015}}};
  const TrainingRequest q[] = {sft(2, t0), sft(1, t0 + 1us), sft(3, t0 + 2us), sft(1, t0 + 3us)};
  auto d = pick_training(q, shares, {1, 2, 3}, t0 + 10us, policy(64, 0.02));
  CHECK(d.take == std::vector<std::size_t>{0, 1, 2, 3});  // everyone in, 64 samples: go now
  d = pick_training(q, shares, {1, 2, 3}, t0 + 10us, policy(40, 0.02));
  CHECK(d.take == std::vector<std::size_t>{0, 1});  // B = 40: the third does not fit, so the group goes
}

TEST_CASE("a slot operation or update minibatch of the leader goes alone, and blocks its later requests", "[sched][fair]") {
  std::map<std::uint64_t, TenantShare> shares{{1, {0.0}}, {2, {0.5}}};
  const TrainingRequest q[] = {sft(2, t0), alone(1, t0 + 1us), sft(1, t0 + 2us)};
  auto d = pick_training(q, shares, {1, 2}, t0 + 10us, policy());
  CHECK(d.take == std::vector<std::size_t>{1});
  // Tenant 2 leads now: tenant 1's SFT step must not overtake its own pending publish.
  shares[1].virtual_s = 1.0;
  const TrainingRequest q2[] = {sft(2, t0), alone(1, t0 + 1us), sft(1, t0 + 2us)};
  d = pick_training(q2, shares, {1, 2}, t0 + 10us, policy(64, 2.0));
  CHECK(d.take == std::vector<std::size_t>{0});
}

TEST_CASE("a group waits up to T for active tenants that could join, not for those out of the window", "[sched][fair]") {
  std::map<std::uint64_t, TenantShare> shares{{1, {1.0}}, {2, {1.0}}, {3, {9.0}}};
  const TrainingRequest q[] = {sft(1, t0)};
  auto d = pick_training(q, shares, {1, 2, 3}, t0 + 500us, policy());
  CHECK(d.take.empty());                   // tenant 2 is active and could join
  CHECK(d.wait == std::chrono::microseconds(1500));
  d = pick_training(q, shares, {1, 2, 3}, t0 + 2ms, policy());
  CHECK(d.take == std::vector<std::size_t>{0});  // T has passed
  d = pick_training(q, shares, {1, 3}, t0 + 500us, policy());
  CHECK(d.take == std::vector<std::size_t>{0});  // tenant 3 is 8 s ahead: nobody to wait for
}

TEST_CASE("a higher priority class goes first whatever its virtual time", "[sched][fair]") {
  std::map<std::uint64_t, TenantShare> shares{{1, {0.0, 1, 0}}, {2, {50.0, 1, 1}}};
  const TrainingRequest q[] = {sft(1, t0), sft(2, t0 + 1us)};
  const auto d = pick_training(q, shares, {1, 2}, t0 + 3ms, policy());
  CHECK(d.take == std::vector<std::size_t>{1});
}

TEST_CASE("fair share: weights 1:2 served turn by turn give compute in the ratio 1:2", "[sched][fair]") {
  FairShare share;
  share.configure(1, 1.0, 0);
  share.configure(2, 2.0, 0);
  std::map<std::uint64_t, double> compute;
  // Both always backlogged; a turn costs 10 ms alone, and 14 ms for a group of two (7 each).
  for (int turn = 0; turn < 3000; ++turn) {
    const TrainingRequest q[] = {sft(1, t0), sft(2, t0)};
    const auto d = pick_training(q, share.shares(), {1, 2}, t0 + 1s, policy(64, 0.02));
    REQUIRE(!d.take.empty());
    const double each = d.take.size() == 2 ? 0.007 : 0.010;
    for (auto i : d.take) {
      share.charge(q[i].tenant, each);
      compute[q[i].tenant] += each;
    }
  }
  INFO("compute: " << compute[1] << " vs " << compute[2]);
  CHECK(compute[2] / compute[1] == Approx(2.0).epsilon(0.05));
}

TEST_CASE("fair share: a tenant back from idle gets no banked credit", "[sched][fair]") {
  FairShare share;
  share.charge(1, 30.0);  // tenant 1 trained for 30 s while tenant 2 was away
  share.backlogged(2, {1});
  CHECK(share.shares().at(2).virtual_s == Approx(30.0));  // lifted, not 0
  share.charge(2, 1.0);
  share.backlogged(2, {1});                              // already ahead: unchanged
  CHECK(share.shares().at(2).virtual_s == Approx(31.0));
}

TEST_CASE("beside running training turns only a tenant not ahead of them starts, a lower class never",
          "[sched][fair][lanes]") {
  // shares: {virtual_s, weight, priority}
  std::map<std::uint64_t, TenantShare> shares{{1, {1.0, 1, 0}}, {2, {2.0, 1, 0}}, {3, {9.0, 1, 1}}, {4, {0.0, 1, -1}}};
  CHECK(may_start_beside(2, {}, shares, 0.02));        // nothing running: anyone
  CHECK(may_start_beside(1, {2}, shares, 0.02));       // behind the running tenant
  CHECK_FALSE(may_start_beside(2, {1}, shares, 0.02)); // ahead by 1 s
  CHECK(may_start_beside(2, {1}, shares, 1.5));        // within the window
  CHECK_FALSE(may_start_beside(1, {2, 5}, shares, 0.02));  // behind 2 but ahead of 5 (no share: 0 s)
  CHECK(may_start_beside(3, {1}, shares, 0.02));       // a higher class, however far ahead
  CHECK_FALSE(may_start_beside(4, {1}, shares, 0.02)); // a lower class waits, however far behind
}

TEST_CASE("with several lanes a tenant just served and behind the leader is waited for until its turn's end + T",
          "[sched][fair]") {
  // Tenant 1 leads what is pending (virtual time 1.0); tenant 2 (0.5) ended a turn and is expected
  // back until t0 + 2 ms; tenant 3 is in a higher class; tenant 4 is within the window.
  std::map<std::uint64_t, TenantShare> shares{{1, {1.0}}, {2, {0.5}}, {3, {9.0, 1, 1}}, {4, {0.99}}};
  const TrainingRequest q[] = {sft(1, t0)};
  CHECK(wait_for_expected(q, shares, {{2, t0 + 2ms}}, t0 + 500us, 0.02) == 1500us);
  CHECK(wait_for_expected(q, shares, {{2, t0 + 2ms}}, t0 + 2ms, 0.02) == 0us);  // T is over
  CHECK(wait_for_expected(q, shares, {}, t0, 0.02) == 0us);                     // nobody expected
  CHECK(wait_for_expected(q, shares, {{4, t0 + 2ms}}, t0, 0.02) == 0us);        // not behind by the window
  CHECK(wait_for_expected(q, shares, {{3, t0 + 1ms}}, t0, 0.02) == 1000us);     // its class goes first
  // The one ahead is not waited for: with tenant 2 pending and leading, tenant 1 expected back.
  const TrainingRequest q2[] = {sft(2, t0)};
  CHECK(wait_for_expected(q2, shares, {{1, t0 + 2ms}}, t0, 0.02) == 0us);
  // Nor is one of a lower class than the leader.
  const TrainingRequest q3[] = {sft(3, t0)};
  CHECK(wait_for_expected(q3, shares, {{2, t0 + 2ms}}, t0, 0.02) == 0us);
}
