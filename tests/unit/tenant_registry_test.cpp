#include <catch2/catch.hpp>

#include <condition_variable>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "daemon/ipc/tenant_registry.hpp"
#include "daemon/state/batched_writer.hpp"
#include "processes.hpp"
#include "schema/names.hpp"

using nexus::daemon::BatchedWriter;
using nexus::daemon::RegistryLimits;
using nexus::daemon::TenantRegistry;
using nexus::wire::ErrorCode;

TEST_CASE("tenant names are bound to the uid that created them", "[registry]") {
  TenantRegistry r;
  auto a = r.claim("alice", 1000);
  REQUIRE(a.code == ErrorCode::None);
  CHECK(r.claim("alice", 1000).code == ErrorCode::AlreadyAttached);
  CHECK(r.claim("alice", 1001).code == ErrorCode::PermissionDenied);
  r.release("alice");
  CHECK(r.claim("alice", 1001).code == ErrorCode::PermissionDenied);  // still alice's
  auto again = r.claim("alice", 1000);
  REQUIRE(again.code == ErrorCode::None);
  CHECK(again.session_id != a.session_id);
  CHECK(r.claim("", 1).code == ErrorCode::BadMessage);
  CHECK(r.claim("a/b", 1).code == ErrorCode::BadMessage);
  CHECK(r.claim(std::string(65, 'x'), 1).code == ErrorCode::BadMessage);
}

TEST_CASE("names that would be '.', '..' or hidden in a path are refused everywhere they become one",
          "[registry][names]") {
  for (const char* bad : {".", "..", ".hidden", "...", "a/b", "a\\b", "a b", "", "x\n"}) {
    INFO(bad);
    CHECK_FALSE(nexus::schema::valid_name(bad));
    TenantRegistry r;
    CHECK(r.claim(bad, 1000).code == ErrorCode::BadMessage);
  }
  for (const std::string& good : std::vector<std::string>{"a", "alice-reach_2", "v1.2", "A.b.c", std::string(64, 'z')}) {
    INFO(good);
    CHECK(nexus::schema::valid_name(good));
  }
}

TEST_CASE("a Unix user may hold so many names, and nexusd so many in all", "[registry][bounds]") {
  TenantRegistry r({}, RegistryLimits{3, 5});
  for (const char* n : {"a1", "a2", "a3"}) REQUIRE(r.claim(n, 1000).code == ErrorCode::None);
  const auto over = r.claim("a4", 1000);
  CHECK(over.code == ErrorCode::QuotaExceeded);
  CHECK_THAT(over.reason, Catch::Contains("max_names_per_uid"));
  CHECK(r.names_of(1000) == 3);
  r.release("a1");
  CHECK(r.claim("a1", 1000).code == ErrorCode::None);  // a name it holds is no new name
  r.release("a1");
  REQUIRE(r.unbind("a1", 1000).code == ErrorCode::None);  // released: room for another
  CHECK(r.claim("a4", 1000).code == ErrorCode::None);
  for (const char* n : {"b1", "b2"}) REQUIRE(r.claim(n, 1001).code == ErrorCode::None);
  const auto full = r.claim("c1", 1002);
  CHECK(full.code == ErrorCode::QuotaExceeded);
  CHECK_THAT(full.reason, Catch::Contains("max_names"));
}

TEST_CASE("bindings survive a restart: a name the rule no longer admits is dropped, not fatal", "[registry]") {
  nexus::test::TempDir dir;
  const auto file = dir.path + "/tenants.json";
  {
    TenantRegistry r(file);
    REQUIRE(r.claim("alice", 1000).code == ErrorCode::None);
    REQUIRE(r.claim("bob", 1001).code == ErrorCode::None);
    REQUIRE(r.flush());
  }
  {  // an older nexusd admitted '.' and '..'
    std::ifstream in(file);
    auto j = nlohmann::json::parse(in);
    j["bindings"]["."] = 1002;
    j["bindings"][".."] = 1002;
    std::ofstream(file) << j.dump();
  }
  TenantRegistry r(file);
  CHECK(r.owner("alice") == 1000u);
  CHECK(r.owner("bob") == 1001u);
  CHECK_FALSE(r.owner("."));
  CHECK_FALSE(r.owner(".."));
  CHECK(r.claim("alice", 1001).code == ErrorCode::PermissionDenied);
}

TEST_CASE("the bindings writer coalesces a burst into a few writes, off the caller's thread", "[registry][state]") {
  nexus::test::TempDir dir;
  std::mutex mu;
  std::condition_variable cv;
  bool open_gate = false;
  int renders = 0, value = 0;
  BatchedWriter w(dir.path + "/f", [&] {
    std::unique_lock lk(mu);
    ++renders;
    cv.wait(lk, [&] { return open_gate; });  // the disk is slow: the first write holds the writer
    return std::to_string(value);
  });
  w.changed();
  // 100 changes while the first write is stuck: the caller never waits for it.
  for (int i = 1; i <= 100; ++i) {
    {
      std::lock_guard lk(mu);
      value = i;
    }
    w.changed();
  }
  {
    std::lock_guard lk(mu);
    open_gate = true;
  }
  cv.notify_all();
  REQUIRE(w.flush());
  CHECK(w.writes() <= 2);
  CHECK(nexus::test::read_file(dir.path + "/f") == "100");
}
