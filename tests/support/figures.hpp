// Learning checks measured across seeds. A learning test's outcome varies with its seeds and
// with the machine (another CPU rounds float sums differently, and training amplifies it), so
// each threshold is set against a measured distribution, not one lucky run:
//   NEXUS_TEST_SEED=k      selects the k-th seed variant of every learning test (default 0, what
//                          CI runs); each test derives all its seeds from it.
//   NEXUS_TEST_FIGURES=F   appends every checked figure to F as one JSON line with its bound.
// scripts/learning-margins.sh runs the [learning] tests for k = 0..N-1 and summarises F into
// min / median / max per figure against its bound (docs/design/learning-margins.md).
#pragma once
#include <cstdint>
#include <string>

namespace nexus::test {

// The seed variant, 0 unless NEXUS_TEST_SEED says otherwise.
std::uint64_t test_seed();

// Records a checked figure: `value op bound` is the check (op ">=", ">", "<=" or "<"). `trials`
// is the number of independent episodes a rate was measured over (its binomial standard error
// is then part of the summary), 0 for other figures. Returns whether the check holds:
//   CHECK(figure_holds("sft_reach.success_after", after, ">=", 0.6, 50));
bool figure_holds(const std::string& name, double value, const std::string& op, double bound, int trials = 0);

}  // namespace nexus::test
