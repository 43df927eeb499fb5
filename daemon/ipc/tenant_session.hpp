// One attached tenant as the reactor sees it: its connection, segment, rings and doorbells.
//
// Thread safety: owned by the reactor thread.
// Invariants: (1) `pending` is non-empty only while the response ring is full; while it is,
// no further requests are popped (the tenant's own backpressure, not everyone's); likewise
// while in_flight is at the configured max_in_flight;
// (2) socket EOF destroys the session, which unmaps the segment and closes every fd it holds.
#pragma once
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "daemon/ipc/output_arena.hpp"
#include "daemon/ipc/regions.hpp"
#include "daemon/ipc/segment.hpp"
#include "schema/ring.hpp"

namespace nexus::daemon {

struct TenantSession {
  TenantSession(int socket, ucred peer, std::string name, std::uint64_t session_id,
                std::shared_ptr<TenantSegment> segment, int daemon_doorbell, int client_doorbell);
  ~TenantSession();
  TenantSession(const TenantSession&) = delete;
  TenantSession& operator=(const TenantSession&) = delete;

  const int socket;
  const ucred peer;
  const std::string name;
  const std::uint64_t session_id;
  const std::shared_ptr<TenantSegment> segment;  // shared with in-flight service requests
  // Cleared when the session ends, so that its queued service requests are cancelled.
  const std::shared_ptr<std::atomic<bool>> alive = std::make_shared<std::atomic<bool>>(true);
  const int daemon_doorbell;  // the tenant rings it; our epoll watches it
  const int client_doorbell;  // we ring it when the tenant sleeps on the response ring
  const std::chrono::steady_clock::time_point attached_at = std::chrono::steady_clock::now();

  schema::RingReader requests;
  schema::RingWriter responses;
  std::deque<std::vector<std::uint8_t>> pending;

  // Descriptors the tenant sent over its socket (SCM_RIGHTS) for a DatasetLoadRequest to take
  // (the newest); at most kMaxOfferedFds (more are closed on arrival). Closed with the session.
  static constexpr std::size_t kMaxOfferedFds = 4;
  std::deque<int> offered_fds;

  // Memory the tenant registered (RegisterRegionRequest); shared with its requests in flight.
  std::shared_ptr<RegionTable> regions;

  OutputArena output{segment->layout().output_arena_bytes};  // large replies (OutputReply)

  bool broken = false;  // the tenant corrupted a ring beyond resynchronisation
  std::uint32_t in_flight = 0;  // requests handed to the services, unanswered
  std::uint64_t served = 0;
  std::uint64_t errors = 0;
};

}  // namespace nexus::daemon
