// A pass's intra-op team (daemon/model/pass_threads.hpp): the cap split among the lanes running
// passes at once, set on the lane's own thread (OpenMP's and MKL's per-thread counts, which
// LibTorch's operators read), and fixed in deterministic mode.
#include <torch/torch.h>
#undef CHECK
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <thread>

#include "daemon/model/pass_threads.hpp"

using nexus::model::pass_team;
using nexus::model::PassThreads;

namespace {

// MKL's count for the calling thread, where LibTorch has MKL (the PyPI wheel; Debian's has not).
int mkl_threads() {
  using Get = int (*)();
  static const auto get = reinterpret_cast<Get>(::dlsym(RTLD_DEFAULT, "MKL_Get_Max_Threads"));
  return get ? get() : -1;
}

// Runs `body` on a thread of its own, as a lane is: the counts are per thread.
template <class F>
void on_a_lane(F body) {
  std::thread t([&] {
    torch::set_num_threads(4);    // what a lane does as it starts (replica_executor.cpp)
    (void)at::get_num_threads();  // and LibTorch's first-use set-up with it
    body();
  });
  t.join();
}

}  // namespace

TEST_CASE("a pass's team is the cap split among the lanes running passes, one thread at least", "[model]") {
  CHECK(pass_team(2, 1) == 2);
  CHECK(pass_team(2, 2) == 1);
  CHECK(pass_team(2, 3) == 1);
  CHECK(pass_team(16, 4) == 4);
  CHECK(pass_team(16, 3) == 5);
  CHECK(pass_team(0, 0) == 1);  // nonsense in, one thread out
  CHECK(PassThreads::cap_for(3) == 3);
  CHECK(PassThreads::cap_for(0) >= 1);  // one per core
}

TEST_CASE("a lane alone gets every thread of the cap and beside another its share and LibTorch uses that count",
          "[model]") {
  on_a_lane([] {
    PassThreads threads(4, /*fixed=*/false);
    {
      const PassThreads::Scope alone(threads);
      CHECK(alone.team() == 4);
      CHECK(at::get_num_threads() == 4);
      if (mkl_threads() > 0) CHECK(mkl_threads() == 4);
      {
        // A second lane's pass starts meanwhile (a scope of its own, as its thread would hold).
        const PassThreads::Scope beside(threads);
        CHECK(beside.team() == 2);
        CHECK(at::get_num_threads() == 2);
        if (mkl_threads() > 0) CHECK(mkl_threads() == 2);
        // The operators run with it: a parallel_for splits over at most that many threads.
        std::atomic<int> chunks{0};
        at::parallel_for(0, 1 << 20, 1, [&](std::int64_t, std::int64_t) { ++chunks; });
        CHECK(chunks.load() <= 2);
      }
    }
    const PassThreads::Scope again(threads);  // alone again: the whole cap
    CHECK(again.team() == 4);
    CHECK(at::get_num_threads() == 4);
  });
}

TEST_CASE("deterministic mode keeps a pass's team at the cap whoever else runs", "[model]") {
  on_a_lane([] {
    PassThreads threads(4, /*fixed=*/true);
    const PassThreads::Scope first(threads);
    const PassThreads::Scope second(threads);
    CHECK(first.team() == 4);
    CHECK(second.team() == 4);
    CHECK(at::get_num_threads() == 4);  // as the lane set it: reductions split the same way every pass
  });
}
