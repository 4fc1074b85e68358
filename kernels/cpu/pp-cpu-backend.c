/* ppdiffuse — the cpu backend: host memory as device memory, the CPU
 * kernels as its op table. */
#include "pp-backend.h"
#include "pp-cpu-ops.h"
#include "pp-cpu-parallel.h"
#include "pp-error.h"

#include <stdlib.h>
#include <string.h>

PpBackend *pp_cpu_backend_get (void);

/* Buffers start on a cache line: whole vectors for the AVX-512 loops. */
#define CPU_BUFFER_ALIGN 64

static gpointer
cpu_alloc (PpBackend * be, gsize bytes, GError ** error)
{
  gpointer mem = NULL;

  if (posix_memalign (&mem, CPU_BUFFER_ALIGN, bytes) != 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE,
        "out of host memory for %" G_GSIZE_FORMAT " bytes", bytes);
    return NULL;
  }
  return mem;
}

static void
cpu_free (PpBackend * be, gpointer mem)
{
  free (mem);
}

static void
cpu_copy (PpBackend * be, gpointer dst, gconstpointer src, gsize bytes)
{
  memmove (dst, src, bytes);
}

static void
cpu_fill (PpBackend * be, gpointer dst, float value, gsize n)
{
  float *p = dst;

  for (gsize i = 0; i < n; i++)
    p[i] = value;
}

static void
cpu_synchronize (PpBackend * be)
{
}

static const PpBackendMemory cpu_memory = {
  .alloc = cpu_alloc,
  .free = cpu_free,
  .upload = cpu_copy,
  .download = cpu_copy,
  .copy = cpu_copy,
  .fill = cpu_fill,
  .synchronize = cpu_synchronize,
  .upload_weights = NULL,       /* the weights' memory map serves as is */
};

#define CPU_OP(name, NAME, params, args, flops)                             \
  static void                                                               \
  cpu_##name (PpBackend * be, PP_OPS_UNPAREN params)                        \
  {                                                                         \
    pp_cpu_##name args;                                                     \
  }
PP_OPS_LIST (CPU_OP)
#undef CPU_OP

static void
cpu_for_rows (PpBackend * be, int rows, PpRowsFunc func, gpointer data)
{
  pp_cpu_for_rows (rows, PP_CPU_ROW_RANGE_MIN, func, data);
}

static const PpOps cpu_ops = {
#define CPU_ENTRY(name, NAME, params, args, flops) .name = cpu_##name,
  PP_OPS_LIST (CPU_ENTRY)
#undef CPU_ENTRY
  .for_rows = cpu_for_rows,
};

/* What the CPU kernels run on: cores, vector kernels, team size. */
gchar *
pp_cpu_describe (void)
{
  return g_strdup_printf ("CPU, %u cores, %s kernels, %u threads",
      g_get_num_processors (),
      pp_cpu_avx512_kernels () ? "AVX-512" : "portable",
      pp_cpu_parallel_threads ());
}

PpBackend *
pp_cpu_backend_get (void)
{
  static PpBackend cpu = {
    .name = "cpu",
    .default_weight_dtype = PP_DTYPE_F32,
    .memory = &cpu_memory,
    .ops = &cpu_ops,
  };
  static gsize ready;

  if (g_once_init_enter (&ready)) {
    cpu.device = pp_cpu_describe ();
    g_once_init_leave (&ready, 1);
  }
  return &cpu;
}

/* The kernels' op table, for the cpu-strict backend to wrap. */
const PpOps *
pp_cpu_ops (void)
{
  return &cpu_ops;
}
