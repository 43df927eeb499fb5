#include "datasets/sandbox/sandbox.hpp"

#include <seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>

#include <cerrno>
#include <cstring>

namespace nexus::datasets::sandbox {
namespace {

bool set_limit(int resource, std::uint64_t soft, std::uint64_t hard) {
  rlimit r{static_cast<rlim_t>(soft), static_cast<rlim_t>(hard)};
  return ::setrlimit(resource, &r) == 0;
}

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAddressSanitizer = true;  // reserves terabytes of address space for its shadow
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAddressSanitizer = true;
#else
constexpr bool kAddressSanitizer = false;
#endif
#else
constexpr bool kAddressSanitizer = false;
#endif

}  // namespace

std::string enter(const Limits& limits) {
  if (limits.memory_bytes > 0 && !kAddressSanitizer && !set_limit(RLIMIT_AS, limits.memory_bytes, limits.memory_bytes))
    return std::string("RLIMIT_AS: ") + std::strerror(errno);
  if (!set_limit(RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds + 1)) return std::string("RLIMIT_CPU: ") + std::strerror(errno);
  if (!set_limit(RLIMIT_FSIZE, limits.file_bytes, limits.file_bytes)) return std::string("RLIMIT_FSIZE: ") + std::strerror(errno);
  if (!set_limit(RLIMIT_CORE, 0, 0)) return std::string("RLIMIT_CORE: ") + std::strerror(errno);
  if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return std::string("no_new_privs: ") + std::strerror(errno);

  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
  if (ctx == nullptr) return "seccomp_init failed";
  // What parsing a file image in memory and answering nexusd needs (and abort() on a bug: tgkill).
  const int allowed[] = {
      SCMP_SYS(read), SCMP_SYS(pread64), SCMP_SYS(readv), SCMP_SYS(write), SCMP_SYS(writev), SCMP_SYS(pwrite64),
      SCMP_SYS(lseek), SCMP_SYS(fstat), SCMP_SYS(newfstatat), SCMP_SYS(close), SCMP_SYS(mmap), SCMP_SYS(munmap),
      SCMP_SYS(mremap), SCMP_SYS(mprotect), SCMP_SYS(brk), SCMP_SYS(madvise), SCMP_SYS(futex), SCMP_SYS(exit),
      SCMP_SYS(exit_group), SCMP_SYS(rt_sigreturn), SCMP_SYS(rt_sigaction), SCMP_SYS(rt_sigprocmask),
      SCMP_SYS(sigaltstack), SCMP_SYS(sendmsg), SCMP_SYS(getpid), SCMP_SYS(gettid), SCMP_SYS(tgkill),
      SCMP_SYS(clock_gettime), SCMP_SYS(clock_nanosleep), SCMP_SYS(nanosleep), SCMP_SYS(getrandom), SCMP_SYS(fcntl),
      SCMP_SYS(ftruncate), SCMP_SYS(sched_yield), SCMP_SYS(getrusage), SCMP_SYS(prlimit64), SCMP_SYS(sysinfo),
  };
  for (int sys : allowed) {
    if (seccomp_rule_add(ctx, SCMP_ACT_ALLOW, sys, 0) != 0) {
      seccomp_release(ctx);
      return "seccomp_rule_add failed";
    }
  }
  const int rc = seccomp_load(ctx);
  seccomp_release(ctx);
  if (rc != 0) return std::string("seccomp_load: ") + std::strerror(-rc);
  return "";
}

}  // namespace nexus::datasets::sandbox
