#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/ipc/segment.hpp"

TEST_CASE("a tenant cannot resize its segment under the daemon's mapping", "[segment][hostile]") {
  auto layout = nexus::schema::SegmentLayout::compute(4096, 8192, 4096);
  REQUIRE(layout);
  std::string error;
  auto seg = nexus::daemon::TenantSegment::create(*layout, 1, &error);
  REQUIRE(seg);
  const int fd = ::dup(seg->fd());  // what the tenant receives
  CHECK(::ftruncate(fd, 0) != 0);   // shrinking would SIGBUS the daemon: sealed
  CHECK(::ftruncate(fd, layout->total_bytes * 2) != 0);
  CHECK(::fcntl(fd, F_ADD_SEALS, 0) != 0);  // and the seals themselves are sealed
  CHECK((::fcntl(fd, F_GET_SEALS) & (F_SEAL_SHRINK | F_SEAL_GROW)) == (F_SEAL_SHRINK | F_SEAL_GROW));
  ::close(fd);
}
