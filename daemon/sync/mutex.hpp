// A mutex that clang's thread-safety analysis (-Wthread-safety) understands, and the macros to
// annotate what it guards. libstdc++'s std::mutex and std::lock_guard carry no capability
// attributes, so the analysis cannot see them; these wrap them with the attributes from clang's
// documentation (ThreadSafetyAnalysis.html, "mutex.h") and cost nothing at run time. Under GCC the
// macros are empty. tools/check_thread_safety.py compiles every translation unit that includes
// this header with clang -Wthread-safety -Werror (test unit.thread_safety_annotations).
//
// Use: `Mutex mu_; int n_ NEXUS_GUARDED_BY(mu_);`, `MutexLock lk(mu_);` in a member that touches
// n_, and `NEXUS_REQUIRES(mu_)` on a private helper called with mu_ held. A condition variable
// waits on `lk.native()`; the analysis treats the mutex as held across the wait, as it is again
// when the wait returns.
#pragma once
#include <mutex>

#if defined(__clang__)
#define NEXUS_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define NEXUS_THREAD_ANNOTATION(x)
#endif

#define NEXUS_CAPABILITY(x) NEXUS_THREAD_ANNOTATION(capability(x))
#define NEXUS_SCOPED_CAPABILITY NEXUS_THREAD_ANNOTATION(scoped_lockable)
#define NEXUS_GUARDED_BY(x) NEXUS_THREAD_ANNOTATION(guarded_by(x))
#define NEXUS_PT_GUARDED_BY(x) NEXUS_THREAD_ANNOTATION(pt_guarded_by(x))
#define NEXUS_REQUIRES(...) NEXUS_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
#define NEXUS_ACQUIRE(...) NEXUS_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define NEXUS_RELEASE(...) NEXUS_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define NEXUS_TRY_ACQUIRE(...) NEXUS_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))
#define NEXUS_EXCLUDES(...) NEXUS_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))
#define NEXUS_NO_THREAD_SAFETY_ANALYSIS NEXUS_THREAD_ANNOTATION(no_thread_safety_analysis)

namespace nexus {

class NEXUS_CAPABILITY("mutex") Mutex {
 public:
  void lock() NEXUS_ACQUIRE() { m_.lock(); }
  void unlock() NEXUS_RELEASE() { m_.unlock(); }
  bool try_lock() NEXUS_TRY_ACQUIRE(true) { return m_.try_lock(); }
  std::mutex& native() { return m_; }

 private:
  std::mutex m_;
};

// Holds a Mutex for its scope (std::lock_guard, visible to the analysis).
class NEXUS_SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& m) NEXUS_ACQUIRE(m) : lock_(m.native()) {}
  ~MutexLock() NEXUS_RELEASE() {}
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;
  // For std::condition_variable::wait (which unlocks and relocks it).
  std::unique_lock<std::mutex>& native() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

}  // namespace nexus
