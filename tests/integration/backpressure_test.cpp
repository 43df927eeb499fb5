#include <catch2/catch.hpp>

#include <signal.h>

#include "nexus/client.hpp"
#include "processes.hpp"

using namespace nexus::test;

namespace {

nexus::ClientOptions small_ring(const std::string& socket, const char* name, bool block) {
  nexus::ClientOptions o;
  o.socket_path = socket;
  o.tenant = name;
  o.ring_bytes = 4096;  // ~50 pings fit
  o.client_arena_bytes = 1 << 16;
  o.block_when_full = block;
  o.timeout = std::chrono::milliseconds(5000);
  return o;
}

}  // namespace

TEST_CASE("a full request ring blocks or says WouldBlock, by option, never overwrites", "[integration]") {
  Daemon daemon;
  std::vector<std::uint8_t> payload(32, 9);
  SECTION("WouldBlock while the daemon cannot drain") {
    auto c = nexus::Client::attach(small_ring(daemon.socket(), "nonblocking", false));
    ::kill(daemon.pid(), SIGSTOP);  // nobody drains the ring now
    std::vector<nexus::Future<std::vector<std::uint8_t>>> sent;
    bool would_block = false;
    try {
      for (int i = 0; i < 1000; ++i) sent.push_back(c->ping_async(payload));
    } catch (const nexus::Error& e) {
      would_block = e.code() == nexus::ErrorCode::WouldBlock;
    }
    ::kill(daemon.pid(), SIGCONT);
    CHECK(would_block);
    CHECK(sent.size() > 10);
    CHECK(sent.size() < 1000);
    for (auto& f : sent) CHECK(f.get() == payload);  // everything that was accepted arrives intact
  }
  SECTION("blocking submitters wait, and drain replies while they wait") {
    auto c = nexus::Client::attach(small_ring(daemon.socket(), "blocking", true));
    std::vector<nexus::Future<std::vector<std::uint8_t>>> sent;
    for (int i = 0; i < 2000; ++i) {  // far more than either ring holds, nothing read meanwhile
      payload[0] = static_cast<std::uint8_t>(i);
      sent.push_back(c->ping_async(payload));
    }
    for (int i = 0; i < 2000; ++i) {
      payload[0] = static_cast<std::uint8_t>(i);
      CHECK(sent[i].get() == payload);
    }
  }
}

TEST_CASE("a stalled daemon gives Timeout within the deadline, then service resumes", "[integration]") {
  Daemon daemon;
  // The default deadline for the calls around the stall (a loaded machine may take a while);
  // the stalled call alone gets 300 ms.
  auto c = nexus::Client::attach({.socket_path = daemon.socket(), .tenant = "patient"});
  std::vector<std::uint8_t> p = {1};
  REQUIRE(c->ping(p) == p);
  ::kill(daemon.pid(), SIGSTOP);
  const auto t0 = std::chrono::steady_clock::now();
  try {
    c->ping_async(p).get(std::chrono::milliseconds(300));
    FAIL("a stopped daemon replied");
  } catch (const nexus::Error& e) {
    CHECK(e.code() == nexus::ErrorCode::Timeout);
  }
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::milliseconds(1500));
  ::kill(daemon.pid(), SIGCONT);
  CHECK(c->ping(p) == p);
}
