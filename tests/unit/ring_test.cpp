#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "schema/doorbell.hpp"
#include "schema/ring.hpp"

using namespace nexus::schema;

namespace {

struct Ring {
  explicit Ring(std::uint64_t cap) : cap(cap), mem(sizeof(RingControl) + cap + 64) {
    region = reinterpret_cast<void*>((reinterpret_cast<std::uintptr_t>(mem.data()) + 63) & ~std::uintptr_t{63});
    init_ring(region);
  }
  RingControl& ctrl() { return *static_cast<RingControl*>(region); }
  std::uint8_t* data() { return static_cast<std::uint8_t*>(region) + sizeof(RingControl); }
  std::uint64_t cap;
  std::vector<std::uint8_t> mem;
  void* region;
};

std::vector<std::uint8_t> bytes(std::size_t n, std::uint8_t seed) {
  std::vector<std::uint8_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<std::uint8_t>(seed + i * 7);
  return v;
}

}  // namespace

TEST_CASE("ring carries messages in order across many wrap-arounds", "[ring]") {
  Ring r(4096);
  RingWriter w(r.region, r.cap);
  RingReader rd(r.region, r.cap);
  std::mt19937 rng(7);
  std::vector<std::uint8_t> out;
  for (int i = 0; i < 20000; ++i) {
    auto msg = bytes(rng() % 700, static_cast<std::uint8_t>(i));
    REQUIRE(w.try_push(msg) == PushStatus::Ok);
    REQUIRE(rd.try_pop(out, 4096) == PopStatus::Ok);
    REQUIRE(out == msg);
  }
  REQUIRE(rd.try_pop(out, 4096) == PopStatus::Empty);
  REQUIRE(r.ctrl().tail.load() > 10 * r.cap);  // it really wrapped
}

TEST_CASE("a full ring refuses instead of overwriting", "[ring]") {
  Ring r(4096);
  RingWriter w(r.region, r.cap);
  RingReader rd(r.region, r.cap);
  const auto msg = bytes(1000, 1);  // 1008-byte records: four fit, the fifth does not
  for (int i = 0; i < 4; ++i) REQUIRE(w.try_push(msg) == PushStatus::Ok);
  REQUIRE(w.try_push(msg) == PushStatus::Full);
  std::vector<std::uint8_t> out;
  REQUIRE(rd.try_pop(out, 4096) == PopStatus::Ok);
  REQUIRE(out == msg);
  REQUIRE(w.try_push(msg) == PushStatus::Ok);
  for (int i = 0; i < 4; ++i) {
    REQUIRE(rd.try_pop(out, 4096) == PopStatus::Ok);
    REQUIRE(out == msg);
  }
  REQUIRE(w.try_push(bytes(w.max_message() + 1, 0)) == PushStatus::TooLarge);
}

TEST_CASE("reader survives a length prefix past the published bytes", "[ring][hostile]") {
  Ring r(4096);
  RingReader rd(r.region, r.cap);
  const std::uint32_t len = 3000;  // claims 3000 bytes, publishes 8
  std::memcpy(r.data(), &len, 4);
  r.ctrl().tail.store(8);
  std::vector<std::uint8_t> out;
  REQUIRE(rd.try_pop(out, 4096) == PopStatus::BadLengthPrefix);
  REQUIRE(rd.try_pop(out, 4096) == PopStatus::Empty);
  REQUIRE(r.ctrl().head.load() == 8);  // resynchronised to the producer's tail
  // An honest message after the resync is read normally.
  // Emulate an honest producer that continues at its own tail (8).
  const auto msg = bytes(10, 3);
  const std::uint32_t l2 = 10;
  std::memcpy(r.data() + 8, &l2, 4);
  std::memcpy(r.data() + 12, msg.data(), 10);
  r.ctrl().tail.store(8 + record_bytes(10));
  REQUIRE(rd.try_pop(out, 4096) == PopStatus::Ok);
  REQUIRE(out == msg);
}

TEST_CASE("reader rejects impossible indices and oversized records", "[ring][hostile]") {
  std::vector<std::uint8_t> out;
  SECTION("tail beyond capacity") {
    Ring r(4096);
    RingReader rd(r.region, r.cap);
    r.ctrl().tail.store(1ull << 40);
    REQUIRE(rd.try_pop(out, 4096) == PopStatus::RingCorrupt);
    REQUIRE(rd.try_pop(out, 4096) == PopStatus::Empty);
  }
  SECTION("tail behind head") {
    Ring r(4096);
    RingReader rd(r.region, r.cap);
    r.ctrl().tail.store(~std::uint64_t{0} - 7);
    REQUIRE(rd.try_pop(out, 4096) == PopStatus::RingCorrupt);
  }
  SECTION("unaligned tail") {
    Ring r(4096);
    RingReader rd(r.region, r.cap);
    r.ctrl().tail.store(13);
    REQUIRE(rd.try_pop(out, 4096) == PopStatus::RingCorrupt);
  }
  SECTION("record over the reader's limit is skipped, the next one read") {
    Ring r(4096);
    RingWriter w(r.region, r.cap);
    RingReader rd(r.region, r.cap);
    REQUIRE(w.try_push(bytes(500, 1)) == PushStatus::Ok);
    REQUIRE(w.try_push(bytes(20, 2)) == PushStatus::Ok);
    REQUIRE(rd.try_pop(out, 100) == PopStatus::TooLarge);
    REQUIRE(rd.try_pop(out, 100) == PopStatus::Ok);
    REQUIRE(out == bytes(20, 2));
  }
}

TEST_CASE("writer refuses when the consumer publishes an impossible head", "[ring][hostile]") {
  Ring r(4096);
  RingWriter w(r.region, r.cap);
  r.ctrl().head.store(1ull << 50);
  REQUIRE(w.try_push(bytes(10, 0)) == PushStatus::PeerCorrupt);
}

TEST_CASE("SPSC across threads: a million messages, in order, none lost", "[ring][threads]") {
  Ring r(1 << 16);
  RingWriter w(r.region, r.cap);
  RingReader rd(r.region, r.cap);
  constexpr std::uint64_t kCount = 1'000'000;
  std::thread producer([&] {
    for (std::uint64_t i = 0; i < kCount; ++i) {
      std::uint64_t payload[3] = {i, i * 31, ~i};
      const std::span<const std::uint8_t> msg(reinterpret_cast<const std::uint8_t*>(payload),
                                              8 + (i % 3) * 8);
      while (w.try_push(msg) != PushStatus::Ok) std::this_thread::yield();
    }
  });
  std::vector<std::uint8_t> out;
  std::uint64_t bad = 0;
  for (std::uint64_t i = 0; i < kCount;) {
    const auto st = rd.try_pop(out, 1024);
    if (st == PopStatus::Empty) {
      std::this_thread::yield();
      continue;
    }
    std::uint64_t got[3] = {};
    std::memcpy(got, out.data(), std::min<std::size_t>(out.size(), 24));
    if (st != PopStatus::Ok || out.size() != 8 + (i % 3) * 8 || got[0] != i) ++bad;
    ++i;
  }
  producer.join();
  REQUIRE(bad == 0);
}

// The sleeping protocol (ring.hpp) between two threads: the consumer announces it sleeps,
// re-checks the ring, and blocks on the doorbell; the producer pushes, then rings the doorbell
// if the consumer announced sleep. A lost wakeup (a push between the re-check and the block
// without a ring) leaves the consumer blocked: every wait has a deadline, and one that expires
// with a message published fails the test.
TEST_CASE("a consumer sleeping on its doorbell is woken for every message, never left asleep", "[ring][threads]") {
  Ring r(4096);
  RingWriter w(r.region, r.cap);
  RingReader rd(r.region, r.cap);
  const int doorbell = make_doorbell();
  REQUIRE(doorbell >= 0);
  constexpr int kCount = 20000;
  std::atomic<int> lost{0};
  std::thread producer([&] {
    std::mt19937 rng(7);
    for (int i = 0; i < kCount; ++i) {
      const std::uint32_t v = static_cast<std::uint32_t>(i);
      while (w.try_push({reinterpret_cast<const std::uint8_t*>(&v), sizeof v}) != PushStatus::Ok) std::this_thread::yield();
      if (w.consumer_sleeping()) ring_doorbell(doorbell);
      if (rng() % 64 == 0) std::this_thread::sleep_for(std::chrono::microseconds(50));  // let it sleep
    }
  });
  std::vector<std::uint8_t> out;
  int received = 0, slept = 0;
  while (received < kCount) {
    if (rd.try_pop(out, 64) == PopStatus::Ok) {
      std::uint32_t v;
      std::memcpy(&v, out.data(), sizeof v);
      REQUIRE(v == static_cast<std::uint32_t>(received));
      ++received;
      continue;
    }
    rd.set_consumer_sleeping(true);
    if (rd.empty()) {  // the fenced re-check: a push after it must ring
      ++slept;
      if (wait_doorbell(doorbell, -1, std::chrono::seconds(2)) == WaitResult::TimedOut && !rd.empty()) ++lost;
      drain_doorbell(doorbell);
    }
    rd.set_consumer_sleeping(false);
  }
  producer.join();
  ::close(doorbell);
  INFO("the consumer slept " << slept << " times");
  CHECK(slept > 10);
  CHECK(lost == 0);
}
