// How many threads a pass's operators use (LibTorch's OpenMP team and MKL's), sized to the
// executor lanes running passes at that moment, and within what keeps libgomp's workers awake.
//
// Why: a replica has several lanes (service.md, "Executor lanes"), each a thread whose passes
// fork an OpenMP team of its own. With every team as wide as the machine ([model] torch_threads
// 0), two lanes' passes at once put twice as many threads as cores on the CPU: they preempt each
// other inside every operator, and each team's workers wait at its barriers for a thread that is
// not running. So a lane that starts a pass beside others takes its share of the cap (at least
// one thread), and one alone takes all of it. OpenMP's and MKL's counts are per thread, so lanes
// never change each other's; a pass keeps the team it started with. Measured on the 2-core VM
// (docs/results.md): the workload mix's shared run and the group bench's concurrent cells.
//
// The pools: each thread that leads a team keeps a pool of its workers in libgomp, idle or not,
// and once the threads in all pools (and the process's first thread) outnumber the cores,
// libgomp cuts every worker's spin between a pass's operators from milliseconds to about 10 µs
// for as long as that holds, so each operator wakes its workers through the kernel: a batch-1
// pass on tiny took 3 ms instead of 1.5 (service.md, "What a batch-1 request costs"). So the
// workers that lanes' pools hold are kept within the cores: a pass whose team would not fit
// beside the other lanes' pools runs on what fits (one thread at least) and asks the lanes that
// hold them (another queue's, or a later lane of its own) to give theirs back between turns;
// an asked lane that stays busy takes half the cap at most meanwhile (its pool shrinks).
//
// Deterministic mode keeps the count fixed for the daemon's life: a reduction split over another
// number of threads may round differently, and that mode promises bitwise results.
#pragma once

#include <atomic>
#include <cstddef>
#include <mutex>
#include <vector>

namespace nexus::model {

// The team for a pass that starts while `running` lanes (itself included) run passes: `cap`
// split evenly among them, never under one thread.
int pass_team(int cap, int running);

class PassThreads {
 public:
  // cap: [model] torch_threads, or the cores (0 configured); fixed: deterministic mode; lanes:
  // how many lanes share it; cores: the CPUs libgomp counts its threads against (0: this machine's).
  PassThreads(int cap, bool fixed, std::size_t lanes = 1, int cores = 0);
  PassThreads(const PassThreads&) = delete;
  PassThreads& operator=(const PassThreads&) = delete;

  // A lane's pass, on the lane's thread: counted as running while the scope lives, this thread's
  // team sized on entry. kind: the queue the lane serves (any number, the same for one queue).
  class Scope {
   public:
    explicit Scope(PassThreads& owner, std::size_t lane = 0, int kind = 0);
    ~Scope() { owner_.running_.fetch_sub(1, std::memory_order_relaxed); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    int team() const { return team_; }
    // Another lane was asked to give its pool back: the caller wakes the idle lanes to do it.
    bool asked_release() const { return asked_; }

   private:
    PassThreads& owner_;
    int team_ = 1;
    bool asked_ = false;
  };

  int cap() const { return cap_; }
  // [model] torch_threads as a cap: 0 configured is one thread per core.
  static int cap_for(int configured);

  // Between a lane's turns, on its own thread: whether another lane asked for its pool.
  bool release_asked(std::size_t lane);
  // On lane `lane`'s own thread, outside any pass: its pool's workers exit (OpenMP 5's
  // omp_pause_resource_all). Also as a lane's thread starts: a new thread has no pool yet.
  void release_pool(std::size_t lane);
  // The workers lane `lane`'s thread holds in its pool, as far as this ledger knows.
  int pool_workers(std::size_t lane);

 private:
  const int cap_;
  const bool fixed_;
  const int budget_;  // pool workers all lanes may hold: the cores (or the cap, if above) less one
  std::atomic<int> running_{0};
  std::mutex mu_;                           // the ledger below
  std::vector<int> pool_;                   // GUARDED_BY(mu_): workers each lane's thread holds
  std::vector<int> kind_;                   // GUARDED_BY(mu_): the queue each lane serves
  std::vector<unsigned char> asked_;        // GUARDED_BY(mu_): asked to give its pool back
};

// Sets the calling thread's OpenMP and MKL thread counts (both per thread), as LibTorch's
// set_num_threads would for the process: its pthreadpool is left alone (resizing it per pass
// would start threads). Found at run time, so a LibTorch without MKL (Debian's) or without
// libgomp links the same; a missing one is skipped.
void set_this_thread_team(int threads);

}  // namespace nexus::model
