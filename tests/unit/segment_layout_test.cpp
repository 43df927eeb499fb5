#include <catch2/catch.hpp>

#include "schema/protocol.hpp"
#include "schema/ring.hpp"
#include "schema/segment_layout.hpp"

using namespace nexus::schema;

TEST_CASE("segment layout is page aligned and ordered", "[segment]") {
  auto l = SegmentLayout::compute(65536, 1000, 5000);
  REQUIRE(l);
  CHECK(l->request_ring_offset == kSegmentAlign);
  CHECK(l->response_ring_offset >= l->request_ring_offset + sizeof(RingControl) + 65536);
  CHECK(l->client_arena_offset % kSegmentAlign == 0);
  CHECK(l->output_arena_offset % kSegmentAlign == 0);
  CHECK(l->client_arena_bytes == 4096);
  CHECK(l->output_arena_bytes == 8192);
  CHECK(l->total_bytes == l->output_arena_offset + l->output_arena_bytes);
}

TEST_CASE("segment layout rejects bad ring sizes and overflow", "[segment]") {
  CHECK_FALSE(SegmentLayout::compute(3000, 0, 0));           // not a power of two
  CHECK_FALSE(SegmentLayout::compute(1024, 0, 0));           // below the minimum
  CHECK_FALSE(SegmentLayout::compute(1ull << 40, 0, 0));     // above the maximum
  CHECK_FALSE(SegmentLayout::compute(4096, UINT64_MAX - 10, 0));
  CHECK_FALSE(SegmentLayout::compute(4096, UINT64_MAX / 2, UINT64_MAX / 2));
  CHECK(round_up_pow2(5000) == 8192);
  CHECK(round_up_pow2(4096) == 4096);
}

TEST_CASE("header comparison catches any mismatch", "[segment]") {
  auto l = SegmentLayout::compute(4096, 4096, 0);
  REQUIRE(l);
  SegmentHeader h{kSegmentMagic, kSegmentLayoutVersion, kProtocolVersion, 1, l->total_bytes, 4096, 4096, 0};
  CHECK(l->matches(h));
  h.protocol_version = kProtocolVersion + 1;
  CHECK_FALSE(l->matches(h));
}
