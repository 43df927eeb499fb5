// Daemon status as nexusctl shows it; any local user may ask.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace nexus {

struct TenantStatus {
  std::string name;
  std::uint32_t uid = 0;
  std::int32_t pid = 0;
  std::uint64_t session_id = 0;
  std::uint64_t segment_bytes = 0;
  std::uint64_t requests = 0;
  std::uint64_t errors = 0;
  double attached_s = 0;
};

struct DaemonStatus {
  std::string daemon_version;
  std::uint32_t protocol_version = 0;
  std::int32_t pid = 0;
  double uptime_s = 0;
  std::vector<TenantStatus> tenants;
  std::uint64_t message_bytes_copied = 0;
  std::uint64_t tensor_bytes_copied = 0;
  std::string backbone;
  std::uint64_t model_groups = 0;
  std::uint64_t model_requests = 0;
  std::uint64_t model_samples = 0;
};

// Throws nexus::Error (ConnectFailed, DaemonGone, Timeout, UnsupportedVersion, BadMessage).
DaemonStatus query_status(const std::string& socket_path,
                          std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace nexus
