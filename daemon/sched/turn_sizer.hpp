// How many training samples fit in one turn of the Training Queue (docs/design/service.md,
// "Bounded training turns"), isolated from threads and clocks.
//
// A training pass costs a fixed part (launching the backbone's layers, the heads' small ops,
// the optimizer step) plus a part per sample, so seconds per sample measured on small passes
// overstates the cost of large ones: sizing micro-batches from that average makes them smaller
// than the budget allows, and every extra micro-batch pays the fixed part again. The sizer fits
// `seconds = fixed + per_sample * samples` by least squares over recent passes (exponentially
// weighted, so a changed backbone or thread count is followed), and falls back to the plain
// average while the passes seen are all about one size (the fit is then undetermined).
#pragma once
#include <cstdint>

namespace nexus::sched {

class TurnSizer {
 public:
  // A training pass of `samples` samples took `seconds`.
  void observe(std::int64_t samples, double seconds);
  // The most samples a pass may hold to take about `budget_s`, but at least `least` (a smaller
  // pass would be mostly its fixed part), which is also the answer while no pass has been seen.
  std::int64_t samples_within(double budget_s, std::int64_t least) const;
  bool measured() const { return weight_ > 0; }

 private:
  // Exponentially weighted sums: weight, n, t, n², n·t.
  double weight_ = 0, n_ = 0, t_ = 0, nn_ = 0, nt_ = 0;
};

}  // namespace nexus::sched
