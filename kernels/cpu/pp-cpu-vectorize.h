/* ppdiffuse — include FIRST in a CPU op file whose float loops must
 * vectorise.
 *
 * gcc's -O2 vectorises only loops it can prove need no scalar remainder
 * (the "very cheap" cost model), and under -ftrapping-math it will not turn
 * the comparisons of pp-ops-math.h into vector selects; these files opt in
 * to both (the ops raise no floating-point traps anyone could keep).
 *
 * The build targets baseline x86-64 (SSE2, 4 floats a vector).
 * PP_CPU_VECTOR_CLONES on a hot loop's function also compiles it for AVX2
 * and AVX-512 and picks one at load time by what the CPU supports (an
 * ifunc): 3-4× for the exp-heavy loops (softmax, SiLU, GELU).  Other
 * compilers and platforms get the plain function (clang vectorises at
 * -O2).  PP_CPU_NO_AVX512 (see pp-cpu-ops.h) drops the AVX-512 clone, so
 * that an AVX-512 machine runs and tests the AVX2 one. */
#pragma once

#include "pp-cpu-tuning.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize ("tree-vectorize", "vect-cost-model=dynamic", \
    "no-trapping-math")
#endif

#if defined(PPDIFFUSE_SANITIZE)
/* Sanitizer builds: an ifunc resolver runs before the sanitizer runtime. */
#define PP_CPU_VECTOR_CLONES
#elif defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) \
    && defined(__linux__) && defined(PP_CPU_NO_AVX512)
#define PP_CPU_VECTOR_CLONES \
  __attribute__ ((target_clones ("default", "avx2")))
#elif defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) \
    && defined(__linux__)
#define PP_CPU_VECTOR_CLONES \
  __attribute__ ((target_clones ("default", "avx2", "avx512f")))
#else
#define PP_CPU_VECTOR_CLONES
#endif
