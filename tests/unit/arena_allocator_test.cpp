#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "arena_allocator.hpp"

using nexus::detail::ArenaAllocator;

TEST_CASE("arena allocations are aligned, disjoint and coalesce when freed", "[arena]") {
  std::vector<std::uint8_t> mem(1 << 16);
  ArenaAllocator a(mem.data(), mem.size());
  auto x = a.allocate(100), y = a.allocate(1), z = a.allocate(4096);
  REQUIRE((x && y && z));
  CHECK(*x % 64 == 0);
  CHECK(*y % 64 == 0);
  CHECK(*y >= *x + 100);
  CHECK(*z >= *y + 1);
  CHECK_FALSE(a.allocate(1 << 16));
  a.release(*y);
  a.release(*x);
  a.release(*z);
  CHECK(a.free_bytes() == mem.size());
  CHECK(a.allocate(1 << 16));  // one block again: fully coalesced
}

TEST_CASE("arena survives random alloc/free churn", "[arena]") {
  std::vector<std::uint8_t> mem(1 << 20);
  ArenaAllocator a(mem.data(), mem.size());
  std::mt19937 rng(5);
  std::vector<std::pair<std::uint64_t, std::uint64_t>> live;
  for (int i = 0; i < 5000; ++i) {
    if (!live.empty() && rng() % 2) {
      const std::size_t k = rng() % live.size();
      a.release(live[k].first);
      live.erase(live.begin() + static_cast<long>(k));
    } else if (auto o = a.allocate(rng() % 8000)) {
      live.emplace_back(*o, 0);
    }
  }
  for (auto& [o, s] : live) a.release(o);
  CHECK(a.free_bytes() == mem.size());
}
