// A pass's intra-op team (daemon/model/pass_threads.hpp): the cap split among the lanes running
// passes at once, set on the lane's own thread (OpenMP's and MKL's per-thread counts, which
// LibTorch's operators read), fixed in deterministic mode, and the lanes' OpenMP pools kept within
// the cores.
#include <torch/torch.h>
#undef CHECK
#include <catch2/catch.hpp>

#include <dlfcn.h>

#include <filesystem>
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

std::size_t threads_in_this_process() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
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
        // LibTorch's operators fork a team of that size: one worker joins this thread, not three.
        // (A parallel_for compiled here would show nothing: this file is built without OpenMP.)
        const auto before = threads_in_this_process();
        const auto x = torch::rand({1 << 22});
        CHECK((x * 2 + 1).sum().item<double>() > 0);
        CHECK(threads_in_this_process() == before + 1);
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

namespace {
constexpr int kInference = 0, kTraining = 1;  // the kinds of queue a lane serves
}  // namespace

TEST_CASE("the lanes' OpenMP pools stay within the cores: a pass that would not fit runs on what fits and asks for it",
          "[model]") {
  // Two cores: libgomp counts the process's first thread, so the lanes' pools get one worker.
  PassThreads threads(2, /*fixed=*/false, /*lanes=*/4, /*cores=*/2);
  {
    const PassThreads::Scope alone(threads, 0, kInference);
    CHECK(alone.team() == 2);
    CHECK_FALSE(alone.asked_release());
  }
  CHECK(threads.pool_workers(0) == 1);
  {
    // A later lane of the same queue runs on one thread and leaves the first lane its pool:
    // the first is where that queue's next pass alone runs.
    const PassThreads::Scope later(threads, 1, kInference);
    CHECK(later.team() == 1);
    CHECK_FALSE(later.asked_release());
    CHECK_FALSE(threads.release_asked(0));
  }
  {
    // A training lane alone: one thread now, and the inference lane is asked for its pool.
    const PassThreads::Scope training(threads, 2, kTraining);
    CHECK(training.team() == 1);
    CHECK(training.asked_release());
    CHECK(threads.release_asked(0));
    CHECK(threads.pool_workers(2) == 0);  // a one-thread pass makes no pool
  }
  threads.release_pool(0);  // what lane 0 does between its turns (serve)
  CHECK_FALSE(threads.release_asked(0));
  CHECK(threads.pool_workers(0) == 0);
  {
    const PassThreads::Scope training(threads, 2, kTraining);
    CHECK(training.team() == 2);  // the cores are free again
  }
  {
    // Now the earlier lane of a queue asks a later one of the same queue.
    const PassThreads::Scope later(threads, 3, kTraining);
    CHECK(later.team() == 1);
    CHECK_FALSE(threads.release_asked(2));
  }
  threads.release_pool(2);
  {
    const PassThreads::Scope later(threads, 3, kTraining);
    CHECK(later.team() == 2);
  }
  {
    const PassThreads::Scope first(threads, 2, kTraining);
    CHECK(first.team() == 1);
    CHECK(threads.release_asked(3));
  }
}

TEST_CASE("a wider machine lets lanes side by side keep pools of their shares", "[model]") {
  PassThreads threads(16, /*fixed=*/false, /*lanes=*/2, /*cores=*/16);
  {
    const PassThreads::Scope alone(threads, 0, kInference);
    CHECK(alone.team() == 16);
  }
  {
    // Beside lane 0's 15 workers there is no room: one thread, and lane 0 is asked.
    const PassThreads::Scope training(threads, 1, kTraining);
    CHECK(training.team() == 1);
    CHECK(threads.release_asked(0));
  }
  {
    // Lane 0, asked but not idle yet (a busy queue), takes half the cap: libgomp lets the
    // surplus workers go, and the training lane beside it gets its share.
    const PassThreads::Scope inference(threads, 0, kInference);
    CHECK(inference.team() == 8);
    CHECK(threads.pool_workers(0) == 7);
    const PassThreads::Scope training(threads, 1, kTraining);
    CHECK(training.team() == 8);
  }
  CHECK(threads.release_asked(0));  // until lane 0 finds nothing to do and gives its pool back
  threads.release_pool(0);
  {
    const PassThreads::Scope inference(threads, 0, kInference);
    const PassThreads::Scope training(threads, 1, kTraining);
    CHECK(inference.team() == 9);  // the room beside lane 1's 7 workers, and lane 1 is asked
    CHECK(threads.release_asked(1));
    CHECK(training.team() == 8);   // asked: half the cap at most, within what is left
  }
}

TEST_CASE("giving a lane's pool back ends its OpenMP workers", "[model]") {
  on_a_lane([] {
    PassThreads threads(2, /*fixed=*/false, /*lanes=*/1, /*cores=*/2);
    const auto before = threads_in_this_process();
    {
      const PassThreads::Scope alone(threads, 0, kInference);
      REQUIRE(alone.team() == 2);
      // LibTorch's own operators fork the team (a parallel_for compiled here would not: this
      // file is built without OpenMP).
      const auto x = torch::rand({1 << 22});
      CHECK((x * 2 + 1).sum().item<double>() > 0);
    }
    CHECK(threads_in_this_process() == before + 1);  // the worker waits in the lane's pool
    threads.release_pool(0);
    CHECK(threads_in_this_process() == before);
    CHECK(threads.pool_workers(0) == 0);
  });
}
