// Tenants' dataset files are parsed by nexus-dataset-reader (datasets/sandbox/), one process per
// load, never inside nexusd: libhdf5 has a long CVE history, and a file that crashes it, hangs it
// or makes it allocate without end must cost that load alone. The reader gets the tenant's
// descriptor and a socket, enters its sandbox (no files, no network, no processes; memory, CPU
// and output capped), and hands the decoded arrays back in a sealed memfd, which is read here as
// hostile bytes (datasets/demo_transfer.hpp) and at most `max_bytes` of it held.
//
// Thread safety: parse() may run on many threads at once (each load has its own process).
#pragma once
#include <chrono>
#include <cstdint>
#include <string>

#include "datasets/demo_file.hpp"

namespace nexus::env {

struct DatasetReader {
  std::string path;                             // nexus-dataset-reader; empty: parse in this process (tools, tests)
  std::chrono::milliseconds timeout{120000};    // the whole parse, from start to its result
};

// The path of `program` beside the running executable, or in the build tree's `build_dir`
// beside nexusd's daemon/ ("" if neither exists).
std::string beside_executable(const std::string& program, const std::string& build_dir);
// nexus-dataset-reader's, so.
std::string reader_beside_executable();

// Reads the file behind `fd` (not closed here) with `options` (max_bytes: the most the result
// may hold). Throws datasets::DatasetTooLarge when holding it would pass max_bytes, and
// datasets::DatasetError for a bad file and for a reader that crashed, ran out of a limit or
// past the timeout.
datasets::DemoFile parse_dataset(const DatasetReader& reader, int fd, const std::string& name,
                                 const datasets::ReadOptions& options);

}  // namespace nexus::env
