/* ppdiffuse-worker — one stage of the pipeline.
 *
 * Started by the ppdiffuse element through MPI_Comm_spawn, never by hand.
 * Three threads per worker, joined by bounded queues (capacity 2 each: the
 * receive of chunk n+1 and the send of chunk n-1 overlap the compute of
 * chunk n):
 *
 *   receiver: previous rank → validate → in-queue
 *   compute:  in-queue → run steps [first, end) → out-queue     (main thread)
 *   sender:   out-queue → next rank (the last worker sends to rank 0)
 *
 * Any error is logged with the rank and the chunk, and the process exits:
 * rank 0 notices at its next deadline and reports it. */
#include "pp-error.h"
#include "pp-handshake.h"
#include "pp-log.h"
#include "pp-mesh.h"
#include "pp-model.h"
#include "pp-proc.h"
#include "pp-queue.h"
#include "pp-transport.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define PP_WORKER_QUEUE_DEPTH 2
/* The hello follows the spawn at once; this only bounds a broken parent. */
#define PP_WORKER_HELLO_TIMEOUT_MS 60000
/* After a clean shutdown, MPI teardown gets this long before we just exit. */
#define PP_WORKER_EXIT_GRACE_MS 5000
#define PP_WORKER_EXIT_FAILURE 3

typedef struct
{
  MPI_Comm parent;
  MPI_Comm world;
  gint rank;
  PpPlan *plan;
  PpSlice slice;
  PpModel *model;
  gint64 rank0_pid;
  gchar *rank0_host;
  PpQueue *in;
  PpQueue *out;
  gint64 busy_us;
} Worker;

static void G_GNUC_NORETURN
worker_fail (Worker * w, const gchar * where, const GError * error)
{
  PP_ERROR_LOG ("rank %d (steps [%u,%u)) failed in %s: %s", w->rank,
      w->slice.first, w->slice.end, where, error ? error->message : "?");
  fflush (stderr);
  _exit (PP_WORKER_EXIT_FAILURE);
}

static gboolean
rank0_alive (gpointer data, GError ** error)
{
  Worker *w = data;

  if (pp_proc_is_local (w->rank0_host) && !pp_proc_is_running (w->rank0_pid)) {
    g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE,
        "rank 0 (pid %" G_GINT64_FORMAT ") has exited", w->rank0_pid);
    return FALSE;
  }
  return TRUE;
}

static gint
next_rank (Worker * w)
{
  return w->rank == (gint) w->plan->n_workers ? 0 : w->rank + 1;
}

static gpointer
receiver_thread (gpointer data)
{
  Worker *w = data;
  PpChunkExpect expect = {
    .chunk_id = 0,
    .plan_id = w->plan->plan_id,
    .next_step = w->slice.first,
    .n_steps = w->plan->n_steps,
    .min_cache_epoch = 0,
  };

  for (;;) {
    PpWait wait = { w->world, w->rank - 1, PP_NO_DEADLINE, rank0_alive, w };
    GError *error = NULL;
    PpChunk *chunk = pp_transport_recv_chunk (&wait, w->plan->timeout_ms,
        &error);
    gboolean last;

    if (chunk == NULL || !pp_chunk_check (chunk, &expect, &error))
      worker_fail (w, "receive", error);
    last = (chunk->flags & PP_CHUNK_FLAG_SHUTDOWN) != 0;
    if (!last && chunk->cache_epoch > expect.min_cache_epoch) {
      PP_INFO ("cache epoch %u starts at chunk %" G_GUINT64_FORMAT,
          chunk->cache_epoch, chunk->chunk_id);
      expect.min_cache_epoch = chunk->cache_epoch;
    }
    expect.chunk_id++;
    if (!pp_queue_push (w->in, chunk, pp_deadline_in_ms (w->plan->timeout_ms))) {
      g_set_error (&error, PP_ERROR, PP_ERROR_TIMEOUT,
          "compute did not take chunk %" G_GUINT64_FORMAT " within %u ms",
          chunk->chunk_id, w->plan->timeout_ms);
      worker_fail (w, "receive", error);
    }
    if (last)
      return NULL;
  }
}

static gpointer
sender_thread (gpointer data)
{
  Worker *w = data;

  for (;;) {
    PpWait wait = { w->world, next_rank (w),
      pp_deadline_in_ms (w->plan->timeout_ms), rank0_alive, w
    };
    PpChunk *chunk = pp_queue_pop (w->out, PP_NO_DEADLINE);
    GError *error = NULL;
    gboolean last;

    if (chunk == NULL)
      return NULL;
    last = (chunk->flags & PP_CHUNK_FLAG_SHUTDOWN) != 0;
    if (!pp_transport_send_chunk (&wait, chunk, &error))
      worker_fail (w, "send", error);
    if (last)
      return NULL;
  }
}

static void
run_steps (Worker * w, PpChunk * chunk)
{
  PpTensor *sample = pp_chunk_get_tensor (chunk, PP_MODEL_SAMPLE_NAME);
  gint64 start = g_get_monotonic_time ();
  GError *error = NULL;

  if (sample == NULL) {
    g_set_error (&error, PP_ERROR, PP_ERROR_PROTOCOL,
        "chunk %" G_GUINT64_FORMAT " carries no '%s' tensor", chunk->chunk_id,
        PP_MODEL_SAMPLE_NAME);
    worker_fail (w, "compute", error);
  }
  for (guint k = w->slice.first; k < w->slice.end; k++) {
    gint64 t0 = g_get_monotonic_time ();
    if (!pp_model_step (w->model, k, w->plan->n_steps, sample, &error))
      worker_fail (w, "compute", error);
    PP_DEBUG ("chunk %" G_GUINT64_FORMAT " step %u took %.3f ms",
        chunk->chunk_id, k, (g_get_monotonic_time () - t0) / 1000.0);
  }
  chunk->next_step = w->slice.end;
  w->busy_us += g_get_monotonic_time () - start;
}

static void
compute_loop (Worker * w)
{
  for (;;) {
    PpChunk *chunk = pp_queue_pop (w->in, PP_NO_DEADLINE);
    gboolean last;
    GError *error = NULL;

    if (chunk == NULL)
      return;
    last = (chunk->flags & PP_CHUNK_FLAG_SHUTDOWN) != 0;
    if (last) {
      PpTensor *busy = pp_chunk_get_tensor (chunk, PP_MESH_BUSY_TENSOR);
      if (busy == NULL || busy->dtype != PP_DTYPE_F64
          || busy->shape[0] != (gint64) w->plan->n_workers) {
        g_set_error (&error, PP_ERROR, PP_ERROR_PROTOCOL,
            "shutdown marker without an F64[%u] %s tensor",
            w->plan->n_workers, PP_MESH_BUSY_TENSOR);
        worker_fail (w, "shutdown", error);
      }
      ((gdouble *) busy->data)[w->rank - 1] = w->busy_us / 1e6;
      PP_INFO ("shutting down after %" G_GUINT64_FORMAT " chunks, busy %.3f s",
          chunk->chunk_id, w->busy_us / 1e6);
    } else {
      run_steps (w, chunk);
    }
    if (!pp_queue_push (w->out, chunk, pp_deadline_in_ms (w->plan->timeout_ms))) {
      g_set_error (&error, PP_ERROR, PP_ERROR_TIMEOUT,
          "the sender did not take chunk %" G_GUINT64_FORMAT " within %u ms",
          chunk->chunk_id, w->plan->timeout_ms);
      worker_fail (w, "compute", error);
    }
    if (last)
      return;
  }
}

static void
do_handshake (Worker * w)
{
  PpWait wait = { w->world, 0, pp_deadline_in_ms (PP_WORKER_HELLO_TIMEOUT_MS),
    NULL, NULL
  };
  g_autoptr (GBytes) hello = NULL;
  g_autoptr (GBytes) reply = NULL;
  g_autofree gchar *plan_text = NULL;
  GError *error = NULL;

  hello = pp_transport_recv_bytes (&wait, PP_TAG_HANDSHAKE, PP_HANDSHAKE_MAX,
      "handshake hello", &error);
  if (hello == NULL)
    worker_fail (w, "handshake", error);
  w->plan = pp_handshake_hello_parse (hello, &w->rank0_pid, &w->rank0_host,
      &error);
  if (w->plan != NULL && w->rank > (gint) w->plan->n_workers)
    g_set_error (&error, PP_ERROR, PP_ERROR_PROTOCOL,
        "rank %d is outside a plan of %u workers", w->rank,
        w->plan->n_workers);
  if (error == NULL) {
    w->slice = w->plan->slices[w->rank - 1];
    w->model = pp_model_new (w->plan->model, w->plan->n_steps,
        PP_MODEL_ROLE_STEPS, &error);
  }
  reply = pp_handshake_reply_new (w->plan ? w->plan->plan_id : 0, w->rank,
      error ? error->message : NULL);
  wait.deadline_us = pp_deadline_in_ms (PP_WORKER_HELLO_TIMEOUT_MS);
  if (!pp_transport_send_bytes (&wait, PP_TAG_HANDSHAKE_REPLY, reply,
          "handshake reply", error ? NULL : &error) || error != NULL)
    worker_fail (w, "handshake", error);
  plan_text = pp_plan_describe (w->plan);
  PP_INFO ("rank %d runs steps [%u,%u) of %s", w->rank, w->slice.first,
      w->slice.end, plan_text);
}

static gpointer
exit_watchdog (gpointer data)
{
  g_usleep ((gulong) PP_WORKER_EXIT_GRACE_MS * 1000);
  PP_WARN ("MPI teardown took longer than %d ms; exiting anyway",
      PP_WORKER_EXIT_GRACE_MS);
  fflush (stderr);
  _exit (0);
  return NULL;
}

int
main (int argc, char **argv)
{
  Worker w = { 0 };
  GThread *receiver, *sender;
  int provided = 0, world_size = 0;
  GError *error = NULL;

  if (MPI_Init_thread (&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS
      || provided < MPI_THREAD_MULTIPLE) {
    fprintf (stderr, "ppdiffuse-worker: MPI_THREAD_MULTIPLE is not available "
        "(got level %d)\n", provided);
    return 2;
  }
  MPI_Comm_get_parent (&w.parent);
  if (w.parent == MPI_COMM_NULL) {
    fprintf (stderr, "ppdiffuse-worker is started by the ppdiffuse GStreamer "
        "element (MPI_Comm_spawn); it does not run on its own\n");
    MPI_Finalize ();
    return 2;
  }
  MPI_Comm_set_errhandler (w.parent, MPI_ERRORS_RETURN);
  if (!pp_mpi_check (MPI_Intercomm_merge (w.parent, 1, &w.world),
          "MPI_Intercomm_merge", &error))
    worker_fail (&w, "start", error);
  MPI_Comm_set_errhandler (w.world, MPI_ERRORS_RETURN);
  MPI_Comm_rank (w.world, &w.rank);
  MPI_Comm_size (w.world, &world_size);
  pp_log_set_rank (w.rank);
  do_handshake (&w);

  w.in = pp_queue_new (PP_WORKER_QUEUE_DEPTH);
  w.out = pp_queue_new (PP_WORKER_QUEUE_DEPTH);
  receiver = g_thread_new ("pp-receiver", receiver_thread, &w);
  sender = g_thread_new ("pp-sender", sender_thread, &w);
  compute_loop (&w);
  g_thread_join (receiver);
  g_thread_join (sender);

  g_thread_unref (g_thread_new ("pp-exit-watchdog", exit_watchdog, NULL));
  MPI_Comm_free (&w.world);
  MPI_Comm_disconnect (&w.parent);
  MPI_Finalize ();
  PP_INFO ("exited cleanly");
  pp_queue_free (w.in, (GDestroyNotify) pp_chunk_free);
  pp_queue_free (w.out, (GDestroyNotify) pp_chunk_free);
  pp_model_free (w.model);
  pp_plan_free (w.plan);
  g_free (w.rank0_host);
  return 0;
}
