// Deterministic mode's hold on the math library under LibTorch.
#pragma once
#include <string>

namespace nexus::model {

// Pins MKL's code branch for the process (MKL_CBWR, "conditional numerical reproducibility"),
// and returns the branch in force. Why: with MKL_CBWR unset, MKL picks its kernels at run time,
// and on some CPUs two runs of the same operation on the same bytes differ in the last bits
// (seen in CI: a deterministic-mode loss trajectory that was not bitwise the same in two daemons
// on one machine; pytorch/helion#3598 and psi4/psi4#1906 report the same of MKL). "AVX2,STRICT"
// where the CPU has AVX2 and FMA (strict mode: also independent of MKL's thread count), else
// "COMPATIBLE". A value the user set is left alone. MKL reads the variable at its first call, so
// this must run before any tensor math (ModelService calls it before building a backbone).
std::string pin_math_library_branch();

// The branch chosen when MKL_CBWR is unset (exposed for tests).
std::string default_math_library_branch();

}  // namespace nexus::model
