#include <catch2/catch.hpp>

#include "daemon/master/tenant_registry.hpp"

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
