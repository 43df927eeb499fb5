#include "daemon/sched/inference_pace.hpp"

#include <chrono>

namespace nexus::sched {

namespace {
// A gap longer than this is a pause (an RL update, the program doing other work), not its pace.
constexpr auto kPause = std::chrono::seconds(1);
// The smoothing: a new gap moves the estimate by this share (a few acts to follow a change).
constexpr double kNewGapShare = 0.3;
}  // namespace

void InferencePace::requested(std::uint64_t tenant, Clock::time_point now) {
  auto& p = pace_[tenant];
  if (p.answered && now - p.last_reply < kPause) {
    const double gap = std::chrono::duration<double>(now - p.last_reply).count();
    p.gap_s = p.gap_s < 0 ? gap : (1 - kNewGapShare) * p.gap_s + kNewGapShare * gap;
  }
  p.last_request = now;
  p.answered = false;
}

void InferencePace::answered(std::uint64_t tenant, Clock::time_point now) {
  const auto it = pace_.find(tenant);
  if (it == pace_.end()) return;
  it->second.last_reply = now;
  it->second.answered = true;
}

void InferencePace::forget(std::uint64_t tenant) { pace_.erase(tenant); }

std::map<std::uint64_t, Clock::time_point> InferencePace::expected(Clock::time_point now, Clock::duration recent) const {
  std::map<std::uint64_t, Clock::time_point> out;
  for (const auto& [tenant, p] : pace_) {
    if (now - p.last_request >= recent) continue;
    if (!p.answered) out[tenant] = p.last_request;
    else
      out[tenant] = p.last_reply + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(p.gap_s < 0 ? 0.0 : p.gap_s));
  }
  return out;
}

double InferencePace::gap_s(std::uint64_t tenant) const {
  const auto it = pace_.find(tenant);
  return it == pace_.end() ? -1 : it->second.gap_s;
}

}  // namespace nexus::sched
