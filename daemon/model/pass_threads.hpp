// How many threads a pass's operators use (LibTorch's OpenMP team and MKL's), sized to the
// executor lanes running passes at that moment.
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
// Not solved here: libgomp shortens its workers' spin (to about 10 µs) for good once its threads
// outnumber the cores, which every lane's team counts toward even when idle, so a lone pass's
// workers sleep between operators (service.md, "What a batch-1 request costs").
//
// Deterministic mode keeps the count fixed for the daemon's life: a reduction split over another
// number of threads may round differently, and that mode promises bitwise results.
#pragma once

#include <atomic>

namespace nexus::model {

// The team for a pass that starts while `running` lanes (itself included) run passes: `cap`
// split evenly among them, never under one thread.
int pass_team(int cap, int running);

class PassThreads {
 public:
  // cap: [model] torch_threads, or the cores (0 configured); fixed: deterministic mode.
  PassThreads(int cap, bool fixed) : cap_(cap < 1 ? 1 : cap), fixed_(fixed) {}
  PassThreads(const PassThreads&) = delete;
  PassThreads& operator=(const PassThreads&) = delete;

  // A lane's pass: counted as running while the scope lives, this thread's team sized on entry.
  class Scope {
   public:
    explicit Scope(PassThreads& owner);
    ~Scope() { owner_.running_.fetch_sub(1, std::memory_order_relaxed); }
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    int team() const { return team_; }

   private:
    PassThreads& owner_;
    int team_ = 1;
  };

  int cap() const { return cap_; }
  // [model] torch_threads as a cap: 0 configured is one thread per core.
  static int cap_for(int configured);

 private:
  const int cap_;
  const bool fixed_;
  std::atomic<int> running_{0};
};

// Sets the calling thread's OpenMP and MKL thread counts (both per thread), as LibTorch's
// set_num_threads would for the process: its pthreadpool is left alone (resizing it per pass
// would start threads). Found at run time, so a LibTorch without MKL (Debian's) or without
// libgomp links the same; a missing one is skipped.
void set_this_thread_team(int threads);

}  // namespace nexus::model
