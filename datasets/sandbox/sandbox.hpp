// The sandbox nexus-dataset-reader puts itself in before it parses a tenant's file: resource
// limits, no new privileges, and a seccomp filter (libseccomp) that allows memory management,
// reads and writes on descriptors it already holds, sending on its socket to nexusd, and exiting.
// Everything else fails with EPERM: opening a path (so libhdf5 reaches no file, external link or
// filter plugin), sockets (no network), fork, clone and exec (no new processes), kill, ptrace.
//
// Internal to the reader (datasets/sandbox/reader_main.cpp).
#pragma once
#include <cstdint>
#include <string>

namespace nexus::datasets::sandbox {

struct Limits {
  std::uint64_t memory_bytes = 0;   // RLIMIT_AS (0: unlimited; not set under AddressSanitizer)
  std::uint64_t cpu_seconds = 60;   // RLIMIT_CPU: SIGXCPU, then SIGKILL past the hard limit
  std::uint64_t file_bytes = 0;     // RLIMIT_FSIZE: what it may write (its result, into a memfd)
};

// Applies the limits and the filter to the calling process, for good; the reason on failure.
std::string enter(const Limits& limits);

}  // namespace nexus::datasets::sandbox
