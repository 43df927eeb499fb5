// Chaos with eight tenants training at once: tenants SIGKILLed and restarted, nexusd stopped
// (SIGTERM) and restarted between their steps, its state directory's disk full for a while (a
// small tmpfs), and nexusd out of file descriptors (a low RLIMIT_NOFILE) while more tenants try
// to attach. Nothing is lost: every tenant's slot holds every step it was told was done, plus at
// most the one in flight when its process or the daemon went (applied but not acknowledged); no
// tenant sees an error other than the daemon going away or its save refused for lack of space.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "nexus/client.hpp"
#include "nexus/status.hpp"
#include "processes.hpp"

using namespace nexus::test;

namespace {

constexpr int kTenants = 8;

// What a tenant process shares with the test: in a file each, so that a SIGKILLed one's count
// survives it. acked: steps the daemon answered; violations: a slot that lost an acknowledged
// step (or gained more than the one in flight); errors: replies other than the expected ones.
struct Shared {
  std::int64_t acked = 0, violations = 0, errors = 0, registered = 0, saves_refused = 0;
  char last_error[256] = {};
};

Shared* map_shared(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  REQUIRE(fd >= 0);
  REQUIRE(::ftruncate(fd, sizeof(Shared)) == 0);
  void* p = ::mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  REQUIRE(p != MAP_FAILED);
  return static_cast<Shared*>(p);
}

bool daemon_away(nexus::ErrorCode c) {
  return c == nexus::ErrorCode::DaemonGone || c == nexus::ErrorCode::ConnectFailed || c == nexus::ErrorCode::Timeout ||
         c == nexus::ErrorCode::Internal;  // "nexusd is stopping", or attach refused while out of descriptors
}

// The tenant's loop, in its own process: attach (again, whenever nexusd went away), check that the
// slot kept every acknowledged step, train; save a checkpoint now and then (refused while the
// disk is full).
[[noreturn]] void tenant_process(const std::string& dir, int index) {
  Shared* sh = map_shared(dir + "/tenant" + std::to_string(index));
  const std::string name = "chaos" + std::to_string(index);
  std::mt19937 rng(static_cast<unsigned>(index));
  while (!std::filesystem::exists(dir + "/stop")) {
    try {
      auto c = nexus::Client::attach({.socket_path = read_file(dir + "/socket"), .tenant = name,
                                      .timeout = std::chrono::seconds(30)});
      nexus::BackboneInfo bb;
      if (sh->registered == 0) {
        bb = c->register_tenant({.head = {.kind = "mlp_chunk", .state_dim = 2, .action_dim = 2}, .seed = 5});
        sh->registered = 1;
      } else {
        bb = c->backbone();
        const auto step = static_cast<std::int64_t>(c->slot_digest().step);
        if (step < sh->acked || step > sh->acked + 1) {
          ++sh->violations;
          std::snprintf(sh->last_error, sizeof sh->last_error, "slot at step %lld, acknowledged %lld",
                        static_cast<long long>(step), static_cast<long long>(sh->acked));
        }
        sh->acked = step;  // the in-flight step, if it was applied, counts from here
      }
      auto images = c->alloc(nexus::DType::UInt8, {4, 1, bb.image_size, bb.image_size, 3});
      auto tokens = c->alloc(nexus::DType::Int32, {4, bb.max_tokens});
      auto mask = c->alloc(nexus::DType::UInt8, {4, bb.max_tokens});
      auto state = c->alloc(nexus::DType::Float32, {4, 2});
      auto actions = c->alloc(nexus::DType::Float32, {4, 1, 2});
      for (auto& b : images.raw()) b = static_cast<std::uint8_t>(rng());
      std::fill(mask.raw().begin(), mask.raw().end(), 1);
      const nexus::Observation obs{&images, &tokens, &mask, &state};
      while (!std::filesystem::exists(dir + "/stop")) {
        c->sft_step(obs, actions);
        ++sh->acked;
        if (sh->acked % 20 == 0) {
          try {
            c->save("periodic" + std::to_string(sh->acked % 3));
          } catch (const nexus::Error& e) {
            if (e.code() != nexus::ErrorCode::Internal && e.code() != nexus::ErrorCode::QuotaExceeded) throw;
            ++sh->saves_refused;  // the disk was full, or nexusd out of descriptors
          }
        }
      }
    } catch (const nexus::Error& e) {
      if (!daemon_away(e.code())) {
        ++sh->errors;
        std::snprintf(sh->last_error, sizeof sh->last_error, "%s", e.what());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }
  ::_exit(0);
}

pid_t start_tenant(const std::string& dir, int index) {
  const pid_t p = ::fork();
  if (p == 0) tenant_process(dir, index);
  return p;
}

std::vector<std::string> daemon_args(const std::string& state) {
  return {"--weights", tiny_weights_path(), "--log-level", "info", "--state-dir", state, "--max-tenants", "64"};
}

}  // namespace

TEST_CASE("chaos: killed tenants, a daemon restart, a full disk and no descriptors lose no acknowledged step",
          "[integration][model][chaos]") {
  if (::geteuid() != 0) FAIL("this test mounts a tmpfs: run the suite as root");
  TempDir dir;
  const std::string state = dir.path + "/state";
  std::filesystem::create_directories(state);
  REQUIRE(std::system(("mount -t tmpfs -o size=48m,mode=0700 nexus-chaos " + state).c_str()) == 0);
  struct Unmount {
    std::string path;
    ~Unmount() { std::system(("umount -l " + path).c_str()); }
  } unmount{state};
  // A low descriptor limit for nexusd (prlimit, util-linux): eight tenants fit, fifty more do not.
  const std::string nexusd = dir.path + "/nexusd-lowfd";
  std::ofstream(nexusd) << "#!/bin/sh\nexec prlimit --nofile=160:160 " << nexusd_path() << " \"$@\"\n";
  std::filesystem::permissions(nexusd, std::filesystem::perms::owner_all);

  auto d = std::make_unique<Daemon>(daemon_args(state), nexusd);
  std::ofstream(dir.path + "/socket") << d->socket();
  std::vector<pid_t> tenants;
  struct KillLeftovers {  // however the test ends, no tenant process outlives it
    std::vector<pid_t>& pids;
    ~KillLeftovers() {
      for (auto p : pids) ::kill(p, SIGKILL), ::waitpid(p, nullptr, 0);
    }
  } kill_leftovers{tenants};
  std::vector<Shared*> shared;
  for (int i = 0; i < kTenants; ++i) {
    shared.push_back(map_shared(dir.path + "/tenant" + std::to_string(i)));
    tenants.push_back(start_tenant(dir.path, i));
  }
  auto progress = [&](std::int64_t at_least) {
    return eventually([&] {
      for (auto* s : shared)
        if (s->acked < at_least) return false;
      return true;
    }, std::chrono::seconds(120));
  };
  auto kill_and_restart = [&](int i) {
    ::kill(tenants[i], SIGKILL);
    ::waitpid(tenants[i], nullptr, 0);
    tenants[i] = start_tenant(dir.path, i);
  };
  REQUIRE(progress(10));

  // Two tenants killed mid-step, and started again.
  kill_and_restart(2);
  kill_and_restart(5);
  REQUIRE(progress(30));

  // The state directory's disk full for a while: saves are refused, training goes on.
  {
    std::ofstream filler(state + "/filler", std::ios::binary);
    const std::vector<char> block(1 << 20, 1);
    while (filler.write(block.data(), block.size())) {
    }
  }
  const auto before_full = shared[0]->acked;
  REQUIRE(eventually([&] { return shared[0]->acked > before_full + 40; }, std::chrono::seconds(120)));
  std::filesystem::remove(state + "/filler");
  std::int64_t refused_saves = 0;
  for (auto* s : shared) refused_saves += s->saves_refused;
  std::fprintf(stderr, "[chaos] disk full: %lld saves refused\n", static_cast<long long>(refused_saves));
  CHECK(refused_saves > 0);

  // Out of descriptors: attaches beyond are refused; nexusd neither spins nor stops serving.
  std::vector<std::unique_ptr<nexus::Client>> extra;
  int refused = 0;
  for (int i = 0; i < 50; ++i) {
    try {
      extra.push_back(nexus::Client::attach({.socket_path = d->socket(), .tenant = "extra" + std::to_string(i),
                                             .client_arena_bytes = 1 << 20, .output_arena_bytes = 1 << 20,
                                             .timeout = std::chrono::seconds(5)}));
    } catch (const nexus::Error&) {
      ++refused;
    }
  }
  const auto before_emfile = shared[1]->acked;
  std::fprintf(stderr, "[chaos] out of descriptors: %d of 50 more attaches refused, %zu attached\n", refused, extra.size());
  CHECK(refused > 0);
  CHECK(eventually([&] { return shared[1]->acked > before_emfile + 10; }, std::chrono::seconds(60)));
  extra.clear();

  // nexusd stopped between steps and started again on the same state.
  const auto stopped = d->stop();
  INFO(read_file(d->log_path()));
  INFO("nexusd's exit status: " << (stopped ? std::to_string(*stopped) : "still running after 60 s"));
  REQUIRE(stopped == 0);
  d = std::make_unique<Daemon>(daemon_args(state), nexusd);
  std::ofstream(dir.path + "/socket", std::ios::trunc) << d->socket();
  const auto after_restart = shared[3]->acked;
  REQUIRE(eventually([&] { return shared[3]->acked > after_restart + 20; }, std::chrono::seconds(120)));
  kill_and_restart(6);
  REQUIRE(progress(after_restart + 30));

  std::ofstream(dir.path + "/stop") << "stop";
  for (auto& p : tenants) {
    CHECK(wait_exit(p, std::chrono::seconds(60)) == 0);
    p = -1;
  }
  std::erase(tenants, -1);
  INFO(read_file(d->log_path()));
  for (int i = 0; i < kTenants; ++i) {
    std::fprintf(stderr, "[chaos] tenant %d: %lld steps acknowledged\n", i, static_cast<long long>(shared[i]->acked));
    INFO("tenant " << i << ": acked " << shared[i]->acked << ", " << shared[i]->last_error);
    CHECK(shared[i]->violations == 0);
    CHECK(shared[i]->errors == 0);
    auto c = nexus::Client::attach({.socket_path = d->socket(), .tenant = "chaos" + std::to_string(i)});
    CHECK(static_cast<std::int64_t>(c->slot_digest().step) == shared[i]->acked);
  }
}
