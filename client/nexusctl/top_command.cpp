// nexusctl top: a live view of nexusd that fits an 80x24 terminal. Rates (share of compute,
// steps and environment steps per second) are differences between two refreshes.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <thread>

#include "nexus/status.hpp"
#include "service_commands.hpp"

namespace nexus::ctl {
namespace {

constexpr int kWidth = 79;          // one column spare: some terminals wrap at the last one
constexpr std::size_t kTenantRows = 10, kJobRows = 5;

std::string bar(double fraction, int width) {
  const int n = static_cast<int>(std::clamp(fraction, 0.0, 1.0) * width + 0.5);
  return std::string(static_cast<std::size_t>(n), '#') + std::string(static_cast<std::size_t>(width - n), '.');
}

std::string duration(double s) {
  char b[32];
  const long t = static_cast<long>(s);
  if (t >= 3600) std::snprintf(b, sizeof b, "%ldh%02ldm", t / 3600, t / 60 % 60);
  else std::snprintf(b, sizeof b, "%ldm%02lds", t / 60, t % 60);
  return b;
}

void line(const char* fmt, auto... args) {
  char b[256];
  std::snprintf(b, sizeof b, fmt, args...);
  std::string s(b);
  if (s.size() > kWidth) s.resize(kWidth);
  std::printf("%s\n", s.c_str());
}

struct Previous {
  double uptime = 0;
  std::map<std::string, TenantUsage> usage;
  double busy[3] = {0, 0, 0};
};

void frame(const DaemonStatus& s, const Previous& prev, double interval_s) {
  const double dt = std::max(1e-3, s.uptime_s - prev.uptime);
  std::printf("\x1b[H\x1b[2J");
  line("nexusd %s  backbone %s  up %s  pid %d  %zu attached", s.daemon_version.c_str(),
       s.backbone.empty() ? "-" : s.backbone.c_str(), duration(s.uptime_s).c_str(), s.pid, s.tenants.size());
  const double busy[3] = {s.training_busy_s, s.inference_busy_s, s.environment_busy_s};
  const char* names[3] = {"train", "infer", "env"};
  std::string services;
  for (int i = 0; i < 3; ++i) {
    const double f = (busy[i] - prev.busy[i]) / dt;
    char b[64];
    std::snprintf(b, sizeof b, "%s %3.0f%% %s  ", names[i], 100 * std::clamp(f, 0.0, 1.0), bar(f, 10).c_str());
    services += b;
  }
  line("busy  %s", services.c_str());
  line("queued: %llu inference, %llu training   passes %llu (%.2f req/pass)   slots %llu+%llu evicted",
       static_cast<unsigned long long>(s.inference_queued), static_cast<unsigned long long>(s.training_queued),
       static_cast<unsigned long long>(s.model_groups),
       s.model_groups ? double(s.model_requests) / double(s.model_groups) : 0.0,
       static_cast<unsigned long long>(s.slots_resident), static_cast<unsigned long long>(s.slots_evicted));
  line("");
  line("%-16s %4s %5s %5s %10s %8s %7s %9s", "TENANT", "ON", "W", "CPU%", "COMPUTE_S", "STEPS/s", "ENV/s", "WAITp99");
  std::vector<TenantUsage> rows = s.usage;
  auto rate = [&](const TenantUsage& u, auto field) {
    auto it = prev.usage.find(u.name);
    const double before = it == prev.usage.end() ? 0 : static_cast<double>(it->second.*field);
    return (static_cast<double>(u.*field) - before) / dt;
  };
  auto cpu = [&](const TenantUsage& u) {
    auto it = prev.usage.find(u.name);
    return (u.compute_s() - (it == prev.usage.end() ? 0 : it->second.compute_s())) / dt;
  };
  std::sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) { return cpu(a) > cpu(b); });
  for (std::size_t i = 0; i < kTenantRows; ++i) {
    if (i >= rows.size()) {
      line("");
      continue;
    }
    const auto& u = rows[i];
    line("%-16.16s %4s %5.2f %5.0f %10.1f %8.1f %7.0f %7.1fms", u.name.c_str(), u.attached ? "yes" : "no", u.weight,
         100 * cpu(u), u.compute_s(), rate(u, &TenantUsage::steps), rate(u, &TenantUsage::env_steps),
         std::max(u.train_wait_p99_us, u.infer_wait_p99_us) / 1000);
  }
  // Rollout engines, and the last decision to start or drain some (in the row that separates).
  int engine_sessions = 0;
  for (const auto& e : s.engines) engine_sessions += e.sessions;
  if (s.engines.empty() && s.rollout_scaling.empty())
    line("");
  else
    line("engines %zu (%d sessions)  %.50s", s.engines.size(), engine_sessions, s.rollout_scaling.c_str());
  line("%5s %-16s %-5s %-10s %15s %8s %8s", "JOB", "TENANT", "KIND", "STATE", "PROGRESS", "LOSS", "SUCCESS");
  std::vector<JobInfo> jobs = s.jobs;
  std::stable_sort(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) {  // running first, newest first
    return (a.state == "running") > (b.state == "running") || ((a.state == "running") == (b.state == "running") && a.id > b.id);
  });
  for (std::size_t i = 0; i < kJobRows; ++i) {
    if (i >= jobs.size()) {
      line("");
      continue;
    }
    const auto& j = jobs[i];
    line("%5llu %-16.16s %-5s %-10s %7lld/%-7lld %8.4f %7.0f%%", static_cast<unsigned long long>(j.id), j.tenant.c_str(),
         j.kind.c_str(), j.state.c_str(), static_cast<long long>(j.done), static_cast<long long>(j.total), j.loss,
         100 * j.success_rate);
  }
  line("%zu tenants with usage, %zu jobs; refreshed every %.1f s (Ctrl-C quits)", s.usage.size(), s.jobs.size(),
       interval_s);
  std::fflush(stdout);
}

}  // namespace

int top_command(const std::string& socket, double interval_s, int iterations) {
  Previous prev;
  for (int i = 0; iterations == 0 || i < iterations; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::duration<double>(interval_s));
    const DaemonStatus s = query_status(socket);
    frame(s, prev, interval_s);
    prev.uptime = s.uptime_s;
    prev.usage.clear();
    for (const auto& u : s.usage) prev.usage[u.name] = u;
    prev.busy[0] = s.training_busy_s, prev.busy[1] = s.inference_busy_s, prev.busy[2] = s.environment_busy_s;
  }
  return 0;
}

}  // namespace nexus::ctl
