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
#include <span>

namespace nexus::sched {

// A turn's budget and its least micro-batch, as TurnSizer::samples_within takes them.
struct TurnBudget {
  double seconds = 0;
  std::int64_t least = 1;
};

// The budget of a training turn whose step is split while other tenants train (service.md,
// "Bounded training turns"). A closed-loop tenant with one step in flight is never backlogged,
// so virtual time cannot give it its weight: its share is set by how long the turns it waits
// behind are. So the turn of a tenant lighter than the heaviest active one is cut by the ratio of
// their weights; a heavier tenant's turn stays at the configured budget, never above it (that
// budget is the latency bound every tenant was promised). The least micro-batch is cut too (else
// the floor, not the weight, would set the turn), but never below half the configured one: a
// smaller micro-batch is mostly a pass's fixed part. `turn`: the weights of the tenants in the
// turn (the lightest decides); `active`: every active training tenant's, the turn's own
// included. Weights that are not positive and finite read as 1.
TurnBudget weighted_turn(TurnBudget configured, std::span<const double> turn, std::span<const double> active);

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
