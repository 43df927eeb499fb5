// Settings nexusd makes for its whole process before it starts any thread: how libgomp's workers
// wait and how glibc's allocator keeps freed memory. Each is left alone where the environment
// already sets it, so an operator can still choose.
#pragma once

namespace nexus::daemon {

// GOMP_SPINCOUNT for nexusd's own image (it starts itself again once; see the .cpp).
void settle_openmp_spin(char** argv);

// glibc's thresholds for giving freed memory back to the system (see the .cpp).
void settle_malloc();

}  // namespace nexus::daemon
