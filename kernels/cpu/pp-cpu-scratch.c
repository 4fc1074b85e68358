/* ppdiffuse — per-thread scratch buffers of the CPU kernels: each thread
 * keeps one buffer per use, grown when a call needs more and never shrunk,
 * so that once a model has run at its shapes its ops allocate nothing.
 *
 * Which thread needs which buffer is up to the schedule: the team's
 * helpers claim a loop's chunks as they come, and a loop runs serially on
 * its caller while another thread's loop has the team (rank 0 encodes on
 * one thread while it decodes on another).  So a buffer grows to the most
 * any thread has asked of its use (the use's high-water mark), not only to
 * its own call's need, and a helper brings all its buffers up to the marks
 * each time it wakes: once every op has run at its shapes, a thread's next
 * use of a buffer is the last time that buffer grows, whatever the
 * schedule. */
#include "pp-cpu-ops.h"

#include <stdatomic.h>
#include <stdlib.h>

/* Whole cache lines, for the vector loops. */
#define SCRATCH_ALIGN 64

typedef struct
{
  float *buf[PP_CPU_SCRATCH_COUNT];
  size_t floats[PP_CPU_SCRATCH_COUNT];
  guint raises_seen;            /* of the marks, at the last follow */
} Scratch;

static atomic_size_t high_water[PP_CPU_SCRATCH_COUNT];
static atomic_uint raises;      /* how often a mark rose */

static void
scratch_free (gpointer data)
{
  Scratch *s = data;

  for (int i = 0; i < PP_CPU_SCRATCH_COUNT; i++)
    free (s->buf[i]);
  g_free (s);
}

static GPrivate scratch_key = G_PRIVATE_INIT (scratch_free);

static Scratch *
thread_scratch (void)
{
  Scratch *s = g_private_get (&scratch_key);

  if (s == NULL) {
    s = g_new0 (Scratch, 1);
    g_private_set (&scratch_key, s);
  }
  return s;
}

/* Raises @use's mark to @floats if it is lower; returns the mark. */
static size_t
raise_high_water (PpCpuScratch use, size_t floats)
{
  size_t mark = atomic_load (&high_water[use]);

  while (mark < floats)
    if (atomic_compare_exchange_weak (&high_water[use], &mark, floats)) {
      atomic_fetch_add (&raises, 1);
      return floats;
    }
  return mark;
}

static void
grow (Scratch * s, PpCpuScratch use, size_t floats)
{
  void *mem = NULL;

  free (s->buf[use]);
  if (posix_memalign (&mem, SCRATCH_ALIGN, MAX (floats, 1) * sizeof (float)))
    g_error ("out of memory for %zu floats of CPU scratch", floats);
  s->buf[use] = mem;
  s->floats[use] = floats;
}

float *
pp_cpu_scratch (PpCpuScratch use, size_t floats)
{
  Scratch *s = thread_scratch ();
  size_t mark;

  g_assert (use < PP_CPU_SCRATCH_COUNT);
  mark = raise_high_water (use, floats);
  if (s->floats[use] < mark)
    grow (s, use, mark);
  return s->buf[use];
}

void
pp_cpu_scratch_follow (void)
{
  const guint seen = atomic_load (&raises);
  Scratch *s = thread_scratch ();

  if (s->raises_seen == seen)
    return;
  s->raises_seen = seen;
  for (int use = 0; use < PP_CPU_SCRATCH_COUNT; use++) {
    const size_t mark = atomic_load (&high_water[use]);

    if (s->floats[use] < mark)
      grow (s, use, mark);
  }
}
