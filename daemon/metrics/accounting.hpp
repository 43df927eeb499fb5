// Accounting: what each tenant used and how busy each service was, for `nexusctl usage/top`,
// the Prometheus exposition, fair share's audit, and nexus-bench workload.
//
// Per tenant: compute-seconds (a group's backbone time shared by sample count, plus the
// tenant's own head and optimizer time, measured), samples, optimizer steps, predictions,
// environment steps, and queue waits (p50/p99 over the last kWaitWindow requests per queue).
// Per service: busy time (the union of its working intervals) over wall time.
//
// Thread safety: every member may be called from any thread (one mutex; calls are short).
#pragma once
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/sync/mutex.hpp"

namespace nexus::metrics {

using Clock = std::chrono::steady_clock;

enum class Service { Training, Inference, Environment };
inline constexpr int kServices = 3;
const char* service_name(Service s);

struct TenantUsage {
  double train_s = 0;          // compute-seconds on the training queue (SFT steps, RL updates)
  double infer_s = 0;          // ... on the inference queue (predict, RL acting)
  std::uint64_t samples = 0;   // samples through the backbone and the head
  std::uint64_t steps = 0;     // optimizer steps
  std::uint64_t predictions = 0;
  std::uint64_t env_steps = 0;
  double compute_s() const { return train_s + infer_s; }
};

struct WaitStats {
  std::uint64_t count = 0;     // requests in the window
  double sum_us = 0;
  double p50_us = 0, p99_us = 0;
};

struct Interval {  // one busy interval of a service, for timelines (nexus-bench workload)
  Service service;
  std::string tenant;          // whose work (the group's leader for shared passes)
  double start_s, end_s;       // since the accounting began
};

struct Snapshot {
  double wall_s = 0;                               // since the accounting began (or `since`)
  std::map<std::string, TenantUsage> tenants;      // usage in that span
  std::map<std::string, WaitStats> train_wait, infer_wait;  // recent window, not spanned
  double busy_s[kServices] = {0, 0, 0};
};

class Accounting {
 public:
  static constexpr std::size_t kWaitWindow = 2048;
  Accounting();

  void charge(const std::string& tenant, Service s, double seconds, std::uint64_t samples, std::uint64_t steps,
              std::uint64_t predictions = 0);
  void env_steps(const std::string& tenant, std::uint64_t n);
  void queue_wait(const std::string& tenant, Service s, double microseconds);
  // A service works on `tenant`'s behalf between begin() and end(started). Overlapping spans of
  // one service count once (the Environment Service steps several tenants at a time): busy time
  // is the union, kept by counting the spans in progress. BusyScope pairs them.
  Clock::time_point begin(Service s);
  void end(Service s, Clock::time_point started, const std::string& tenant);

  // Everything since the start, or the difference since `seconds_ago` (from the minute-by-minute
  // history kept for a week; the oldest kept point if it reaches no further).
  Snapshot snapshot(std::optional<double> seconds_ago = std::nullopt) const;
  // Busy intervals recorded since the start (at most kMaxIntervals; then recording stops).
  static constexpr std::size_t kMaxIntervals = 200000;
  std::vector<Interval> timeline() const;
  void record_timeline(bool on);

 private:
  struct History {
    double at_s;
    std::map<std::string, TenantUsage> tenants;
    double busy_s[kServices];
  };
  void roll_history(Clock::time_point now) NEXUS_REQUIRES(mu_);
  double since_start(Clock::time_point t) const { return std::chrono::duration<double>(t - start_).count(); }

  const Clock::time_point start_ = Clock::now();
  mutable Mutex mu_;
  std::map<std::string, TenantUsage> usage_ NEXUS_GUARDED_BY(mu_);
  std::map<std::string, std::deque<double>> waits_[kServices] NEXUS_GUARDED_BY(mu_);
  double busy_s_[kServices] NEXUS_GUARDED_BY(mu_) = {0, 0, 0};
  int active_[kServices] NEXUS_GUARDED_BY(mu_) = {0, 0, 0};  // spans in progress
  Clock::time_point active_since_[kServices] NEXUS_GUARDED_BY(mu_);
  std::deque<History> history_ NEXUS_GUARDED_BY(mu_);
  Clock::time_point next_history_ NEXUS_GUARDED_BY(mu_);
  bool record_timeline_ NEXUS_GUARDED_BY(mu_) = false;
  std::vector<Interval> timeline_ NEXUS_GUARDED_BY(mu_);
};

class BusyScope {
 public:
  BusyScope(Accounting* a, Service s, std::string tenant)
      : a_(a), s_(s), tenant_(std::move(tenant)), started_(a ? a->begin(s) : Clock::now()) {}
  ~BusyScope() {
    if (a_) a_->end(s_, started_, tenant_);
  }
  BusyScope(const BusyScope&) = delete;
  BusyScope& operator=(const BusyScope&) = delete;
  Clock::time_point started() const { return started_; }

 private:
  Accounting* a_;
  Service s_;
  std::string tenant_;
  Clock::time_point started_;
};

// p-quantile (0..1) of a sample window by nearest rank; 0 when empty.
double quantile(std::vector<double> values, double p);

}  // namespace nexus::metrics
