// The daemon's metrics in the Prometheus text exposition format (version 0.0.4), as
// `nexusctl metrics` prints them and `[metrics] textfile` writes them for node_exporter's
// textfile collector (written whole to a temporary file, then renamed: a scrape never sees half).
#pragma once
#include <cstdint>
#include <string>

#include "daemon/master/service_status.hpp"

namespace nexus::metrics {

struct DaemonFacts {  // what the reactor knows
  double uptime_s = 0;
  std::uint64_t tenants_attached = 0;
  std::uint64_t message_bytes_copied = 0;
};

// services may be null (nexusd without a model service).
std::string render_prometheus(const DaemonFacts& facts, const daemon::ServiceStatus* services);

// Writes `text` to `path` atomically (same directory, rename); false on failure.
bool write_textfile(const std::string& path, const std::string& text);

}  // namespace nexus::metrics
