#include "daemon/sched/turn_sizer.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

namespace nexus::sched {
namespace {
constexpr double kDecay = 0.95;  // a pass's weight halves after about 14 newer ones

double usable(double weight) { return weight > 0 && std::isfinite(weight) ? weight : 1.0; }

}  // namespace

TurnBudget weighted_turn(TurnBudget configured, std::span<const double> turn, std::span<const double> active) {
  if (turn.empty() || active.empty()) return configured;
  double lightest = std::numeric_limits<double>::infinity(), heaviest = 0;
  for (double w : turn) lightest = std::min(lightest, usable(w));
  for (double w : active) heaviest = std::max(heaviest, usable(w));
  const double scale = std::min(1.0, lightest / heaviest);
  if (scale >= 1.0) return configured;
  const auto least = static_cast<std::int64_t>(std::ceil(static_cast<double>(configured.least) * scale));
  const auto floor = (configured.least + 1) / 2;
  return {configured.seconds * scale, std::max<std::int64_t>({1, floor, least})};
}

void TurnSizer::observe(std::int64_t samples, double seconds) {
  if (samples <= 0 || !(seconds >= 0) || !std::isfinite(seconds)) return;
  const double n = static_cast<double>(samples);
  weight_ = kDecay * weight_ + 1;
  n_ = kDecay * n_ + n, t_ = kDecay * t_ + seconds;
  nn_ = kDecay * nn_ + n * n, nt_ = kDecay * nt_ + n * seconds;
}

std::int64_t TurnSizer::samples_within(double budget_s, std::int64_t least) const {
  if (weight_ <= 0) return least;
  const double mean_n = n_ / weight_, mean_t = t_ / weight_;
  const double var_n = nn_ / weight_ - mean_n * mean_n, cov = nt_ / weight_ - mean_n * mean_t;
  double per_sample = mean_t / mean_n, fixed = 0;
  // The fit needs passes of different sizes (a spread of at least a quarter of the mean size)
  // and a cost that grows with size; otherwise the average is the honest estimate.
  if (var_n > 0.0625 * mean_n * mean_n && cov > 0) {
    per_sample = cov / var_n;
    fixed = std::max(0.0, mean_t - per_sample * mean_n);
  }
  if (!(per_sample > 0)) return least;
  const double fits = (budget_s - fixed) / per_sample;
  return std::max<std::int64_t>(least, static_cast<std::int64_t>(std::floor(std::clamp(fits, 0.0, 1e9) + 1e-9)));
}

}  // namespace nexus::sched
