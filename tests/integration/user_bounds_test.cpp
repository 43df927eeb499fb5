// Per Unix user bounds (issue: one user cannot grow nexusd's memory or disk without end): tenant
// names, resident slots, checkpoint tags and checkpoint bytes, the observations adapter tenants'
// RL jobs keep, each refused with QuotaExceeded naming its key, and shown against its bound by
// `nexusctl usage`. At c0d0e58 none existed.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "nexus/client.hpp"
#include "nexus/status.hpp"
#include "processes.hpp"
#include "tenant_run.hpp"

using namespace nexus::test;

namespace {

std::string refusal(const std::function<void()>& f, nexus::ErrorCode* code = nullptr) {
  try {
    f();
  } catch (const nexus::Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  return "";
}

const nexus::TenantSpec kSpec{.head = {.kind = "mlp_chunk", .state_dim = 0, .action_dim = 2, .chunk = 1, .hidden = 512}};

}  // namespace

TEST_CASE("one Unix user's names, slots and checkpoints are bounded, and nexusctl usage shows each bound",
          "[integration][model][bounds]") {
  TempDir dir;
  std::ofstream(dir.path + "/nexusd.toml") << "[daemon]\nmax_names_per_uid = 4\n"
                                              "[model]\nmax_slots_per_uid = 2\nmax_checkpoints_per_uid = 2\n";
  Daemon d({"--config", dir.path + "/nexusd.toml", "--weights", tiny_weights_path(), "--log-level", "warn"});
  auto a = nexus::Client::attach({.socket_path = d.socket(), .tenant = "a"});
  auto b = nexus::Client::attach({.socket_path = d.socket(), .tenant = "b"});
  auto c = nexus::Client::attach({.socket_path = d.socket(), .tenant = "c"});
  a->register_tenant(kSpec);
  b->register_tenant(kSpec);
  nexus::ErrorCode code{};
  CHECK_THAT(refusal([&] { c->register_tenant(kSpec); }, &code), Catch::Contains("max_slots_per_uid"));
  CHECK(code == nexus::ErrorCode::QuotaExceeded);
  a->save("one");
  a->save("two");
  CHECK_THAT(refusal([&] { a->save("three"); }, &code), Catch::Contains("max_checkpoints_per_uid"));
  CHECK(code == nexus::ErrorCode::QuotaExceeded);
  CHECK(refusal([&] { a->save("one"); }).empty());  // overwriting a tag is no new checkpoint
  CHECK(refusal([&] { a->save(".."); }, &code).size() > 0);
  CHECK(code == nexus::ErrorCode::BadMessage);
  auto d4 = nexus::Client::attach({.socket_path = d.socket(), .tenant = "d"});
  CHECK_THAT(refusal([&] { nexus::Client::attach({.socket_path = d.socket(), .tenant = "e"}); }, &code),
             Catch::Contains("max_names_per_uid"));
  CHECK(code == nexus::ErrorCode::QuotaExceeded);

  const auto [rc, usage] = run_json({nexusctl_path(), "-s", d.socket(), "usage", "--json"}, dir, "usage");
  REQUIRE(rc == 0);
  INFO(usage.dump());
  const auto me = std::find_if(usage["users"].begin(), usage["users"].end(),
                               [](const auto& u) { return u["uid"] == ::getuid(); });
  REQUIRE(me != usage["users"].end());
  CHECK((*me)["names"] == 4);
  CHECK((*me)["names_max"] == 4);
  CHECK((*me)["slots"] == 2);
  CHECK((*me)["slots_max"] == 2);
  CHECK((*me)["checkpoints"] == 2);
  CHECK((*me)["checkpoints_max"] == 2);
  CHECK((*me)["checkpoint_bytes"].get<std::uint64_t>() > 0);
}

TEST_CASE("a Unix user's checkpoints stay within their bytes, and the bound survives a restart",
          "[integration][model][bounds]") {
  TempDir dir;
  std::ofstream(dir.path + "/nexusd.toml") << "[model]\ncheckpoint_mib_per_uid = 8\n";
  const std::vector<std::string> args = {"--config", dir.path + "/nexusd.toml", "--weights", tiny_weights_path(),
                                         "--log-level", "warn", "--state-dir", dir.path + "/state"};
  std::string reason;
  int saved = 0;
  {
    Daemon d(args);
    auto a = nexus::Client::attach({.socket_path = d.socket(), .tenant = "a"});
    a->register_tenant(kSpec);
    for (; saved < 64 && reason.empty(); ++saved) reason = refusal([&] { a->save("tag" + std::to_string(saved)); });
    REQUIRE(d.stop() == 0);
  }
  CHECK_THAT(reason, Catch::Contains("checkpoint_mib_per_uid"));
  CHECK(saved > 1);
  std::uintmax_t bytes = 0;
  for (const auto& f : std::filesystem::recursive_directory_iterator(dir.path + "/state/tenants"))
    if (f.is_regular_file() && f.path().parent_path().filename() == "checkpoints") bytes += f.file_size();
  CHECK(bytes <= 8u << 20);
  // After a restart the checkpoints on disk still count: the next new tag is refused at once.
  Daemon d(args);
  auto a = nexus::Client::attach({.socket_path = d.socket(), .tenant = "a"});
  CHECK_THAT(refusal([&] { a->save("after-restart"); }), Catch::Contains("checkpoint_mib_per_uid"));
}

TEST_CASE("at a Unix user's slot bound its longest-detached slot makes room, and comes back when needed",
          "[integration][model][bounds]") {
  TempDir dir;
  std::ofstream(dir.path + "/nexusd.toml") << "[model]\nmax_slots_per_uid = 2\n";
  Daemon d({"--config", dir.path + "/nexusd.toml", "--weights", tiny_weights_path(), "--log-level", "warn",
            "--state-dir", dir.path + "/state"});
  auto attach = [&](const std::string& name) { return nexus::Client::attach({.socket_path = d.socket(), .tenant = name}); };
  auto a = attach("a");
  a->register_tenant(kSpec);
  const auto a_digest = a->slot_digest();
  a.reset();  // detached: its slot stays resident, but may make room
  REQUIRE(d.wait_tenants(0, std::chrono::seconds(5)));  // nexusd sees the hang-up asynchronously
  auto b = attach("b");
  auto c = attach("c");
  b->register_tenant(kSpec);
  CHECK(refusal([&] { c->register_tenant(kSpec); }).empty());  // a's slot was checkpointed and freed
  // a comes back: b and c hold the bound while attached, so a's slot cannot be resident...
  a = attach("a");
  nexus::ErrorCode code{};
  CHECK_THAT(refusal([&] { a->slot_digest(); }, &code), Catch::Contains("max_slots_per_uid"));
  CHECK(code == nexus::ErrorCode::QuotaExceeded);
  // ... until one of them leaves: then it is restored, as it was.
  b.reset();
  REQUIRE(d.wait_tenants(2, std::chrono::seconds(5)));
  CHECK(a->slot_digest() == a_digest);
}

// An adapter tenant's RL job keeps every step's observation in nexusd's memory (its updates
// re-run the adapted backbone on them). One Unix user's jobs share a bound on those bytes
// ([jobs] rl_observation_mib_per_uid): a start beyond it is QuotaExceeded, nothing started; a
// head-only job keeps none and is not refused; another Unix user's jobs have a bound of their
// own; a job's end gives its bytes back. `nexusctl usage` shows the bytes against the bound.
TEST_CASE("one Unix user's adapter RL jobs share a bound on the observations they keep and another user has its own",
          "[integration][model][bounds][rl]") {
  const auto mallory = ensure_test_user("nexus-test-mallory");
  if (!mallory) FAIL("this test needs root to create users; run the suite as root");
  TempDir dir;
  std::ofstream(dir.path + "/nexusd.toml") << "[jobs]\nrl_observation_mib_per_uid = 2\n";
  Daemon d({"--config", dir.path + "/nexusd.toml", "--weights", tiny_weights_path(), "--log-level", "warn"});
  auto attach = [&](const std::string& name) {
    return nexus::Client::attach({.socket_path = d.socket(), .tenant = name, .timeout = std::chrono::seconds(120)});
  };
  nexus::TenantSpec spec{.head = {.kind = "gaussian", .state_dim = 4, .action_dim = 2, .chunk = 1, .hidden = 64}, .seed = 3};
  spec.head.adapter.rank = 4;
  auto a = attach("a"), b = attach("b"), h = attach("h");
  const auto bb = a->register_tenant(spec);
  b->register_tenant(spec);
  auto head_only = spec;
  head_only.head.adapter.rank = 0;
  h->register_tenant(head_only);
  // Sessions such that one job's records (4 in flight: collected, 2 queued, updated on) keep
  // between 1 and 2 MiB: one fits the user's 2 MiB, two do not.
  const std::uint64_t per_step = std::uint64_t(bb.image_size) * bb.image_size * 3 + std::uint64_t(bb.max_tokens) * 5;
  const int sessions = static_cast<int>((std::uint64_t(5) << 18) / (8 * 4 * per_step)) + 1;
  const std::uint64_t held = std::uint64_t(sessions) * 8 * per_step * 4;
  REQUIRE(held > (1u << 20));
  REQUIRE(held <= (2u << 20));
  const nexus::RlOptions job{.sessions = sessions, .horizon = 8, .iterations = 100000};

  auto my_usage = [&](const std::string& tag) {
    const auto [rc, usage] = run_json({nexusctl_path(), "-s", d.socket(), "usage", "--json"}, dir, tag);
    REQUIRE(rc == 0);
    for (const auto& u : usage["users"])
      if (u["uid"] == ::getuid()) return u;
    return nlohmann::json{{"rl_observation_bytes", 0}};
  };
  a->rl_start(job);
  CHECK(a->rl_status().observation_bytes == held);
  const auto during = my_usage("usage-during");
  CHECK(during["rl_observation_bytes"] == held);
  CHECK(during["rl_observation_bytes_max"] == 2u << 20);

  nexus::ErrorCode code{};
  const auto sessions_before = nexus::query_status(d.socket()).env_sessions;
  CHECK_THAT(refusal([&] { b->rl_start(job); }, &code), Catch::Contains("rl_observation_mib_per_uid"));
  CHECK(code == nexus::ErrorCode::QuotaExceeded);
  // The refused start took nothing, left no session open and no job behind.
  CHECK(my_usage("usage-refused")["rl_observation_bytes"] == held);
  CHECK(nexus::query_status(d.socket()).env_sessions == sessions_before);
  CHECK_THAT(refusal([&] { b->rl_status(); }), Catch::Contains("no RL job"));
  // A head-only tenant keeps pooled features only: the same job starts.
  CHECK(refusal([&] { h->rl_start(job); }).empty());
  CHECK(h->rl_status(/*stop=*/true).observation_bytes == 0);

  // Another Unix user, while this one is at its bound: its own adapter job runs to the end.
  const std::string rl = executable_copy(NEXUS_TEST_RL_TENANT, dir);
  const pid_t p = spawn({rl, "-s", d.socket(), "-t", "mallory-rl", "--sessions", std::to_string(sessions), "--horizon",
                         "8", "--iterations", "1", "--synchronous", "--adapter-rank", "4", "--report-every", "0"},
                        {.stdout_path = dir.path + "/mallory.out", .stderr_path = dir.path + "/mallory.err",
                         .uid = mallory->uid, .gid = mallory->gid});
  const int rc = wait_exit(p, std::chrono::seconds(300)).value_or(-1);
  INFO(read_file(dir.path + "/mallory.err"));
  REQUIRE(rc == 0);
  const auto theirs = nlohmann::json::parse(last_line(dir.path + "/mallory.out"));
  CHECK(theirs["state"] == "done");
  CHECK(theirs["observation_bytes"] == held);

  // This user stops a's job and starts b's at once, as the refusal advised: the stopped job's
  // bytes are back before b's start asks (it frees the user's stopped runs first).
  a->rl_status(/*stop=*/true);
  CHECK(refusal([&] { b->rl_start(job); }).empty());
  CHECK(my_usage("usage-after")["rl_observation_bytes"] == held);  // b's alone
  CHECK(b->rl_status(/*stop=*/true).observation_bytes == held);
  for (int i = 0; i < 300 && my_usage("usage-end")["rl_observation_bytes"] != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK(my_usage("usage-end")["rl_observation_bytes"] == 0);  // and b's back once it is reaped
}
