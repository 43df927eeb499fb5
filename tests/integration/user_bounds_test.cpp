// Per Unix user bounds (issue: one user cannot grow nexusd's memory or disk without end): tenant
// names, resident slots, checkpoint tags and checkpoint bytes, each refused with QuotaExceeded
// naming its key, and shown against its bound by `nexusctl usage`. At c0d0e58 none existed.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

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
  CHECK(a->slot_digest() == a_digest);
}
