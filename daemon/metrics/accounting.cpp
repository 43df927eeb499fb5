#include "daemon/metrics/accounting.hpp"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

namespace nexus::metrics {
namespace {

constexpr auto kHistoryStep = std::chrono::seconds(60);
constexpr std::size_t kHistoryPoints = 7 * 24 * 60;  // a week of minutes

TenantUsage minus(const TenantUsage& a, const TenantUsage& b) {
  return {a.train_s - b.train_s, a.infer_s - b.infer_s, a.samples - b.samples, a.steps - b.steps,
          a.predictions - b.predictions, a.env_steps - b.env_steps};
}

}  // namespace

const char* service_name(Service s) {
  switch (s) {
    case Service::Training: return "training";
    case Service::Inference: return "inference";
    case Service::Environment: return "environment";
  }
  return "?";
}

double quantile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  const auto k = static_cast<std::size_t>(std::clamp(std::ceil(p * static_cast<double>(v.size())) - 1.0, 0.0,
                                                     static_cast<double>(v.size() - 1)));
  std::nth_element(v.begin(), v.begin() + static_cast<long>(k), v.end());
  return v[k];
}

Accounting::Accounting() : next_history_(start_ + kHistoryStep) {
  history_.push_back(History{0, {}, {0, 0, 0}});
}

void Accounting::roll_history(Clock::time_point now) {
  while (now >= next_history_) {
    History h{since_start(next_history_), usage_, {busy_s_[0], busy_s_[1], busy_s_[2]}};
    history_.push_back(std::move(h));
    if (history_.size() > kHistoryPoints) history_.pop_front();
    next_history_ += kHistoryStep;
  }
}

void Accounting::charge(const std::string& tenant, Service s, double seconds, std::uint64_t samples,
                        std::uint64_t steps, std::uint64_t predictions) {
  MutexLock lk(mu_);
  roll_history(Clock::now());
  auto& u = usage_[tenant];
  (s == Service::Inference ? u.infer_s : u.train_s) += seconds;
  u.samples += samples;
  u.steps += steps;
  u.predictions += predictions;
}

void Accounting::env_steps(const std::string& tenant, std::uint64_t n) {
  MutexLock lk(mu_);
  usage_[tenant].env_steps += n;
}

void Accounting::queue_wait(const std::string& tenant, Service s, double us) {
  MutexLock lk(mu_);
  auto& w = waits_[static_cast<int>(s)][tenant];
  w.push_back(us);
  if (w.size() > kWaitWindow) w.pop_front();
}

Clock::time_point Accounting::begin(Service s) {
  const auto now = Clock::now();
  MutexLock lk(mu_);
  const int i = static_cast<int>(s);
  if (active_[i]++ == 0) active_since_[i] = now;
  return now;
}

void Accounting::end(Service s, Clock::time_point started, const std::string& tenant) {
  const auto now = Clock::now();
  MutexLock lk(mu_);
  roll_history(now);
  const int i = static_cast<int>(s);
  if (active_[i] > 0 && --active_[i] == 0) busy_s_[i] += std::chrono::duration<double>(now - active_since_[i]).count();
  if (record_timeline_ && timeline_.size() < kMaxIntervals)
    timeline_.push_back({s, tenant, since_start(started), since_start(now)});
}

Snapshot Accounting::snapshot(std::optional<double> seconds_ago) const {
  const auto now = Clock::now();
  MutexLock lk(mu_);
  Snapshot snap;
  snap.wall_s = since_start(now);
  snap.tenants = usage_;
  for (int i = 0; i < kServices; ++i) {
    snap.busy_s[i] = busy_s_[i];
    if (active_[i] > 0) snap.busy_s[i] += std::chrono::duration<double>(now - active_since_[i]).count();
  }
  if (seconds_ago) {
    const double from = snap.wall_s - *seconds_ago;
    // The oldest kept point at or after `from` (the first one if none is that old).
    const History* base = &history_.front();
    for (const auto& h : history_)
      if (h.at_s >= from) {
        base = &h;
        break;
      }
    snap.wall_s -= base->at_s;
    for (auto& [name, u] : snap.tenants) {
      auto it = base->tenants.find(name);
      if (it != base->tenants.end()) u = minus(u, it->second);
    }
    for (int i = 0; i < kServices; ++i) snap.busy_s[i] -= base->busy_s[i];
  }
  // A loop, not a lambda: clang's thread-safety analysis does not know a lambda runs under mu_.
  const std::pair<Service, std::map<std::string, WaitStats>*> kinds[] = {{Service::Training, &snap.train_wait},
                                                                          {Service::Inference, &snap.infer_wait}};
  for (const auto& [s, out] : kinds)
    for (const auto& [name, w] : waits_[static_cast<int>(s)]) {
      std::vector<double> v(w.begin(), w.end());
      double sum = 0;
      for (double x : v) sum += x;
      (*out)[name] = {v.size(), sum, quantile(v, 0.5), quantile(v, 0.99)};
    }
  return snap;
}

std::vector<Interval> Accounting::timeline() const {
  MutexLock lk(mu_);
  return timeline_;
}

void Accounting::record_timeline(bool on) {
  MutexLock lk(mu_);
  record_timeline_ = on;
}

}  // namespace nexus::metrics
