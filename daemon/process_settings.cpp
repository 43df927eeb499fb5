#include "daemon/process_settings.hpp"

#include <malloc.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace nexus::daemon {

// How long libgomp's workers spin before they sleep, between a pass's operators: 3000 pauses
// instead of its default 300,000 (milliseconds). Why: the lanes keep their OpenMP pools within
// the cores (daemon/model/pass_threads.hpp), so libgomp no longer throttles the spin to ~100
// pauses, and a lone pass's workers stay awake between operators (a batch-1 predict on tiny:
// 3.2 ms before, 1.4-2.3 at p50 after); but when another lane's pass starts beside a wide one,
// a worker spinning for milliseconds holds a core the other pass needs (measured: a 366 ms
// training turn where 50 ms is usual, docs/results.md). libgomp reads the variable once, before
// main, so nexusd sets it and starts itself again (same pid, same descriptors: systemd's socket
// too). An environment that sets GOMP_SPINCOUNT or OMP_WAIT_POLICY is left as it is.
// The processes nexusd starts (rollout engines, dataset readers) do not inherit the setting:
// once libgomp has read it, the second image takes it out of its environment again.
void settle_openmp_spin(char** argv) {
  constexpr const char* kSetHere = "NEXUSD_SET_GOMP_SPINCOUNT";
  if (std::getenv(kSetHere)) {
    ::unsetenv(kSetHere);
    ::unsetenv("GOMP_SPINCOUNT");
    return;
  }
  if (std::getenv("GOMP_SPINCOUNT") || std::getenv("OMP_WAIT_POLICY")) return;
  ::setenv("GOMP_SPINCOUNT", "3000", 1);
  ::setenv(kSetHere, "1", 1);
  ::execv("/proc/self/exe", argv);  // returns only if it failed: then libgomp's default stays
  ::unsetenv(kSetHere);
  ::unsetenv("GOMP_SPINCOUNT");
}

// Why: a pass allocates its activations (megabytes each) and frees them at its end, on a lane's
// thread, so in one of glibc's per-thread arenas. With glibc's defaults (thresholds of 128 KiB
// that it raises only as it sees large blocks freed) the freed memory was given back to the
// system and large blocks mapped and unmapped pass after pass: each pass faulted its activations
// in again, page by page, zeroed by the kernel. Measured through nexusd on the 2-core VM (tiny, 8 tenants x
// batch 1, docs/results.md): 0.4-1.3 million page faults per 3 200 predicts and the grouped
// backbone at 1.05-1.27 ms per sample; with the thresholds below 0.12 million (those of start-up)
// and 0.77-0.84 ms, the same pass's cost in-process. So blocks up to 32 MiB (glibc's own ceiling
// for its dynamic threshold) come from the arenas, and an arena keeps up to 256 MiB free at its
// top for the next pass. Memory that eviction, detach or dropped versions free is still given
// back: those call malloc_trim (slot_registry.cpp, slot_eviction.cpp), which ignores thresholds.
// GLIBC_TUNABLES or MALLOC_*_ in the environment: the operator's choice stands.
void settle_malloc() {
  if (const char* t = std::getenv("GLIBC_TUNABLES"); t && std::strstr(t, "glibc.malloc.")) return;
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_")) return;
  constexpr int kMmapThreshold = 32 << 20;
  constexpr int kTrimThreshold = 256 << 20;
  ::mallopt(M_MMAP_THRESHOLD, kMmapThreshold);
  ::mallopt(M_TRIM_THRESHOLD, kTrimThreshold);
}

}  // namespace nexus::daemon
