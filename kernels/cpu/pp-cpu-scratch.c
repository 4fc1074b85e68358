/* ppdiffuse — per-thread scratch buffers of the CPU kernels: each thread
 * keeps one buffer per use, grown when a call needs more and never shrunk,
 * so that once a model has run at its shapes its ops allocate nothing. */
#include "pp-cpu-ops.h"

#include <stdlib.h>

/* Whole cache lines, for the vector loops. */
#define SCRATCH_ALIGN 64

typedef struct
{
  float *buf[PP_CPU_SCRATCH_COUNT];
  size_t floats[PP_CPU_SCRATCH_COUNT];
} Scratch;

static void
scratch_free (gpointer data)
{
  Scratch *s = data;

  for (int i = 0; i < PP_CPU_SCRATCH_COUNT; i++)
    free (s->buf[i]);
  g_free (s);
}

static GPrivate scratch_key = G_PRIVATE_INIT (scratch_free);

float *
pp_cpu_scratch (PpCpuScratch use, size_t floats)
{
  Scratch *s = g_private_get (&scratch_key);
  void *mem = NULL;

  g_assert (use < PP_CPU_SCRATCH_COUNT);
  if (s == NULL) {
    s = g_new0 (Scratch, 1);
    g_private_set (&scratch_key, s);
  }
  if (s->floats[use] >= floats)
    return s->buf[use];
  free (s->buf[use]);
  if (posix_memalign (&mem, SCRATCH_ALIGN, MAX (floats, 1) * sizeof (float)))
    g_error ("out of memory for %zu floats of CPU scratch", floats);
  s->buf[use] = mem;
  s->floats[use] = floats;
  return mem;
}
