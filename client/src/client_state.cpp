#include "client_state.hpp"

#include <sys/socket.h>

#include <cerrno>
#include <thread>

#include "schema/doorbell.hpp"
#include "schema/protocol.hpp"

namespace nexus::detail {
namespace {

using Clock = std::chrono::steady_clock;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Blocking waits are cut into slices so that a wake-up consumed by another thread, or a daemon
// that dies between checks, costs at most one slice.
constexpr auto kBlockSlice = std::chrono::milliseconds(20);

}  // namespace

ClientState::ClientState(const ClientOptions& opts, std::unique_ptr<Attachment> att)
    : options(opts),
      attachment(std::move(att)),
      arena(std::make_shared<ArenaAllocator>(attachment->client_arena(),
                                             attachment->layout.client_arena_bytes)),
      requests_(attachment->request_ring(), attachment->layout.ring_capacity),
      responses_(attachment->response_ring(), attachment->layout.ring_capacity) {}

bool ClientState::daemon_gone() {
  if (gone_.load(std::memory_order_relaxed)) return true;
  char c;
  const ssize_t n = ::recv(attachment->socket, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
    gone_.store(true, std::memory_order_relaxed);
  return gone_.load(std::memory_order_relaxed);
}

std::uint64_t ClientState::submit(wire::Body type, const BodyBuilder& build) {
  std::lock_guard lock(send_mu_);
  if (daemon_gone()) throw Error(ErrorCode::DaemonGone, "nexusd closed the connection");
  release_output_blocks();
  const std::uint64_t id = next_id_.fetch_add(1, std::memory_order_relaxed);
  fbb_.Clear();
  const auto body = build(fbb_);
  fbb_.Finish(wire::CreateMessage(fbb_, schema::kProtocolVersion, id, type, body));
  const std::span<const std::uint8_t> bytes(fbb_.GetBufferPointer(), fbb_.GetSize());
  {
    std::lock_guard p(pending_mu_);  // registered first: the reply may beat us back
    pending_.emplace(id, Slot{});
  }
  const auto deadline = Clock::now() + options.timeout;
  for (;;) {
    const auto status = requests_.try_push(bytes);
    if (status == schema::PushStatus::Ok) break;
    if (status == schema::PushStatus::TooLarge) {
      forget(id);
      throw Error(ErrorCode::MessageTooLarge,
                  "request of " + std::to_string(bytes.size()) + " bytes exceeds the ring's " +
                      std::to_string(requests_.max_message()));
    }
    if (status == schema::PushStatus::PeerCorrupt) {
      forget(id);
      throw Error(ErrorCode::RingCorrupt, "request ring head index is impossible");
    }
    if (!options.block_when_full) {
      forget(id);
      throw Error(ErrorCode::WouldBlock, "request ring full");
    }
    if (daemon_gone()) {
      forget(id);
      throw Error(ErrorCode::DaemonGone, "nexusd closed the connection");
    }
    if (Clock::now() >= deadline) {
      forget(id);
      throw Error(ErrorCode::Timeout, "request ring stayed full");
    }
    // The daemon may be waiting for us to drain replies before it takes more requests.
    if (std::unique_lock r(recv_mu_, std::try_to_lock); r && drain_responses()) continue;
    requests_.set_producer_sleeping(true);
    if (!requests_.has_space_for(bytes.size()))
      schema::wait_doorbell(attachment->client_doorbell, attachment->socket, std::chrono::milliseconds(1));
    requests_.set_producer_sleeping(false);
  }
  if (requests_.consumer_sleeping()) schema::ring_doorbell(attachment->daemon_doorbell);
  return id;
}

// Hands back the output-arena blocks of large replies already copied out (send_mu_ held). Best
// effort: if the ring is full now, they go with a later request.
void ClientState::release_output_blocks() {
  std::vector<std::uint64_t> offsets;
  {
    std::lock_guard p(pending_mu_);
    offsets.swap(to_release_);
  }
  if (offsets.empty()) return;
  fbb_.Clear();
  fbb_.Finish(wire::CreateMessage(fbb_, schema::kProtocolVersion, 0, wire::Body::OutputRelease,
                                  wire::CreateOutputRelease(fbb_, fbb_.CreateVector(offsets)).Union()));
  if (requests_.try_push({fbb_.GetBufferPointer(), fbb_.GetSize()}) != schema::PushStatus::Ok) {
    std::lock_guard p(pending_mu_);
    to_release_.insert(to_release_.end(), offsets.begin(), offsets.end());
  }
}

bool ClientState::drain_responses() {
  bool any = false;
  for (;;) {
    const auto status = responses_.try_pop(scratch_, attachment->layout.ring_capacity);
    if (status == schema::PopStatus::Empty) break;
    if (status != schema::PopStatus::Ok) continue;  // a broken daemon ring: resynchronised
    flatbuffers::Verifier verifier(scratch_.data(), scratch_.size());
    if (!wire::VerifyMessageBuffer(verifier)) continue;
    const auto* msg = wire::GetMessage(scratch_.data());
    const std::uint64_t id = msg->request_id();
    if (msg->body_type() == wire::Body::OutputReply && msg->body()) {
      // A reply too large for the ring: copied out of our output arena (its bounds checked
      // against the layout we computed), verified like any reply, its block handed back later.
      const auto* o = msg->body_as_OutputReply();
      const auto& l = attachment->layout;
      const bool inside = o->bytes() > 0 && o->offset() <= l.output_arena_bytes && o->bytes() <= l.output_arena_bytes - o->offset();
      std::vector<std::uint8_t> full;
      if (inside) {
        const std::uint8_t* at = attachment->base + l.output_arena_offset + o->offset();
        full.assign(at, at + o->bytes());
      }
      std::lock_guard p(pending_mu_);
      if (inside) to_release_.push_back(o->offset());
      flatbuffers::Verifier v(full.data(), full.size());
      if (!inside || !wire::VerifyMessageBuffer(v)) continue;
      auto it = pending_.find(id);
      if (it == pending_.end()) continue;
      it->second.done = true;
      it->second.reply.swap(full);
      any = true;
      continue;
    }
    std::lock_guard p(pending_mu_);
    auto it = pending_.find(id);
    if (it == pending_.end()) continue;  // timed out earlier, or an error about unnamed bytes
    it->second.done = true;
    it->second.reply.swap(scratch_);
    any = true;
  }
  if (any && responses_.producer_sleeping()) schema::ring_doorbell(attachment->daemon_doorbell);
  return any;
}

void ClientState::block_on_doorbell(Clock::time_point deadline) {
  responses_.set_consumer_sleeping(true);
  if (responses_.empty()) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
    const auto slice = std::min<std::chrono::microseconds>(left, kBlockSlice);
    if (slice.count() > 0 &&
        schema::wait_doorbell(attachment->client_doorbell, attachment->socket, slice) ==
            schema::WaitResult::PeerGone)
      gone_.store(true, std::memory_order_relaxed);
  }
  responses_.set_consumer_sleeping(false);
}

bool ClientState::reply_ready(std::uint64_t id) {
  {
    std::unique_lock r(recv_mu_, std::try_to_lock);
    if (r) drain_responses();
  }
  std::lock_guard p(pending_mu_);
  auto it = pending_.find(id);
  return it != pending_.end() && it->second.done;
}

void ClientState::forget(std::uint64_t id) {
  std::lock_guard p(pending_mu_);
  pending_.erase(id);
}

std::vector<std::uint8_t> ClientState::wait_reply(std::uint64_t id, Clock::time_point deadline) {
  const auto spin_until = Clock::now() + options.spin;
  std::uint32_t spins = 0;
  for (;;) {
    {
      std::lock_guard p(pending_mu_);
      auto it = pending_.find(id);
      if (it == pending_.end()) throw Error(ErrorCode::Internal, "reply already taken");
      if (it->second.done) {
        auto reply = std::move(it->second.reply);
        pending_.erase(it);
        return reply;
      }
    }
    std::unique_lock r(recv_mu_, std::try_to_lock);
    if (!r) {  // another thread drives the ring for us
      std::this_thread::yield();
    } else if (drain_responses()) {
      continue;
    } else if (gone_.load(std::memory_order_relaxed) || ((++spins & 1023) == 0 && daemon_gone())) {
      forget(id);
      throw Error(ErrorCode::DaemonGone, "nexusd closed the connection before replying");
    } else if (options.wait == WaitMode::Block ||
               (options.wait == WaitMode::Adaptive && Clock::now() >= spin_until)) {
      block_on_doorbell(deadline);
    } else {
      cpu_relax();
    }
    if (Clock::now() >= deadline) {
      if (r.owns_lock()) drain_responses();
      std::lock_guard p(pending_mu_);
      auto it = pending_.find(id);
      if (it != pending_.end() && it->second.done) continue;
      pending_.erase(id);
      throw Error(ErrorCode::Timeout, "no reply to request " + std::to_string(id) + " within the deadline");
    }
  }
}

}  // namespace nexus::detail
