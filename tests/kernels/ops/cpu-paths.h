/* Helpers of the CPU op tests: the backend's path counters, and the paths
 * its thresholds (pp-cpu-tuning.h) say a call takes. */
#pragma once

#include "pp-cpu-ops.h"
#include "pp-cpu-parallel.h"

#include <math.h>

typedef struct
{
  guint64 count[PP_CPU_PATH_COUNT];
} Paths;

static inline Paths
paths_now (void)
{
  Paths p;

  for (int i = 0; i < PP_CPU_PATH_COUNT; i++)
    p.count[i] = pp_cpu_path_count ((PpCpuPath) i);
  return p;
}

static inline guint64
paths_since (const Paths * before, PpCpuPath path)
{
  return pp_cpu_path_count (path) - before->count[path];
}

static inline guint64
ceil_div (guint64 a, guint64 b)
{
  return (a + b - 1) / b;
}

/* Whether pp_cpu_parallel_for runs a loop of @items with chunks of at
 * least @min_chunk on the team. */
static inline gboolean
loop_splits (size_t items, size_t min_chunk)
{
  return pp_cpu_parallel_threads () > 1 && items >= 2 * MAX (min_chunk, 1);
}

/* The path pp_cpu_gemm takes for an m×n×k product (pp-cpu-gemm.c):
 * blocks of rows or columns of C, as many as the FLOPs give grains and the
 * longer side gives aligned blocks, at most PP_CPU_GEMM_BLOCKS, whatever the
 * team size. */
static inline PpCpuPath
expected_gemm_path (int m, int n, int k)
{
  const double flops = 2.0 * m * n * k;
  double blocks = MIN ((double) PP_CPU_GEMM_BLOCKS,
      floor (flops / PP_CPU_GEMM_GRAIN_FLOPS));

  blocks = MIN (blocks, (double) ceil_div (MAX (m, n),
          PP_CPU_GEMM_SPLIT_ALIGN));
  if (blocks < 2)
    return PP_CPU_PATH_GEMM_WHOLE;
  return m >= n ? PP_CPU_PATH_GEMM_SPLIT_ROWS : PP_CPU_PATH_GEMM_SPLIT_COLS;
}

/* Asserts that the one GEMM since @before took the path its shape says. */
static inline void
check_gemm_path (const gchar * what, const Paths * before, int m, int n,
    int k)
{
  static const PpCpuPath paths[] = { PP_CPU_PATH_GEMM_WHOLE,
    PP_CPU_PATH_GEMM_SPLIT_ROWS, PP_CPU_PATH_GEMM_SPLIT_COLS
  };
  const PpCpuPath expected = expected_gemm_path (m, n, k);

  for (guint i = 0; i < G_N_ELEMENTS (paths); i++)
    if (paths_since (before, paths[i]) != (paths[i] == expected))
      g_error ("%s: GEMM path %d taken %" G_GUINT64_FORMAT " times, "
          "expected path %d (%u threads)", what, paths[i],
          paths_since (before, paths[i]), expected,
          pp_cpu_parallel_threads ());
}
