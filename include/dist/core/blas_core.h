// Which of OpenBLAS's kernels run the matrix products. OpenBLAS picks them from a table of CPU
// models as it starts, and a CPU newer than its table gets its oldest x86-64 kernels: Debian
// 12's OpenBLAS 0.3.21 runs Prescott's SSE3 kernels on an Intel Xeon of model 207, where its
// Cooperlake ones multiply 2048x2048 matrices 4x faster and train the MLP 2x faster. A
// strategy therefore switches OpenBLAS to the kernels of the CPU's features when it fell back
// below AVX2 on a CPU that has it (docs/guide.md, "OpenBLAS's kernels"); a CPU OpenBLAS knows
// keeps its choice, and so does a process started with OPENBLAS_CORETYPE set.
#pragma once

#include <string>

namespace dist {

// The OpenBLAS core (a value of OPENBLAS_CORETYPE) for this CPU's features, as OpenBLAS maps
// the models it knows: "Cooperlake" (AVX-512 F, CD, BW, DQ and VL with bfloat16), "SkylakeX"
// (those without bfloat16), "Zen" (AMD with AVX2 and FMA), "Haswell" (others with AVX2 and FMA);
// nullptr below AVX2.
const char* openblas_core_for_this_cpu();

// The core OpenBLAS runs ("Prescott", "SkylakeX", ...), or "" when the BLAS is not OpenBLAS.
std::string running_openblas_core();

// What choose_openblas_core() found and left: the core OpenBLAS ran and the one it runs now
// (equal when nothing changed; both "" when the BLAS is not OpenBLAS).
struct OpenBlasCoreChoice {
  std::string was;
  std::string now;
};

// Once per process (later calls return the first call's answer): when OPENBLAS_CORETYPE is
// unset, OpenBLAS runs kernels older than AVX2 (its fallback for a CPU it does not know) and
// the CPU has AVX2 or more, switches OpenBLAS to openblas_core_for_this_cpu()'s core and sets
// OPENBLAS_CORETYPE to it, so the processes started from here start on it too. Call it while no
// matrix product runs (at the start of main): results of the same product differ in their last bits
// between cores. Every strategy calls it as it is made; dist-train and the tests' processes at the
// start of main.
OpenBlasCoreChoice choose_openblas_core();

}  // namespace dist
