#include <catch2/catch.hpp>

#include "daemon/sched/group_batcher.hpp"

using namespace nexus::sched;
using namespace std::chrono_literals;

namespace {

const Clock::time_point t0{};

PendingRequest req(std::uint64_t tenant, std::uint32_t samples, std::chrono::microseconds at,
                   std::uint64_t key = 1, bool batchable = true) {
  return PendingRequest{key, samples, tenant, batchable, t0 + at};
}

}  // namespace

TEST_CASE("batcher waits for company until T, then flushes what it has", "[sched]") {
  const BatchPolicy p{.max_samples = 8, .max_wait = 1000us};
  std::vector<PendingRequest> q = {req(1, 1, 0us), req(2, 1, 100us)};
  auto d = decide(q, t0 + 300us, p, 4);
  CHECK(d.take.empty());
  CHECK(d.wait == 700us);
  d = decide(q, t0 + 1000us, p, 4);
  CHECK(d.take == std::vector<std::size_t>{0, 1});
}

TEST_CASE("batcher flushes at B samples without waiting", "[sched]") {
  const BatchPolicy p{.max_samples = 4, .max_wait = 1000us};
  std::vector<PendingRequest> q = {req(1, 2, 0us), req(2, 2, 1us), req(3, 2, 2us)};
  auto d = decide(q, t0 + 5us, p, 8);
  CHECK(d.take == std::vector<std::size_t>{0, 1});  // the third would overflow B
  std::vector<PendingRequest> big = {req(1, 9, 0us)};
  CHECK(decide(big, t0, p, 8).take == std::vector<std::size_t>{0});  // oversized goes alone
}

TEST_CASE("batcher never waits when every active tenant is already in the group", "[sched]") {
  const BatchPolicy p{.max_samples = 64, .max_wait = 5000us};
  std::vector<PendingRequest> q = {req(1, 1, 0us), req(2, 1, 1us)};
  CHECK(decide(q, t0 + 2us, p, 2).take.size() == 2);
  CHECK(decide(q, t0 + 2us, p, 3).take.empty());
  std::vector<PendingRequest> alone = {req(7, 1, 0us)};
  CHECK(decide(alone, t0, p, 1).take == std::vector<std::size_t>{0});  // idle device, one tenant
}

TEST_CASE("batcher keeps keys apart and tenants in order", "[sched]") {
  const BatchPolicy p{.max_samples = 64, .max_wait = 0us};
  std::vector<PendingRequest> q = {req(1, 1, 0us, 1), req(2, 1, 1us, 2), req(3, 1, 2us, 1)};
  CHECK(decide(q, t0, p, 3).take == std::vector<std::size_t>{0, 2});
  // Tenant 2's publish (not batchable) is pending: its later step must not jump ahead of it.
  std::vector<PendingRequest> r = {req(1, 1, 0us), req(2, 0, 1us, 1, false), req(2, 1, 2us), req(3, 1, 3us)};
  CHECK(decide(r, t0, p, 3).take == std::vector<std::size_t>{0, 3});
  std::vector<PendingRequest> s = {req(2, 0, 0us, 1, false), req(1, 1, 1us)};
  CHECK(decide(s, t0, p, 3).take == std::vector<std::size_t>{0});
}
