// eventfd doorbells: how a side that went to sleep on a ring is woken (see ring.hpp, Sleeping).
// Each attached tenant has two: the daemon's (the reactor's epoll watches it) and the client's.
#pragma once
#include <chrono>

namespace nexus::schema {

int make_doorbell();             // non-blocking, close-on-exec eventfd; -1 on failure
void ring_doorbell(int fd);      // never blocks; a saturated counter is already "rung"
void drain_doorbell(int fd);     // resets the counter

enum class WaitResult { Rung, TimedOut, PeerGone };

// Blocks until `doorbell` is rung, `peer_socket` reports hang-up/EOF-readable, or the timeout.
// peer_socket may be -1. EINTR is retried.
WaitResult wait_doorbell(int doorbell, int peer_socket, std::chrono::microseconds timeout);

}  // namespace nexus::schema
