// The daemon's metrics in the Prometheus text exposition format (version 0.0.4), as
// `nexusctl metrics` prints them and `[metrics] textfile` writes them for node_exporter's
// textfile collector (written whole to a temporary file, then renamed: a scrape never sees half).
//
// The textfile lives in a directory of its own (systemd/tmpfiles.d: /var/lib/nexus-metrics,
// 2750, writable under the unit's ProtectSystem=strict through ReadWritePaths). Its temporary
// file has an unpredictable name and is created with O_EXCL|O_NOFOLLOW, so nobody who can
// write that directory can make nexusd write through a planted symlink; the file is made 0640
// whatever the umask (the unit's is 0077), and takes the directory's group when the directory
// is setgid: give the directory node_exporter's group and its collector can read the file.
#pragma once
#include <cstdint>
#include <string>

#include "daemon/metrics/service_status.hpp"

namespace nexus::metrics {

struct DaemonFacts {  // what the reactor knows
  double uptime_s = 0;
  std::uint64_t tenants_attached = 0;
  std::uint64_t message_bytes_copied = 0;
};

// services may be null (nexusd without a model service).
std::string render_prometheus(const DaemonFacts& facts, const daemon::ServiceStatus* services);

// Writes `text` to `path` atomically (same directory, rename); on failure, why ("" on success).
std::string write_textfile(const std::string& path, const std::string& text);

}  // namespace nexus::metrics
