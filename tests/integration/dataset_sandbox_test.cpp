// Tenants' dataset files are parsed in a sandboxed process, within what is left of their quota:
//  - a decompression bomb (3.5 GB declared, a few MB on disk) is refused against the quota before
//    anything is allocated or inflated: nexusd's peak memory does not move (at c0d0e58 it
//    inflated up to 4 GiB in the daemon before the quota was applied);
//  - a parser that crashes or hangs fails that load alone, with a typed error; nexusd and its
//    other tenants go on (at c0d0e58 libhdf5 ran inside nexusd);
// (unit.dataset_reader_sandbox checks that the sandbox refuses files, network and new processes.)
#include <catch2/catch.hpp>

#include <fstream>
#include <sys/stat.h>
#include <nlohmann/json.hpp>

#include "nexus/client.hpp"
#include "nexus/status.hpp"
#include "processes.hpp"
#include "tenant_run.hpp"

using namespace nexus::test;

namespace {

nexus::ErrorCode load_error(nexus::Client& c, const std::string& name, const std::string& file, std::string* what) {
  try {
    c.dataset_load(name, file);
  } catch (const nexus::Error& e) {
    *what = e.what();
    return e.code();
  }
  return nexus::ErrorCode::None;
}

std::string reach_file(const TempDir& dir) {
  const std::string file = dir.path + "/reach.hdf5";
  REQUIRE(run_json({nexusctl_path(), "dataset", "record", "--task", "reach", "--episodes", "2", "--out", file}, dir,
                   "record").first == 0);
  return file;
}

std::string script(const TempDir& dir, const std::string& name, const std::string& body) {
  const std::string path = dir.path + "/" + name;
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  ::chmod(path.c_str(), 0755);
  return path;
}

}  // namespace

TEST_CASE("a decompression bomb is refused against the tenant's quota before nexusd allocates it",
          "[integration][model][datasets][sandbox]") {
  TempDir dir;
  const std::string bomb = dir.path + "/bomb.hdf5";
  const pid_t maker = spawn({NEXUS_TEST_PYTHON, std::string(NEXUS_TEST_SOURCE_DIR) + "/tests/datasets/make_bomb.py", bomb},
                            {.stderr_path = dir.path + "/maker.err"});
  REQUIRE(wait_exit(maker, std::chrono::seconds(300)) == 0);
  std::ofstream(dir.path + "/nexusd.toml") << "[env]\ndataset_mib_per_tenant = 256\n";
  Daemon d({"--config", dir.path + "/nexusd.toml", "--weights", tiny_weights_path(), "--log-level", "warn"});
  auto c = nexus::Client::attach({.socket_path = d.socket(), .tenant = "bomber", .timeout = std::chrono::seconds(120)});
  const long before = process_status_field(d.pid(), "VmHWM");
  std::string what;
  const auto code = load_error(*c, "bomb", bomb, &what);
  INFO(what);
  CHECK(code == nexus::ErrorCode::QuotaExceeded);
  CHECK_THAT(what, Catch::Contains("256 MiB"));
  const long after = process_status_field(d.pid(), "VmHWM");
  INFO("nexusd peak RSS " << before / 1024 << " -> " << after / 1024 << " MiB; " << what);
  CHECK(after - before < 128 * 1024);  // kB: the daemon never held the bomb
  // The tenant's quota is whole again: a real dataset loads after it.
  CHECK(load_error(*c, "reach", reach_file(dir), &what) == nexus::ErrorCode::None);
}

TEST_CASE("a dataset parser that crashes or hangs fails that load alone", "[integration][model][datasets][sandbox]") {
  TempDir dir;
  const auto file = reach_file(dir);
  for (const auto& [kind, body, expect] :
       {std::tuple<std::string, std::string, std::string>{"crash", "kill -SEGV $$", "killed by signal 11"},
        {"hang", "exec sleep 1000", "took longer than 1500 ms"}}) {
    DYNAMIC_SECTION(kind) {
      std::ofstream(dir.path + "/nexusd.toml") << "[env]\ndataset_reader = \"" << script(dir, kind + ".sh", body)
                                               << "\"\ndataset_parse_timeout_ms = 1500\n";
      Daemon d({"--config", dir.path + "/nexusd.toml", "--weights", tiny_weights_path(), "--log-level", "warn"});
      auto victim = nexus::Client::attach({.socket_path = d.socket(), .tenant = "victim"});
      auto neighbour = nexus::Client::attach({.socket_path = d.socket(), .tenant = "neighbour"});
      neighbour->register_tenant({.head = {.kind = "mlp_chunk", .action_dim = 2}});
      const auto sockets = count_fds(d.pid(), "socket");
      std::string what;
      CHECK(load_error(*victim, "demos", file, &what) == nexus::ErrorCode::BadDataset);
      CHECK_THAT(what, Catch::Contains(expect));
      // The daemon and its other tenants go on; no parser is left behind.
      const std::vector<std::uint8_t> p = {1, 2, 3};
      CHECK(neighbour->ping(p) == p);
      CHECK(neighbour->slot_digest().step == 0);
      CHECK(victim->ping(p) == p);
      CHECK(eventually([&] { return count_fds(d.pid(), "socket") == sockets; }));  // nothing left open
    }
  }
}

// Files the dataset fuzzer made that break libhdf5 1.10.8 itself (tests/datasets/hostile/): one
// loops forever on a corrupt global heap, one asks malloc for 7 TB, one makes it read past a
// buffer (under AddressSanitizer a heap-buffer-overflow in H5MM_strdup). At c0d0e58 nexusd parsed
// them in its own address space (the first held a tenant's lane and a core forever); now each is
// a typed error for its tenant, and nexusd and its other tenants go on.
TEST_CASE("files that break libhdf5 itself fail their load alone", "[integration][model][datasets][sandbox]") {
  TempDir dir;
  std::ofstream(dir.path + "/nexusd.toml") << "[env]\ndataset_parse_timeout_ms = 3000\n";
  Daemon d({"--config", dir.path + "/nexusd.toml", "--weights", tiny_weights_path(), "--log-level", "warn"});
  auto victim = nexus::Client::attach({.socket_path = d.socket(), .tenant = "victim", .timeout = std::chrono::seconds(60)});
  auto neighbour = nexus::Client::attach({.socket_path = d.socket(), .tenant = "neighbour"});
  neighbour->register_tenant({.head = {.kind = "mlp_chunk", .action_dim = 2}});
  const std::string hostile = std::string(NEXUS_TEST_SOURCE_DIR) + "/tests/datasets/hostile/";
  for (const auto& [file, expect] : std::vector<std::pair<std::string, std::string>>{
           {"libhdf5-heap-loop.h5", "CPU time"},
           {"libhdf5-huge-malloc.h5", "memory allocation failed"},
           {"libhdf5-strdup-overflow.h5", "attribute name has different length"}}) {
    std::string what;
    INFO(file);
    CHECK(load_error(*victim, "hostile", hostile + file, &what) == nexus::ErrorCode::BadDataset);
    INFO(what);
    CHECK((what.find(expect) != std::string::npos || what.find("took longer") != std::string::npos));
    const std::vector<std::uint8_t> p = {7};
    CHECK(neighbour->ping(p) == p);
  }
  CHECK(neighbour->slot_digest().step == 0);
  CHECK(nexus::query_status(d.socket()).pid == d.pid());
}
