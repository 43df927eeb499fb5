// nexusctl's views of a running nexusd: status, tenants, usage, jobs, cancel, metrics, top.
// Each prints a table for people or, with --json, one JSON object on stdout.
#pragma once
#include <cstdint>
#include <string>

namespace nexus::ctl {

int status_command(const std::string& socket, bool json);
int tenants_command(const std::string& socket, bool json);
// since: "" (since the daemon started), seconds, or a duration like 90s, 15m, 2h, 7d.
int usage_command(const std::string& socket, const std::string& since, bool json);
int jobs_command(const std::string& socket, bool json);
int cancel_command(const std::string& socket, std::uint64_t job, bool json);
int metrics_command(const std::string& socket);
// A live view that fits 80x24, refreshed every `interval_s`; `iterations` 0: until interrupted.
int top_command(const std::string& socket, double interval_s, int iterations);

// "90s", "15m", "2h", "7d" or plain seconds; throws std::invalid_argument.
double parse_duration(const std::string& text);

}  // namespace nexus::ctl
