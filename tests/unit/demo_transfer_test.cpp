// The sandboxed reader's hand-back format (datasets/demo_transfer.hpp): a round trip, and bytes
// from a reader that went wrong (mutated, truncated, too large) are refused, never trusted.
#include <catch2/catch.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <random>

#include "datasets/demo_transfer.hpp"

using namespace nexus::datasets;

namespace {

DemoFile sample_file() {
  DemoFile f;
  f.meta.task = "reach";
  f.meta.views = {"agentview_image"};
  f.meta.state_keys = {"robot0_proprio"};
  f.meta.image_size = f.meta.source_image_size = 8;
  f.meta.state_dim = 3, f.meta.action_dim = 2, f.meta.sim_state_dim = 0;
  for (int e = 0; e < 3; ++e) {
    Episode ep;
    ep.name = "demo_" + std::to_string(e);
    ep.instruction = "reach the red ball";
    ep.steps = 4 + e;
    const auto t = static_cast<std::size_t>(ep.steps);
    ep.images.assign(t * 8 * 8 * 3, static_cast<std::uint8_t>(e + 1));
    ep.proprio.assign(t * 3, 0.5f * e);
    ep.actions.assign(t * 2, -0.25f);
    ep.rewards.assign(t, 1.0f);
    ep.dones.assign(t, 0);
    ep.dones.back() = 1;
    ep.success = e % 2 == 0;
    ep.valid = e == 2;
    ep.train = e != 2;
    f.episodes.push_back(std::move(ep));
  }
  return f;
}

struct Memfd {
  int fd = ::memfd_create("transfer-test", MFD_CLOEXEC);
  ~Memfd() { ::close(fd); }
  std::uint64_t size() const { return static_cast<std::uint64_t>(::lseek(fd, 0, SEEK_END)); }
  std::vector<std::uint8_t> bytes() const {
    std::vector<std::uint8_t> b(size());
    REQUIRE(::pread(fd, b.data(), b.size(), 0) == static_cast<ssize_t>(b.size()));
    return b;
  }
  void replace(const std::vector<std::uint8_t>& b) {
    REQUIRE(::ftruncate(fd, 0) == 0);
    REQUIRE(::pwrite(fd, b.data(), b.size(), 0) == static_cast<ssize_t>(b.size()));
  }
};

}  // namespace

TEST_CASE("a dataset transfer reads back what was written", "[datasets][transfer]") {
  const auto f = sample_file();
  Memfd m;
  write_demo_transfer(m.fd, f);
  const auto back = read_demo_transfer(m.fd, m.size(), 1 << 20);
  REQUIRE(back.episodes.size() == 3);
  CHECK(back.meta.views == f.meta.views);
  CHECK(back.meta.state_dim == 3);
  for (std::size_t e = 0; e < 3; ++e) {
    CHECK(back.episodes[e].images == f.episodes[e].images);
    CHECK(back.episodes[e].proprio == f.episodes[e].proprio);
    CHECK(back.episodes[e].actions == f.episodes[e].actions);
    CHECK(back.episodes[e].dones == f.episodes[e].dones);
    CHECK(back.episodes[e].valid == f.episodes[e].valid);
    CHECK(back.episodes[e].instruction == f.episodes[e].instruction);
  }
  CHECK(held_bytes(back) == held_bytes(f));
}

TEST_CASE("a dataset transfer holds no more than it may", "[datasets][transfer]") {
  Memfd m;
  write_demo_transfer(m.fd, sample_file());
  CHECK_THROWS_WITH(read_demo_transfer(m.fd, m.size(), 600), Catch::Contains("MiB it may hold"));
}

TEST_CASE("a damaged dataset transfer is refused with a DatasetError, never a crash", "[datasets][transfer]") {
  Memfd m;
  write_demo_transfer(m.fd, sample_file());
  const auto good = m.bytes();
  SECTION("truncated anywhere") {
    for (std::size_t cut = 0; cut < good.size(); cut += 7) {
      m.replace({good.begin(), good.begin() + static_cast<long>(cut)});
      CHECK_THROWS_AS(read_demo_transfer(m.fd, m.size(), 1 << 20), DatasetError);
    }
  }
  SECTION("bytes flipped at random") {
    std::mt19937 rng(7);
    int refused = 0, read = 0;
    for (int i = 0; i < 2000; ++i) {
      auto b = good;
      for (int k = 0; k < 3; ++k) b[rng() % b.size()] ^= static_cast<std::uint8_t>(1 + rng() % 255);
      m.replace(b);
      try {
        const auto f = read_demo_transfer(m.fd, m.size(), 1 << 20);
        CHECK(held_bytes(f) <= (1u << 20));
        ++read;  // a flip inside the arrays' values (images, say) is still a well-formed transfer
      } catch (const DatasetError&) {
        ++refused;
      }
    }
    CHECK(refused > 0);
    CHECK(refused + read == 2000);
  }
  SECTION("a size that the bytes behind it do not have") {
    m.replace(good);
    CHECK_THROWS_AS(read_demo_transfer(m.fd, m.size() + 4096, 1 << 20), DatasetError);
  }
}
