// The group batcher's decision, isolated from queues, threads and clocks (after Triton's
// dynamic batcher): given the pending requests in arrival order, flush a group now, or wait.
//
// A group is the oldest request plus every later request with the same compatibility key, in
// arrival order, up to max_samples (the oldest always goes, even when larger). It is flushed
// when it holds max_samples, when its oldest request has waited max_wait, or at once when every
// active tenant is already in it (nobody else could join, so waiting only adds latency).
// Requests that are not batchable (register, publish) go alone, in order. A tenant's requests
// never overtake each other: once a tenant has a non-batchable request pending, none of its
// later requests joins a group ahead of it.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace nexus::sched {

using Clock = std::chrono::steady_clock;

struct PendingRequest {
  std::uint64_t key = 0;       // compatibility key (geometry, views, token bucket)
  std::uint32_t samples = 0;
  std::uint64_t tenant = 0;
  bool batchable = true;
  Clock::time_point arrival{};
};

struct BatchPolicy {
  std::uint32_t max_samples = 64;               // B
  std::chrono::microseconds max_wait{2000};     // T
};

struct Decision {
  std::vector<std::size_t> take;        // indices into the pending list; empty: wait
  std::chrono::microseconds wait{0};    // how long until the decision may change by itself
};

// Precondition: `pending` is non-empty and in arrival order.
Decision decide(std::span<const PendingRequest> pending, Clock::time_point now, const BatchPolicy& policy,
                std::size_t active_tenants);

}  // namespace nexus::sched
