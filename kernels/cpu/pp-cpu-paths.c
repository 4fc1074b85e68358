/* ppdiffuse — the CPU ops' path counters and CPU feature checks. */
#include "pp-cpu-ops.h"

#include <cblas.h>
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

/* OpenBLAS chooses its kernels by the CPU's model number when it loads.
 * A model it does not know (Debian 12's 0.3.21 on a newer Xeon, or a
 * hypervisor's generic "Intel(R) Xeon(R) Processor") gets its x86-64
 * fallback, Prescott: SSE3 kernels, whatever vector units the CPU has.
 * Returns the core type the CPU's features allow ($OPENBLAS_CORETYPE:
 * SkylakeX with AVX-512, Haswell with AVX2 and FMA) when OpenBLAS fell
 * back that way by itself, else NULL.  tests/blas-coretype.py applies the same rule
 * to the tests' environment. */
const gchar *
pp_cpu_blas_better_core (void)
{
#if defined(__x86_64__) || defined(__i386__)
  const char *core = openblas_get_corename ();
  const gchar *asked = g_getenv ("OPENBLAS_CORETYPE");

  /* An operator's own choice stands, Prescott included. */
  if ((asked != NULL && *asked != '\0') || core == NULL || g_ascii_strcasecmp (core, "prescott") != 0)
    return NULL;
  if (__builtin_cpu_supports ("avx512f") && __builtin_cpu_supports ("avx512bw")
      && __builtin_cpu_supports ("avx512dq")
      && __builtin_cpu_supports ("avx512vl")
      && __builtin_cpu_supports ("avx512cd"))
    return "SKYLAKEX";
  if (__builtin_cpu_supports ("avx2") && __builtin_cpu_supports ("fma"))
    return "HASWELL";
#endif
  return NULL;
}

/* Says once, in a process whose first product runs on OpenBLAS's SSE3
 * fallback on a CPU with AVX2 or AVX-512, what to set: OpenBLAS reads its
 * core type only when it loads, so a process cannot change it for
 * itself. */
void
pp_cpu_blas_advise (void)
{
  static gsize said;

  if (g_once_init_enter (&said)) {
    const gchar *better = pp_cpu_blas_better_core ();

    if (better != NULL)
      g_message ("OpenBLAS does not know this CPU and runs its Prescott "
          "(SSE3) kernels, though the CPU has %s: the cpu backend's "
          "products and convolutions run at a fraction of its speed. Start "
          "the application (and with it the workers) with "
          "OPENBLAS_CORETYPE=%s in its environment "
          "(docs/operator/determinism-and-parity.md)",
          g_str_equal (better, "SKYLAKEX") ? "AVX-512" : "AVX2", better);
    g_once_init_leave (&said, 1);
  }
}
