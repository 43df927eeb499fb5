// A hostile tenant writes straight into its segment. Every bad input must come back as a typed
// Error, and the daemon must keep serving a well-behaved tenant throughout.
#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <thread>

#include "attachment.hpp"
#include "nexus/client.hpp"
#include "processes.hpp"
#include "schema/control_frame.hpp"
#include "schema/doorbell.hpp"
#include "schema/ring.hpp"

using namespace nexus;
using namespace nexus::test;

namespace {

// Plays the client side of a segment by hand: its own tail, forged records, raw replies.
struct Hostile {
  explicit Hostile(const std::string& socket, const std::string& name) {
    detail::AttachParams p;
    p.socket_path = socket;
    p.tenant = name;
    p.ring_bytes = 8192;
    p.client_arena_bytes = 1 << 16;
    att = detail::attach_raw(p);
    replies = schema::RingReader(att->response_ring(), att->layout.ring_capacity);
  }
  schema::RingControl& req() { return *static_cast<schema::RingControl*>(att->request_ring()); }
  std::uint8_t* req_data() { return static_cast<std::uint8_t*>(att->request_ring()) + sizeof(schema::RingControl); }
  std::uint64_t cap() const { return att->layout.ring_capacity; }

  void write_at(std::uint64_t index, const void* src, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i)
      req_data()[(index + i) & (cap() - 1)] = static_cast<const std::uint8_t*>(src)[i];
  }
  void publish(std::uint64_t new_tail) {
    tail = new_tail;
    req().tail.store(tail, std::memory_order_release);
    schema::ring_doorbell(att->daemon_doorbell);
  }
  // A record whose length prefix says `claimed` while `body` bytes follow it.
  void push_record(std::uint32_t claimed, std::span<const std::uint8_t> body) {
    write_at(tail, &claimed, 4);
    write_at(tail + 4, body.data(), body.size());
    publish(tail + schema::record_bytes(body.size()));
  }
  void push_message(std::span<const std::uint8_t> msg) {
    push_record(static_cast<std::uint32_t>(msg.size()), msg);
  }
  std::vector<std::uint8_t> next_reply() {
    std::vector<std::uint8_t> out;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (std::chrono::steady_clock::now() < deadline) {
      if (replies.try_pop(out, cap()) == schema::PopStatus::Ok) {
        flatbuffers::Verifier v(out.data(), out.size());
        REQUIRE(wire::VerifyMessageBuffer(v));
        return out;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    FAIL("no reply within 5 s");
    return out;
  }
  std::unique_ptr<detail::Attachment> att;
  schema::RingReader replies;
  std::uint64_t tail = 0;
};

std::vector<std::uint8_t> message(wire::Body type,
                                  const std::function<flatbuffers::Offset<void>(flatbuffers::FlatBufferBuilder&)>& body,
                                  std::uint64_t id, std::uint32_t version = schema::kProtocolVersion) {
  flatbuffers::FlatBufferBuilder fbb;
  auto b = body(fbb);
  fbb.Finish(wire::CreateMessage(fbb, version, id, type, b));
  return {fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize()};
}

std::vector<std::uint8_t> ping_msg(std::uint64_t id, std::uint32_t version = schema::kProtocolVersion) {
  return message(wire::Body::PingRequest, [](auto& fbb) {
    return wire::CreatePingRequest(fbb, fbb.CreateVector(std::vector<std::uint8_t>{1, 2, 3})).Union();
  }, id, version);
}

void expect_error(const std::vector<std::uint8_t>& reply, wire::ErrorCode code, std::uint64_t id) {
  const auto* m = wire::GetMessage(reply.data());
  REQUIRE(m->body_type() == wire::Body::Error);
  INFO("reason: " << m->body_as_Error()->reason()->str());
  CHECK(m->body_as_Error()->code() == code);
  CHECK(m->request_id() == id);
  CHECK(m->body_as_Error()->reason()->size() > 10);
}

void expect_ping_reply(const std::vector<std::uint8_t>& reply, std::uint64_t id) {
  const auto* m = wire::GetMessage(reply.data());
  REQUIRE(m->body_type() == wire::Body::PingReply);
  CHECK(m->request_id() == id);
}

}  // namespace

TEST_CASE("bad input gets typed errors and the daemon keeps serving others", "[integration][hostile]") {
  Daemon daemon;
  auto good = Client::attach({.socket_path = daemon.socket(), .tenant = "good", .timeout = std::chrono::milliseconds(5000)});
  auto good_still_served = [&] {
    std::vector<std::uint8_t> p = {4, 5, 6};
    CHECK(good->ping(p) == p);
  };
  Hostile evil(daemon.socket(), "evil");

  SECTION("garbage bytes in the ring") {
    std::mt19937 rng(11);
    std::vector<std::uint8_t> junk(64);
    for (auto& b : junk) b = static_cast<std::uint8_t>(rng());
    evil.push_message(junk);
    expect_error(evil.next_reply(), wire::ErrorCode::BadMessage, 0);
  }
  SECTION("a length prefix past the ring's end, then recovery") {
    const std::uint8_t few[4] = {};
    evil.push_record(0x7fffffff, few);
    expect_error(evil.next_reply(), wire::ErrorCode::BadLengthPrefix, 0);
    evil.push_message(ping_msg(9));
    expect_ping_reply(evil.next_reply(), 9);
  }
  SECTION("impossible ring indices, then recovery") {
    evil.publish(evil.tail + (1ull << 40));
    expect_error(evil.next_reply(), wire::ErrorCode::RingCorrupt, 0);
    evil.push_message(ping_msg(10));
    expect_ping_reply(evil.next_reply(), 10);
  }
  SECTION("a forged tensor reference outside the arena") {
    const std::uint64_t arena = evil.att->layout.client_arena_bytes;
    evil.push_message(message(wire::Body::DigestRequest, [&](auto& fbb) {
      auto ref = wire::CreateTensorRef(fbb, arena - 8, 64, wire::DType::UInt8,
                                       fbb.CreateVector(std::vector<std::int64_t>{64}));
      return wire::CreateDigestRequest(fbb, ref).Union();
    }, 11));
    expect_error(evil.next_reply(), wire::ErrorCode::TensorOutOfBounds, 11);
  }
  SECTION("a message in another protocol version") {
    evil.push_message(ping_msg(12, schema::kProtocolVersion + 1));
    expect_error(evil.next_reply(), wire::ErrorCode::UnsupportedVersion, 12);
  }
  SECTION("a message of the wrong type") {
    evil.push_message(message(wire::Body::DigestReply, [](auto& fbb) {
      return wire::CreateDigestReply(fbb, 1, 2).Union();
    }, 13));
    expect_error(evil.next_reply(), wire::ErrorCode::WrongMessageType, 13);
  }
  SECTION("a record larger than any message") {
    std::vector<std::uint8_t> big(evil.cap() / 2 + 64, 0);
    evil.push_message(big);
    expect_error(evil.next_reply(), wire::ErrorCode::MessageTooLarge, 0);
  }
  SECTION("a flood that never reads its replies does not stall others") {
    for (int i = 0; i < 2000; ++i) {  // far more than the response ring holds
      const auto m = ping_msg(100 + i);
      const std::uint64_t head = evil.req().head.load();
      if (evil.tail + schema::record_bytes(m.size()) - head > evil.cap()) break;  // request ring full
      evil.push_message(m);
    }
    for (int i = 0; i < 200; ++i) good_still_served();
    // Draining now delivers the held-back replies in order.
    expect_ping_reply(evil.next_reply(), 100);
  }
  SECTION("a corrupted response-ring head detaches only that tenant") {
    auto* resp = static_cast<schema::RingControl*>(evil.att->response_ring());
    resp->head.store(1ull << 45);
    evil.push_message(ping_msg(14));
    char c;
    pollfd p{evil.att->socket, POLLIN, 0};
    REQUIRE(::poll(&p, 1, 5000) == 1);
    CHECK(::recv(evil.att->socket, &c, 1, 0) == 0);  // the daemon closed the connection
  }
  good_still_served();
  CHECK(query_status(daemon.socket()).pid == daemon.pid());
}

TEST_CASE("attach refusals are typed", "[integration][hostile]") {
  Daemon daemon({"--max-segment-mib", "64"});
  detail::AttachParams p;
  p.socket_path = daemon.socket();
  p.tenant = "versioned";
  p.protocol_version = schema::kProtocolVersion + 1;
  try {
    detail::attach_raw(p);
    FAIL("attach with another protocol version succeeded");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::UnsupportedVersion);
    CHECK_THAT(e.what(), Catch::Contains("protocol"));
  }
  p.protocol_version = schema::kProtocolVersion;
  p.client_arena_bytes = 65ull << 20;
  try {
    detail::attach_raw(p);
    FAIL("oversized segment accepted");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::SegmentTooLarge);
  }
  p.client_arena_bytes = 1 << 20;
  p.tenant = "bad/name";
  CHECK_THROWS_AS(detail::attach_raw(p), Error);
  p.tenant = "twice";
  auto first = detail::attach_raw(p);
  try {
    detail::attach_raw(p);
    FAIL("second attach of one name succeeded");
  } catch (const Error& e) {
    CHECK(e.code() == ErrorCode::AlreadyAttached);
  }
}

TEST_CASE("garbage on the control socket gets an error frame, not a crash", "[integration][hostile]") {
  Daemon daemon;
  for (int round = 0; round < 20; ++round) {
    const int fd = detail::connect_control_socket(daemon.socket());
    std::mt19937 rng(round);
    std::vector<std::uint8_t> junk(1 + rng() % 300);
    for (auto& b : junk) b = static_cast<std::uint8_t>(rng());
    REQUIRE(schema::send_frame(fd, junk));
    std::vector<std::uint8_t> frame;
    std::vector<int> fds;
    const auto st = schema::recv_frame(fd, std::chrono::milliseconds(2000), frame, fds);
    REQUIRE(st == schema::RecvStatus::Ok);
    flatbuffers::Verifier v(frame.data(), frame.size());
    REQUIRE(v.VerifyBuffer<wire::ControlMessage>(nullptr));
    CHECK(flatbuffers::GetRoot<wire::ControlMessage>(frame.data())->body_type() == wire::ControlBody::Error);
    ::close(fd);
  }
  CHECK(query_status(daemon.socket()).tenants.empty());
}
