// Client internals: the rings, the pending-reply table and the progress engine that drives them.
//
// Thread safety: submit() is serialized by send_mu; one thread at a time drives the response
// ring (recv_mu) and fulfils every waiter's slot (pending_mu), so replies are never lost when
// several threads wait at once.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include <flatbuffers/flatbuffers.h>

#include "arena_allocator.hpp"
#include "attachment.hpp"
#include "nexus/client.hpp"
#include "schema/ring.hpp"

namespace nexus::detail {

struct ClientState {
  ClientState(const ClientOptions& options, std::unique_ptr<Attachment> attachment);

  // Builds and pushes one request; returns its id. Throws WouldBlock, Timeout, DaemonGone,
  // MessageTooLarge.
  using BodyBuilder = std::function<flatbuffers::Offset<void>(flatbuffers::FlatBufferBuilder&)>;
  std::uint64_t submit(wire::Body type, const BodyBuilder& build);

  // Waits for the reply to `id` (verified Message bytes). Throws Timeout or DaemonGone.
  std::vector<std::uint8_t> wait_reply(std::uint64_t id, std::chrono::steady_clock::time_point deadline);
  bool reply_ready(std::uint64_t id);

  const ClientOptions options;
  const std::unique_ptr<Attachment> attachment;
  const std::shared_ptr<ArenaAllocator> arena;
  // A request that nexusd pairs with the newest descriptor the socket carried (dataset load,
  // region registration) holds this from sending the descriptor to the reply.
  std::mutex descriptor_mu;

 private:
  struct Slot {
    bool done = false;
    std::vector<std::uint8_t> reply;
  };
  bool drain_responses();  // recv_mu held; true if any reply arrived
  void release_output_blocks();  // send_mu held
  bool daemon_gone();      // non-blocking check of the control socket
  void block_on_doorbell(std::chrono::steady_clock::time_point deadline);
  void forget(std::uint64_t id);

  std::mutex send_mu_;
  schema::RingWriter requests_;
  flatbuffers::FlatBufferBuilder fbb_{1024};

  std::mutex recv_mu_;
  schema::RingReader responses_;
  std::vector<std::uint8_t> scratch_;

  std::mutex pending_mu_;
  std::unordered_map<std::uint64_t, Slot> pending_;
  std::vector<std::uint64_t> to_release_;  // GUARDED_BY(pending_mu_): output-arena blocks read, to hand back

  std::atomic<std::uint64_t> next_id_{1};
  std::atomic<bool> gone_{false};
};

// The verified reply's message if it is of the expected type; throws the daemon's typed Error.
const wire::Message* reply_message(const std::vector<std::uint8_t>& bytes, wire::Body expected);

}  // namespace nexus::detail
