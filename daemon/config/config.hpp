// nexusd configuration: a TOML file (systemd/nexusd.toml documents every key) overridden by
// command-line flags.
#pragma once
#include <chrono>
#include <cstdint>
#include <map>
#include <string>

#include "schema/protocol.hpp"

namespace nexus::daemon {

struct DaemonConfig {
  std::string socket_path = schema::kDefaultSocketPath;
  std::uint32_t socket_mode = 0666;          // access is decided per connection (SO_PEERCRED)
  std::uint32_t max_tenants = 64;
  std::uint64_t max_segment_bytes = 1ull << 30;  // per tenant: rings + both arenas
  std::uint32_t max_pending_connections = 256;   // accepted, not yet attached
  std::chrono::microseconds spin{100};       // reactor busy-polls this long after the last work
  std::string log_level = "info";
  // Model service: "none" runs the transport alone.
  std::string backbone = "tiny";
  std::string weights;                          // safetensors of the backbone; empty: seeded init
  std::string state_dir = "/var/lib/nexus";     // checkpoints
  std::uint32_t batch_samples = 64;             // B: a group flushes at this many samples
  std::chrono::microseconds batch_wait{2000};   // T: ... or when its oldest request waited this long
  bool deterministic = false;                   // bitwise results whatever the group (no grouping)
  // External environments: name -> the Unix socket its simulator process listens on. Tenants
  // open its tasks as "<name>:<task>".
  std::map<std::string, std::string> external_envs;
};

// Loads `path` over the defaults; throws std::runtime_error with the file and key on bad input.
DaemonConfig load_config_file(const std::string& path, DaemonConfig base = {});

}  // namespace nexus::daemon
