// The raw attachment to nexusd: socket, doorbells and the mapped segment, exactly as the daemon
// handed them over. Client builds on it; tests use it directly to act as a hostile tenant.
// Internal to libnexus (not installed).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "nexus/error.hpp"
#include "nexus/wire/nexus_generated.h"
#include "schema/protocol.hpp"
#include "schema/segment_layout.hpp"

namespace nexus::detail {

struct AttachParams {
  std::string socket_path;
  std::string tenant;
  std::uint32_t ring_bytes = schema::kDefaultRingBytes;
  std::uint64_t client_arena_bytes = 0;
  std::uint64_t output_arena_bytes = 0;
  std::uint32_t protocol_version = schema::kProtocolVersion;  // tests send others
  std::chrono::milliseconds timeout{5000};
};

struct Attachment {
  Attachment() = default;
  ~Attachment();
  Attachment(const Attachment&) = delete;
  Attachment& operator=(const Attachment&) = delete;

  int socket = -1;
  int daemon_doorbell = -1;
  int client_doorbell = -1;
  std::uint8_t* base = nullptr;
  schema::SegmentLayout layout;
  std::uint64_t session_id = 0;

  void* request_ring() const { return base + layout.request_ring_offset; }
  void* response_ring() const { return base + layout.response_ring_offset; }
  std::uint8_t* client_arena() const { return base + layout.client_arena_offset; }
};

// Throws nexus::Error: ConnectFailed, Timeout, DaemonGone, or the daemon's refusal.
std::unique_ptr<Attachment> attach_raw(const AttachParams& params);

// Connected, close-on-exec Unix stream socket; throws ConnectFailed.
int connect_control_socket(const std::string& path);

Error error_from_wire(const wire::Error* e, const char* context);

}  // namespace nexus::detail
