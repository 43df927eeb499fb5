#include "daemon/model/pass_threads.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <thread>

namespace nexus::model {

int pass_team(int cap, int running) { return std::max(1, std::max(1, cap) / std::max(1, running)); }

int PassThreads::cap_for(int configured) {
  return configured > 0 ? configured : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

PassThreads::Scope::Scope(PassThreads& owner) : owner_(owner) {
  const int running = owner_.running_.fetch_add(1, std::memory_order_relaxed) + 1;
  team_ = owner_.fixed_ ? owner_.cap_ : pass_team(owner_.cap_, running);
  if (!owner_.fixed_) set_this_thread_team(team_);
}

namespace {
using SetThreads = int (*)(int);  // omp_set_num_threads returns nothing: the int is ignored
// Resolved once; RTLD_DEFAULT finds them in the libgomp and libtorch_cpu nexusd already loaded.
SetThreads lookup(const char* name) { return reinterpret_cast<SetThreads>(::dlsym(RTLD_DEFAULT, name)); }
}  // namespace

void set_this_thread_team(int threads) {
  static const SetThreads omp = lookup("omp_set_num_threads");
  // MKL's own count for this thread, which LibTorch's set_num_threads set on the lane's start
  // and which MKL prefers to OpenMP's. mkl_service.h's C name: the lower-case symbol is the
  // Fortran interface, which takes a pointer.
  static const SetThreads mkl = lookup("MKL_Set_Num_Threads_Local");
  thread_local int current = 0;  // skip the calls when nothing changes
  if (threads == current) return;
  current = threads;
  if (omp) omp(threads);
  if (mkl) mkl(threads);
}

}  // namespace nexus::model
