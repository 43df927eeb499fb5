#include "daemon/model/pass_threads.hpp"

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <thread>

namespace nexus::model {

int pass_team(int cap, int running) { return std::max(1, std::max(1, cap) / std::max(1, running)); }

namespace {
// What libgomp compares its threads with: the CPUs in the affinity mask as it loaded (a
// cpuset, taskset or the unit's CPUAffinity= may leave fewer than the machine has).
int cpus_libgomp_counts() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return PassThreads::cap_for(0);
}
}  // namespace

int PassThreads::cap_for(int configured) {
  return configured > 0 ? configured : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

PassThreads::PassThreads(int cap, bool fixed, std::size_t lanes, int cores)
    : cap_(cap < 1 ? 1 : cap),
      fixed_(fixed),
      // libgomp counts the process's first thread too: the lanes' pools get the other cores.
      budget_(std::max(cap_, cores > 0 ? cores : cpus_libgomp_counts()) - 1),
      pool_(std::max<std::size_t>(1, lanes), 0),
      kind_(pool_.size(), 0),
      asked_(pool_.size(), 0) {}

PassThreads::Scope::Scope(PassThreads& owner, std::size_t lane, int kind) : owner_(owner) {
  const int running = owner_.running_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (owner_.fixed_) {
    team_ = owner_.cap_;
    return;
  }
  team_ = pass_team(owner_.cap_, running);
  {
    std::lock_guard lk(owner_.mu_);
    lane = std::min(lane, owner_.pool_.size() - 1);
    owner_.kind_[lane] = kind;
    // Asked for its pool but not idle yet (a busy queue): half the cap at most until it gives the
    // pool back, so libgomp lets the surplus workers go and the asking lane finds room (on two
    // cores half is one thread, which shrinks nothing: there only its idle moment does).
    if (owner_.asked_[lane] && owner_.cap_ >= 4) team_ = std::min(team_, owner_.cap_ / 2);
    int others = 0;
    for (std::size_t j = 0; j < owner_.pool_.size(); ++j)
      if (j != lane) others += owner_.pool_[j];
    const int room = std::max(0, owner_.budget_ - others);
    if (team_ - 1 > room) {
      team_ = 1 + room;
      // An earlier lane of this queue keeps its pool: lanes of one queue take its turns in order
      // (replica_executor.cpp), so the earlier one is where a pass alone runs next.
      for (std::size_t j = 0; j < owner_.pool_.size(); ++j)
        if (j != lane && owner_.pool_[j] > 0 && (owner_.kind_[j] != kind || j > lane)) owner_.asked_[j] = 1, asked_ = true;
    }
    // libgomp grows a pool to a wider team and lets a narrower one's surplus workers exit; a
    // one-thread region leaves the pool as it is.
    if (team_ > 1) owner_.pool_[lane] = team_ - 1;
  }
  set_this_thread_team(team_);
}

bool PassThreads::release_asked(std::size_t lane) {
  std::lock_guard lk(mu_);
  return lane < asked_.size() && asked_[lane];
}

int PassThreads::pool_workers(std::size_t lane) {
  std::lock_guard lk(mu_);
  return lane < pool_.size() ? pool_[lane] : 0;
}

namespace {
using IntCall = int (*)(int);  // omp_set_num_threads returns nothing: the int is ignored
// Resolved once; RTLD_DEFAULT finds them in the libgomp and libtorch_cpu nexusd already loaded.
IntCall lookup(const char* name) { return reinterpret_cast<IntCall>(::dlsym(RTLD_DEFAULT, name)); }
}  // namespace

void PassThreads::release_pool(std::size_t lane) {
  static const IntCall pause_all = lookup("omp_pause_resource_all");
  constexpr int kPauseSoft = 1;  // omp_pause_soft: the threads go, the settings stay
  // No libgomp: no pools to give back. A refused pause (inside a parallel region: never here)
  // leaves the ledger as it was.
  if (pause_all && pause_all(kPauseSoft) != 0) return;
  std::lock_guard lk(mu_);
  if (lane < pool_.size()) pool_[lane] = 0, asked_[lane] = 0;
}

void set_this_thread_team(int threads) {
  static const IntCall omp = lookup("omp_set_num_threads");
  // MKL's own count for this thread, which LibTorch's set_num_threads set on the lane's start
  // and which MKL prefers to OpenMP's. mkl_service.h's C name: the lower-case symbol is the
  // Fortran interface, which takes a pointer.
  static const IntCall mkl = lookup("MKL_Set_Num_Threads_Local");
  thread_local int current = 0;  // skip the calls when nothing changes
  if (threads == current) return;
  current = threads;
  if (omp) omp(threads);
  if (mkl) mkl(threads);
}

}  // namespace nexus::model
