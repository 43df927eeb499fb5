// Structured logging: one event name plus key=value fields per line (logfmt), to stderr, or to
// journald (with PRIORITY and SYSLOG_IDENTIFIER) when systemd connected our stderr to the journal.
#pragma once
#include <spdlog/spdlog.h>

#include <string>

namespace nexus::daemon {

void init_logging(const std::string& level);

}  // namespace nexus::daemon

// Usage: NEXUS_LOG(info, "attach", "tenant={} uid={}", name, uid);
#define NEXUS_LOG(level, event, fmt_, ...) \
  ::spdlog::level("event=" event " " fmt_ __VA_OPT__(, ) __VA_ARGS__)
