/* kernels/cuda-emu: the emulated runtime's streams hold their work until
 * the host waits for it (emu-graph.h, "Deferred streams"), as a GPU that
 * is busy does: what the host reads without the wait that orders it, and
 * what a stream reads of another's output without waiting on its event,
 * is what was there before.  So the CUDA backend's waits (a download's
 * event, a staging buffer's reuse, a fence) are checked on the CPU: each
 * case below is a wait left out, and what it costs here. */
#include <cuda_runtime_api.h>

#include <glib.h>
#include <string.h>

#define N 4096

static void
fill (float *p, float v)
{
  for (int i = 0; i < N; i++)
    p[i] = v + (float) i;
}

/* Whether device (here: host) memory @p holds fill (@v). */
static gboolean
holds (const float *p, float v)
{
  for (int i = 0; i < N; i++)
    if (p[i] != v + (float) i)
      return FALSE;
  return TRUE;
}

typedef struct
{
  cudaStream_t a, b;
  float *x, *y;                 /* device */
  float *pinned;                /* cudaHostAlloc */
} Fixture;

static void
fixture_init (Fixture * f)
{
  g_assert_cmpint (cudaStreamCreateWithFlags (&f->a, cudaStreamNonBlocking),
      ==, cudaSuccess);
  g_assert_cmpint (cudaStreamCreateWithFlags (&f->b, cudaStreamNonBlocking),
      ==, cudaSuccess);
  g_assert_cmpint (cudaMalloc ((void **) &f->x, N * sizeof (float)), ==,
      cudaSuccess);
  g_assert_cmpint (cudaMalloc ((void **) &f->y, N * sizeof (float)), ==,
      cudaSuccess);
  g_assert_cmpint (cudaHostAlloc ((void **) &f->pinned, N * sizeof (float),
          cudaHostAllocDefault), ==, cudaSuccess);
  /* x and y start at 0, 1, 2, … */
  fill (f->pinned, 0.0f);
  g_assert_cmpint (cudaMemcpyAsync (f->x, f->pinned, N * sizeof (float),
          cudaMemcpyHostToDevice, f->a), ==, cudaSuccess);
  g_assert_cmpint (cudaMemcpyAsync (f->y, f->pinned, N * sizeof (float),
          cudaMemcpyHostToDevice, f->a), ==, cudaSuccess);
  g_assert_cmpint (cudaStreamSynchronize (f->a), ==, cudaSuccess);
  g_assert_true (holds (f->x, 0.0f) && holds (f->y, 0.0f));
}

/* The pinned buffer stays, as the backend's staging buffers do (the
 * emulation has no cudaFreeHost, which the backend never calls). */
static void
fixture_clear (Fixture * f)
{
  g_assert_cmpint (cudaFree (f->x), ==, cudaSuccess);
  g_assert_cmpint (cudaFree (f->y), ==, cudaSuccess);
}

/* A copy from pinned memory waits in its stream until an event recorded
 * after it is waited for; one recorded before it does not bring it. */
static void
test_event_orders_host (void)
{
  Fixture f;
  cudaEvent_t before, after;

  fixture_init (&f);
  g_assert_cmpint (cudaEventCreateWithFlags (&before,
          cudaEventDisableTiming), ==, cudaSuccess);
  g_assert_cmpint (cudaEventCreateWithFlags (&after,
          cudaEventDisableTiming), ==, cudaSuccess);
  fill (f.pinned, 100.0f);
  g_assert_cmpint (cudaEventRecord (before, f.a), ==, cudaSuccess);
  g_assert_cmpint (cudaMemcpyAsync (f.x, f.pinned, N * sizeof (float),
          cudaMemcpyHostToDevice, f.a), ==, cudaSuccess);
  g_assert_cmpint (cudaEventRecord (after, f.a), ==, cudaSuccess);
  /* Without a wait, the copy has not run. */
  g_assert_true (holds (f.x, 0.0f));
  g_assert_cmpint (cudaEventSynchronize (before), ==, cudaSuccess);
  g_assert_true (holds (f.x, 0.0f));
  g_assert_cmpint (cudaEventSynchronize (after), ==, cudaSuccess);
  g_assert_true (holds (f.x, 100.0f));
  /* A pinned buffer refilled before its copy ran is what the copy takes:
   * the staging buffers' reuse waits on their events for this. */
  fill (f.pinned, 200.0f);
  g_assert_cmpint (cudaMemcpyAsync (f.x, f.pinned, N * sizeof (float),
          cudaMemcpyHostToDevice, f.a), ==, cudaSuccess);
  fill (f.pinned, 300.0f);
  g_assert_cmpint (cudaStreamSynchronize (f.a), ==, cudaSuccess);
  g_assert_true (holds (f.x, 300.0f));
  cudaEventDestroy (before);
  cudaEventDestroy (after);
  fixture_clear (&f);
}

/* Stream b's copy of x reads x as it was, unless b waits on an event
 * recorded on a after the write. */
static void
test_wait_orders_streams (void)
{
  Fixture f;
  cudaEvent_t written;

  fixture_init (&f);
  g_assert_cmpint (cudaEventCreateWithFlags (&written,
          cudaEventDisableTiming), ==, cudaSuccess);
  fill (f.pinned, 10.0f);
  g_assert_cmpint (cudaMemcpyAsync (f.x, f.pinned, N * sizeof (float),
          cudaMemcpyHostToDevice, f.a), ==, cudaSuccess);
  g_assert_cmpint (cudaMemcpyAsync (f.y, f.x, N * sizeof (float),
          cudaMemcpyDeviceToDevice, f.b), ==, cudaSuccess);
  g_assert_cmpint (cudaStreamSynchronize (f.b), ==, cudaSuccess);
  g_assert_true (holds (f.y, 0.0f));
  g_assert_true (holds (f.x, 0.0f));
  g_assert_cmpint (cudaStreamSynchronize (f.a), ==, cudaSuccess);
  g_assert_true (holds (f.x, 10.0f));

  /* Ordered: b waits for a's event; a's work after the event stays. */
  fill (f.pinned, 20.0f);
  g_assert_cmpint (cudaMemcpyAsync (f.x, f.pinned, N * sizeof (float),
          cudaMemcpyHostToDevice, f.a), ==, cudaSuccess);
  g_assert_cmpint (cudaEventRecord (written, f.a), ==, cudaSuccess);
  g_assert_cmpint (cudaStreamWaitEvent (f.b, written, 0), ==, cudaSuccess);
  /* A later record moves no wait already queued. */
  g_assert_cmpint (cudaMemcpyAsync (f.x, f.y, N * sizeof (float),
          cudaMemcpyDeviceToDevice, f.a), ==, cudaSuccess);
  g_assert_cmpint (cudaEventRecord (written, f.a), ==, cudaSuccess);
  g_assert_cmpint (cudaMemcpyAsync (f.y, f.x, N * sizeof (float),
          cudaMemcpyDeviceToDevice, f.b), ==, cudaSuccess);
  g_assert_cmpint (cudaStreamSynchronize (f.b), ==, cudaSuccess);
  g_assert_true (holds (f.y, 20.0f));
  g_assert_cmpint (cudaStreamSynchronize (f.a), ==, cudaSuccess);
  g_assert_true (holds (f.x, 20.0f));
  cudaEventDestroy (written);
  fixture_clear (&f);
}

/* Copies from and to pageable memory are made before the call returns
 * (after the stream's earlier work); a free synchronizes the device. */
static void
test_pageable_and_free (void)
{
  Fixture f;
  float *pageable = g_new (float, N), *spare;

  fixture_init (&f);
  fill (f.pinned, 5.0f);
  g_assert_cmpint (cudaMemcpyAsync (f.x, f.pinned, N * sizeof (float),
          cudaMemcpyHostToDevice, f.a), ==, cudaSuccess);
  g_assert_cmpint (cudaMemcpyAsync (pageable, f.x, N * sizeof (float),
          cudaMemcpyDeviceToHost, f.a), ==, cudaSuccess);
  g_assert_true (holds (pageable, 5.0f));
  fill (pageable, 6.0f);
  g_assert_cmpint (cudaMemcpyAsync (f.y, pageable, N * sizeof (float),
          cudaMemcpyHostToDevice, f.b), ==, cudaSuccess);
  fill (pageable, 7.0f);
  g_assert_cmpint (cudaStreamSynchronize (f.b), ==, cudaSuccess);
  g_assert_true (holds (f.y, 6.0f));

  fill (f.pinned, 8.0f);
  g_assert_cmpint (cudaMemcpyAsync (f.x, f.pinned, N * sizeof (float),
          cudaMemcpyHostToDevice, f.a), ==, cudaSuccess);
  g_assert_true (holds (f.x, 5.0f));
  g_assert_cmpint (cudaMalloc ((void **) &spare, 16), ==, cudaSuccess);
  g_assert_cmpint (cudaFree (spare), ==, cudaSuccess);
  g_assert_true (holds (f.x, 8.0f));
  g_free (pageable);
  fixture_clear (&f);
}

/* An event's time is when its stream reached it: before that the elapsed
 * time is not ready, as CUDA says; an event never recorded has none; a
 * record replaces the one before it, even when the earlier one's stream
 * gets there later; an event destroyed before its stream reaches it is
 * no fault. */
static void
test_event_times (void)
{
  Fixture f;
  cudaEvent_t from, to, fresh, gone;
  float ms = -1;

  fixture_init (&f);
  g_assert_cmpint (cudaEventCreateWithFlags (&from, cudaEventDefault), ==,
      cudaSuccess);
  g_assert_cmpint (cudaEventCreateWithFlags (&to, cudaEventDefault), ==,
      cudaSuccess);
  g_assert_cmpint (cudaEventCreateWithFlags (&fresh, cudaEventDefault), ==,
      cudaSuccess);
  g_assert_cmpint (cudaEventCreateWithFlags (&gone, cudaEventDefault), ==,
      cudaSuccess);
  g_assert_cmpint (cudaEventElapsedTime (&ms, fresh, fresh), ==,
      cudaErrorInvalidResourceHandle);
  cudaGetLastError ();

  g_assert_cmpint (cudaEventRecord (from, f.a), ==, cudaSuccess);
  g_usleep (20000);
  g_assert_cmpint (cudaMemcpyAsync (f.x, f.pinned, N * sizeof (float),
          cudaMemcpyHostToDevice, f.a), ==, cudaSuccess);
  g_assert_cmpint (cudaEventRecord (to, f.a), ==, cudaSuccess);
  g_assert_cmpint (cudaEventRecord (gone, f.a), ==, cudaSuccess);
  g_assert_cmpint (cudaEventDestroy (gone), ==, cudaSuccess);
  g_assert_cmpint (cudaEventElapsedTime (&ms, from, to), ==,
      cudaErrorNotReady);
  cudaGetLastError ();
  g_assert_cmpint (cudaEventSynchronize (to), ==, cudaSuccess);
  g_assert_cmpint (cudaEventElapsedTime (&ms, from, to), ==, cudaSuccess);
  /* Both were stamped when the host waited, not 20 ms apart as
   * recorded. */
  g_assert_cmpfloat (ms, >=, 0.0f);
  g_assert_cmpfloat (ms, <, 20.0f);

  /* Recorded again on b, which a's queued stamp does not overwrite. */
  g_assert_cmpint (cudaEventRecord (from, f.a), ==, cudaSuccess);
  g_assert_cmpint (cudaEventRecord (from, f.b), ==, cudaSuccess);
  g_assert_cmpint (cudaStreamSynchronize (f.b), ==, cudaSuccess);
  g_usleep (20000);
  g_assert_cmpint (cudaStreamSynchronize (f.a), ==, cudaSuccess);
  g_assert_cmpint (cudaEventRecord (to, f.b), ==, cudaSuccess);
  g_assert_cmpint (cudaStreamSynchronize (f.b), ==, cudaSuccess);
  g_assert_cmpint (cudaEventElapsedTime (&ms, from, to), ==, cudaSuccess);
  g_assert_cmpfloat (ms, >=, 19.0f);

  cudaEventDestroy (from);
  cudaEventDestroy (to);
  cudaEventDestroy (fresh);
  fixture_clear (&f);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  if (g_strcmp0 (g_getenv ("PP_CUDA_EMU_DEFER"), "0") == 0) {
    g_test_skip ("PP_CUDA_EMU_DEFER=0: the streams run each call at once");
    return 77;
  }
  g_test_add_func ("/kernels/cuda-emu/streams/event-orders-host",
      test_event_orders_host);
  g_test_add_func ("/kernels/cuda-emu/streams/wait-orders-streams",
      test_wait_orders_streams);
  g_test_add_func ("/kernels/cuda-emu/streams/pageable-and-free",
      test_pageable_and_free);
  g_test_add_func ("/kernels/cuda-emu/streams/event-times", test_event_times);
  return g_test_run ();
}
