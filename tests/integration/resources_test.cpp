// Bounded resources through real processes: published versions are kept K at a time (memory
// does not grow with publishes), a detached tenant's slot is checkpointed and freed after the
// idle time and comes back when it returns, request memory and tenants per user are bounded, and
// a pass's memory is reused by the next instead of faulted in again.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "nexus/client.hpp"
#include "nexus/status.hpp"
#include "error_code.hpp"
#include "processes.hpp"

using namespace nexus::test;

namespace {

std::size_t rss_kib(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoul(line.substr(6));
  return 0;
}

// The process's minor page faults so far (/proc/PID/stat's tenth field, counted after the
// command name's closing parenthesis, which may hold spaces).
std::uint64_t minor_faults(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  std::istringstream rest(line.substr(line.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 10; ++i) rest >> field;  // state (3) ... minflt (10)
  return std::stoull(field);
}

// Under ASan or TSan (scripts/sanitize.sh builds nexusd and these tests alike) malloc is the
// sanitizer's, which mallopt and malloc_trim do not steer: the memory tests below say so and stop.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kGlibcMalloc = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kGlibcMalloc = false;
#else
constexpr bool kGlibcMalloc = true;
#endif
#else
constexpr bool kGlibcMalloc = true;
#endif

struct Obs {
  nexus::Tensor images, tokens, mask;
  nexus::Observation view() const { return {&images, &tokens, &mask, nullptr}; }
};

Obs observation(nexus::Client& c, const nexus::BackboneInfo& bb, std::int64_t n) {
  Obs o{c.alloc(nexus::DType::UInt8, {n, 1, bb.image_size, bb.image_size, 3}), c.alloc(nexus::DType::Int32, {n, bb.max_tokens}),
        c.alloc(nexus::DType::UInt8, {n, bb.max_tokens})};
  for (std::int64_t i = 0; i < n; ++i) nexus::tokenize("reach the red ball", o.tokens, o.mask, i);
  return o;
}

}  // namespace

TEST_CASE("2000 publishes keep memory flat: the last K versions (and pinned ones) are kept", "[integration][model][resources]") {
  TempDir dir;
  std::ofstream(dir.path + "/nexusd.toml") << "[model]\nversions_kept = 8\n";
  Daemon daemon({"--weights", tiny_weights_path(), "--log-level", "warn", "-c", dir.path + "/nexusd.toml"});
  auto c = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "publisher", .timeout = std::chrono::seconds(30)});
  // A large head (hidden 1024: about 4.5 MB a version) makes a leak plain to see.
  const auto bb = c->register_tenant({.head = {.kind = "mlp_chunk", .action_dim = 2, .chunk = 4, .hidden = 1024}});
  for (int i = 0; i < 100; ++i) c->publish();
  const auto rss_100 = rss_kib(daemon.pid());
  std::uint64_t last = 0;
  for (int i = 0; i < 1900; ++i) last = c->publish();
  const auto rss_2000 = rss_kib(daemon.pid());
  INFO("daemon RSS after 100 publishes " << rss_100 << " KiB, after 2000: " << rss_2000 << " KiB");
  CHECK(last == 2000);
  CHECK(rss_2000 <= rss_100 * 1.10);
  auto obs = observation(*c, bb, 2);
  CHECK(c->predict(obs.view(), last - 7).shape == std::vector<std::int64_t>{2, 4, 2});  // kept
  CHECK(code_of([&] { c->predict(obs.view(), last - 8); }) == nexus::ErrorCode::UnknownVersion);  // evicted
  CHECK(code_of([&] { c->predict(obs.view(), 1); }) == nexus::ErrorCode::UnknownVersion);
}

TEST_CASE("a detached tenant's slot is checkpointed and freed after the idle time, and comes back on return",
          "[integration][model][resources]") {
  TempDir dir;
  std::ofstream(dir.path + "/nexusd.toml") << "[model]\nidle_evict_s = 1\n";
  Daemon daemon({"--weights", tiny_weights_path(), "--log-level", "warn", "-c", dir.path + "/nexusd.toml",
                 "--state-dir", dir.path + "/state"});
  nexus::SlotDigest before;
  std::uint64_t version = 0;
  std::vector<float> predicted;
  {
    auto c = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "sleeper"});
    const auto bb = c->register_tenant({.head = {.kind = "mlp_chunk", .action_dim = 2, .chunk = 4}});
    auto obs = observation(*c, bb, 4);
    auto actions = c->alloc(nexus::DType::Float32, {4, 4, 2});
    for (auto& a : actions.as<float>()) a = 0.25f;
    for (int i = 0; i < 5; ++i) c->sft_step(obs.view(), actions);
    version = c->publish();
    predicted = c->predict(obs.view(), version).actions;
    before = c->slot_digest();
  }
  REQUIRE(eventually([&] { return nexus::query_status(daemon.socket()).slots_evicted == 1; }, std::chrono::seconds(15)));
  CHECK(nexus::query_status(daemon.socket()).slots_resident == 0);
  auto c = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "sleeper"});
  const auto after = c->slot_digest();  // restored from its checkpoint by this request
  CHECK(after.parameters == before.parameters);
  CHECK(after.optimizer == before.optimizer);
  CHECK(after.step == 5);
  const auto bb = c->backbone();
  auto obs = observation(*c, bb, 4);
  CHECK(c->predict(obs.view(), version).actions == predicted);  // its published version came back too
  CHECK(nexus::query_status(daemon.socket()).slots_evicted == 0);
}

TEST_CASE("one Unix user's tenants are bounded, with a typed refusal", "[integration][resources]") {
  TempDir dir;
  std::ofstream(dir.path + "/nexusd.toml") << "[daemon]\nmax_tenants_per_uid = 2\n";
  Daemon daemon({"--backbone", "none", "--log-level", "warn", "-c", dir.path + "/nexusd.toml"});
  auto a = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "u1"});
  auto b = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "u2"});
  CHECK(code_of([&] { nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "u3"}); }) ==
        nexus::ErrorCode::QuotaExceeded);
  b.reset();
  REQUIRE(daemon.wait_tenants(1, std::chrono::seconds(5)));
  CHECK_NOTHROW(nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "u3"}));
}

TEST_CASE("a reply larger than the response ring arrives intact through the output arena", "[integration][model][resources]") {
  TempDir dir;
  Daemon daemon({"--weights", tiny_weights_path(), "--log-level", "warn"});
  // 64 samples x chunk 16 x 8 actions x 4 bytes = 32 KiB of actions; the small ring holds 4 KiB.
  const nexus::TenantSpec spec{.head = {.kind = "mlp_chunk", .action_dim = 8, .chunk = 16}, .seed = 3};
  auto big = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "big-ring"});
  const auto bb = big->register_tenant(spec);
  auto small = nexus::Client::attach(
      {.socket_path = daemon.socket(), .tenant = "small-ring", .ring_bytes = 4096, .output_arena_bytes = 1 << 20});
  small->register_tenant(spec);  // the same seed: the same head
  auto o1 = observation(*big, bb, 64);
  auto o2 = observation(*small, bb, 64);
  const auto expected = big->predict(o1.view());
  for (int i = 0; i < 3; ++i) {  // and again: the output arena's blocks are handed back
    const auto got = small->predict(o2.view());
    CHECK(got.shape == std::vector<std::int64_t>{64, 16, 8});
    CHECK(got.actions == expected.actions);
  }
  // One that fits neither: a typed error, and the tenant goes on.
  auto tiny_arena = nexus::Client::attach(
      {.socket_path = daemon.socket(), .tenant = "no-room", .ring_bytes = 4096, .output_arena_bytes = 4096});
  tiny_arena->register_tenant(spec);
  auto o3 = observation(*tiny_arena, bb, 64);
  CHECK(code_of([&] { tiny_arena->predict(o3.view()); }) == nexus::ErrorCode::MessageTooLarge);
  CHECK(tiny_arena->backbone().name == "tiny");
}

// A pass's activations are freed at its end and the next pass needs as much again: nexusd keeps
// that memory in its allocator (daemon/process_settings.cpp) instead of handing it back to the
// system and faulting it in again, page by page, on every pass. With glibc's default thresholds
// a batch-16 predict and SFT step on tiny faulted 480-800 pages in per request, each zeroed by
// the kernel; with them kept, 0.1-12 (oneDNN's JIT kernels, now and then, not the allocator:
// perf). The bound, 50 pages per request, sits between the two.
TEST_CASE("nexusd reuses a pass's memory: repeated predicts and SFT steps fault no pages in", "[integration][model][resources]") {
  if (!kGlibcMalloc) {
    WARN("built with a sanitizer: its allocator is not glibc's");
    return;
  }
  Daemon daemon({"--weights", tiny_weights_path(), "--log-level", "warn"});
  auto c = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "steady", .timeout = std::chrono::seconds(30)});
  const auto bb = c->register_tenant({.head = {.kind = "mlp_chunk", .action_dim = 2, .chunk = 1, .hidden = 64}});
  auto obs = observation(*c, bb, 16);
  auto actions = c->alloc(nexus::DType::Float32, {16, 1, 2});
  for (auto& b : obs.images.raw()) b = 100;
  // Warm-up: the first few dozen SFT steps still grow the training lane's arena to its peak.
  for (int i = 0; i < 60; ++i) c->predict(obs.view()), c->sft_step(obs.view(), actions);
  constexpr int kRequests = 100;
  const auto before = minor_faults(daemon.pid());
  for (int i = 0; i < kRequests; ++i) c->predict(obs.view()), c->sft_step(obs.view(), actions);
  const auto faults = minor_faults(daemon.pid()) - before;
  INFO("nexusd's minor page faults over " << 2 * kRequests << " requests: " << faults);
  CHECK(faults < 50 * 2 * kRequests);
}

// Measured on tiny: 805 MB after the burst below, 517 MB five seconds later (without the trim,
// 805 MB for good): a drop of 64 MiB at least is asked.
constexpr std::size_t kTrimmedKib = 64 * 1024;
// The other side: once the lanes have been idle for 5 s, nexusd hands what its passes kept back
// to the system (Replica::serve's housekeeping, malloc_trim), so an idle daemon does not hold its
// busiest moment's pages. Batch-128 SFT steps on tiny keep tens of megabytes in the arenas.
TEST_CASE("an idle nexusd gives back the memory its passes kept", "[integration][model][resources]") {
  if (!kGlibcMalloc) {
    WARN("built with a sanitizer: its allocator is not glibc's");
    return;
  }
  Daemon daemon({"--weights", tiny_weights_path(), "--log-level", "warn"});
  auto c = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "burst", .timeout = std::chrono::seconds(30)});
  const auto bb = c->register_tenant({.head = {.kind = "mlp_chunk", .action_dim = 2, .chunk = 1, .hidden = 64}});
  auto obs = observation(*c, bb, 128);
  auto actions = c->alloc(nexus::DType::Float32, {128, 1, 2});
  for (int i = 0; i < 10; ++i) c->predict(obs.view()), c->sft_step(obs.view(), actions);
  const auto busy = rss_kib(daemon.pid());
  std::size_t idle = busy;
  for (int waited = 0; waited < 20 && idle + kTrimmedKib > busy; ++waited) {  // 5 s of quiet, then a trim within 1 s
    std::this_thread::sleep_for(std::chrono::seconds(1));
    idle = rss_kib(daemon.pid());
  }
  INFO("daemon RSS after the burst " << busy << " KiB, idle " << idle << " KiB");
  CHECK(idle + kTrimmedKib <= busy);
  c->sft_step(obs.view(), actions);  // and it still serves
}
