/* ppdiffuse — the CPU ops' path counters and CPU feature check. */
#include "pp-cpu-ops.h"

#include <stdatomic.h>

/* Relaxed: the counts order nothing, and an op adds to them once per call
 * or band, never per value. */
static atomic_ullong path_counts[PP_CPU_PATH_COUNT];

void
pp_cpu_path_add (PpCpuPath path, guint64 n)
{
  atomic_fetch_add_explicit (&path_counts[path], n, memory_order_relaxed);
}

guint64
pp_cpu_path_count (PpCpuPath path)
{
  g_return_val_if_fail (path < PP_CPU_PATH_COUNT, 0);

  return atomic_load_explicit (&path_counts[path], memory_order_relaxed);
}

gboolean
pp_cpu_avx512_kernels (void)
{
#ifdef PP_CPU_AVX512_KERNELS
  return __builtin_cpu_supports ("avx512f") && __builtin_cpu_supports ("fma");
#else
  return FALSE;
#endif
}
