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
 * A fourth thread keeps the heartbeats (pp-heartbeat.h): it tells rank 0
 * every period what the compute thread is doing, and ends the process when
 * rank 0 has been silent for timeout-ms (the application died).
 *
 * Any error is sent to rank 0 as a report, logged with the rank and the
 * chunk together with the flight recorder, and the process exits. */
#include "pp-error.h"
#include "pp-fault.h"
#include "pp-handshake.h"
#include "pp-heartbeat.h"
#include "pp-log.h"
#include "pp-mesh.h"
#include "pp-model.h"
#include "pp-proc.h"
#include "pp-queue.h"
#include "pp-recorder.h"
#include "pp-transport.h"

#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define PP_WORKER_QUEUE_DEPTH 2
/* The hello follows the spawn at once; this only bounds a broken parent. */
#define PP_WORKER_HELLO_TIMEOUT_MS 60000
/* After a clean shutdown, MPI teardown gets this long before we just exit.
 * Sanitizer builds set a longer one: the exit includes the leak check. */
#ifndef PP_WORKER_EXIT_GRACE_MS
#define PP_WORKER_EXIT_GRACE_MS 5000
#endif
#define PP_WORKER_EXIT_FAILURE 3
/* A failing worker waits at most this long for rank 0 to take its report. */
#define PP_WORKER_REPORT_MS 1000
/* A failing worker is gone within this many seconds, whatever blocks. */
#define PP_WORKER_FAIL_GRACE_S 3
/* The slow fault sleeps this many timeouts in one step. */
#define PP_FAULT_SLOW_TIMEOUTS 3
/* Open MPI's environment for a spawned process: its rank among the
 * spawned (world rank - 1), known before MPI_Init. */
#define OMPI_RANK_ENV "OMPI_COMM_WORLD_RANK"

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
  gchar *dump_dir;
  PpFault fault;
  /* What the heartbeats say, written by the other threads (atomic). */
  gint state;                   /* PpWorkState of the compute thread */
  guint64 state_chunk;
  gint64 state_since_us;
  guint64 last_received;
  guint64 last_sent;
  gint heartbeat_stop;
  gint failing;                 /* first failure wins; others just wait */
  gint frozen;                  /* the hang fault: every thread stops */
  gboolean deadlines;           /* FALSE only under the test-only switch */
} Worker;

/* The hang fault: once set, each thread stops where it checks, so the
 * process stays alive and answers nothing, heartbeats included. */
static void
freeze_point (Worker * w)
{
  if (g_atomic_int_get (&w->frozen))
    for (;;)
      g_usleep (G_USEC_PER_SEC);
}

/* A deadline @timeout_ms from now, or none under the test-only switch. */
static gint64
worker_deadline (Worker * w)
{
  return w->deadlines ? pp_deadline_in_ms (w->plan->timeout_ms)
      : PP_NO_DEADLINE;
}

/* Best effort: rank 0 gets the text before this process goes. */
static void
send_report (Worker * w, gint blamed, const gchar * text)
{
  g_autoptr (GBytes) report = pp_report_encode (w->rank, blamed, text);
  PpWait wait = { w->world, 0, pp_deadline_in_ms (MIN (PP_WORKER_REPORT_MS,
              w->plan ? w->plan->timeout_ms : PP_WORKER_REPORT_MS)), NULL,
    NULL
  };
  GError *error = NULL;

  if (w->world == MPI_COMM_NULL)
    return;
  pp_recorder_note (PP_REC_REPORT, PP_RECORDER_NO_CHUNK, 0,
      g_bytes_get_size (report), PP_REC_STARTED);
  if (!pp_transport_send_bytes (&wait, PP_TAG_REPORT, report, "error report",
          &error)) {
    PP_WARN ("could not report to rank 0: %s", error->message);
    g_error_free (error);
  }
}

/* Fails this worker, reporting @blamed as the rank at fault: this one,
 * or the peer whose chunk could not be received or sent. */
static void G_GNUC_NORETURN
worker_fail_blaming (Worker * w, const gchar * where, gint blamed,
    const GError * error)
{
  g_autofree gchar *text = NULL;
  g_autofree gchar *dump = NULL;

  /* Another thread is already failing: let it finish the job. */
  if (!g_atomic_int_compare_and_exchange (&w->failing, 0, 1))
    for (;;)
      g_usleep (G_USEC_PER_SEC);
  /* Nothing below may keep the process alive: stderr goes through Open
   * MPI's daemon to rank 0, which may be frozen or gone, so a full pipe
   * must lose text rather than block; and SIGALRM ends the process if the
   * report or the dump hang anyway. */
  alarm (PP_WORKER_FAIL_GRACE_S);
  fcntl (STDERR_FILENO, F_SETFL, fcntl (STDERR_FILENO, F_GETFL) | O_NONBLOCK);
  text = g_strdup_printf ("worker rank %d (pid %d on %s, steps [%u,%u)) "
      "failed in %s: %s", w->rank, (int) getpid (), g_get_host_name (),
      w->slice.first, w->slice.end, where, error ? error->message : "?");
  PP_ERROR_LOG ("%s", text);
  send_report (w, blamed, text);
  dump = pp_recorder_dump (w->dump_dir, w->rank, text);
  if (dump != NULL)
    PP_ERROR_LOG ("flight recorder written to %s", dump);
  fflush (stderr);
  _exit (PP_WORKER_EXIT_FAILURE);
}

static void G_GNUC_NORETURN
worker_fail (Worker * w, const gchar * where, const GError * error)
{
  worker_fail_blaming (w, where, w->rank, error);
}

static void
set_state (Worker * w, PpWorkState state, guint64 chunk_id)
{
  /* The heartbeat thread may read a mix of old and new fields for one
   * period: it only reports them. */
  g_atomic_int_set (&w->state, state);
  w->state_chunk = chunk_id;
  w->state_since_us = g_get_monotonic_time ();
}

/* A fault of the break-it tests that ends or freezes the process. */
static void
fire_process_fault (Worker * w, guint64 chunk_id)
{
  static const PpFaultKind kinds[] = {
    PP_FAULT_KILL, PP_FAULT_HANG, PP_FAULT_EXIT0, PP_FAULT_EXIT1,
    PP_FAULT_ABORT,
  };

  for (guint i = 0; i < G_N_ELEMENTS (kinds); i++) {
    if (!pp_fault_fires (&w->fault, kinds[i], chunk_id))
      continue;
    PP_WARN ("injecting fault %s at chunk %" G_GUINT64_FORMAT,
        pp_fault_kind_name (kinds[i]), chunk_id);
    pp_recorder_note (PP_REC_FAULT, chunk_id, w->rank, 0, PP_REC_DONE);
    fflush (stderr);
    switch (kinds[i]) {
      case PP_FAULT_KILL:
        raise (SIGKILL);
        break;
      case PP_FAULT_HANG:
        g_atomic_int_set (&w->frozen, 1);
        freeze_point (w);
        break;
      case PP_FAULT_EXIT0:
        _exit (0);
      case PP_FAULT_EXIT1:
        _exit (1);
      case PP_FAULT_ABORT:
        abort ();
      default:
        break;
    }
  }
}

static gboolean
rank0_alive (gpointer data, GError ** error)
{
  Worker *w = data;

  freeze_point (w);
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

    /* A chunk that cannot be received or is wrong is its sender's. */
    if (chunk == NULL)
      worker_fail_blaming (w, "receive", w->rank - 1, error);
    if (!pp_chunk_check (chunk, &expect, &error)) {
      g_prefix_error (&error, "chunk from rank %d: ", w->rank - 1);
      worker_fail_blaming (w, "receive", w->rank - 1, error);
    }
    last = (chunk->flags & PP_CHUNK_FLAG_SHUTDOWN) != 0;
    w->last_received = chunk->chunk_id;
    if (!last && chunk->cache_epoch > expect.min_cache_epoch) {
      PP_INFO ("cache epoch %u starts at chunk %" G_GUINT64_FORMAT,
          chunk->cache_epoch, chunk->chunk_id);
      expect.min_cache_epoch = chunk->cache_epoch;
    }
    expect.chunk_id++;
    if (!pp_queue_push (w->in, chunk, worker_deadline (w))) {
      g_set_error (&error, PP_ERROR, PP_ERROR_TIMEOUT,
          "compute did not take chunk %" G_GUINT64_FORMAT " within %u ms",
          chunk->chunk_id, w->plan->timeout_ms);
      worker_fail (w, "receive", error);
    }
    if (last)
      return NULL;
  }
}

/* The sender's faults: a defective send, a skipped or a doubled chunk.
 * Returns how to send @chunk; FALSE when it must not be sent at all. */
static gboolean
sender_fault (Worker * w, PpChunk * chunk, PpSendDefect * defect,
    gboolean * twice)
{
  const guint64 id = chunk->chunk_id;

  *defect = PP_SEND_INTACT;
  *twice = FALSE;
  if (pp_fault_fires (&w->fault, PP_FAULT_BAD_VERSION, id))
    *defect = PP_SEND_BAD_VERSION;
  else if (pp_fault_fires (&w->fault, PP_FAULT_BAD_SPEC, id))
    *defect = PP_SEND_BAD_SPEC;
  else if (pp_fault_fires (&w->fault, PP_FAULT_DUP, id))
    *twice = TRUE;
  else if (!pp_fault_fires (&w->fault, PP_FAULT_SKIP, id))
    return TRUE;
  PP_WARN ("injecting a fault into the send of chunk %" G_GUINT64_FORMAT, id);
  pp_recorder_note (PP_REC_FAULT, id, next_rank (w), 0, PP_REC_DONE);
  return *defect != PP_SEND_INTACT || *twice;
}

static gpointer
sender_thread (gpointer data)
{
  Worker *w = data;

  for (;;) {
    PpWait wait = { w->world, next_rank (w), worker_deadline (w),
      rank0_alive, w
    };
    PpChunk *chunk = pp_queue_pop (w->out, PP_NO_DEADLINE);
    GError *error = NULL;
    PpSendDefect defect;
    gboolean last, twice;

    if (chunk == NULL)
      return NULL;
    last = (chunk->flags & PP_CHUNK_FLAG_SHUTDOWN) != 0;
    if (!sender_fault (w, chunk, &defect, &twice)) {
      pp_chunk_free (chunk);
      continue;
    }
    if (twice) {
      PpChunk *copy = pp_chunk_copy (chunk, &error);

      if (copy == NULL)
        worker_fail (w, "send", error);
      if (!pp_transport_send_chunk (&wait, copy, &error))
        worker_fail_blaming (w, "send", next_rank (w), error);
    }
    w->last_sent = chunk->chunk_id;
    /* A send that fails or stalls: the next rank died or does not take
     * its chunks. */
    if (!pp_transport_send_chunk_as (&wait, chunk, defect, &error))
      worker_fail_blaming (w, "send", next_rank (w), error);
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
  guint64 event;

  if (sample == NULL) {
    g_set_error (&error, PP_ERROR, PP_ERROR_PROTOCOL,
        "chunk %" G_GUINT64_FORMAT " carries no '%s' tensor", chunk->chunk_id,
        PP_MODEL_SAMPLE_NAME);
    worker_fail (w, "compute", error);
  }
  set_state (w, PP_WORK_COMPUTING, chunk->chunk_id);
  event = pp_recorder_begin (PP_REC_COMPUTE, chunk->chunk_id, w->rank,
      sample->nbytes);
  fire_process_fault (w, chunk->chunk_id);
  for (guint k = w->slice.first; k < w->slice.end; k++) {
    gint64 t0 = g_get_monotonic_time ();
    if (!pp_model_step (w->model, k, w->plan->n_steps, sample, &error))
      worker_fail (w, "compute", error);
    if (pp_fault_fires (&w->fault, PP_FAULT_SLOW, chunk->chunk_id)) {
      PP_WARN ("injecting fault slow at chunk %" G_GUINT64_FORMAT,
          chunk->chunk_id);
      g_usleep ((gulong) PP_FAULT_SLOW_TIMEOUTS * w->plan->timeout_ms * 1000);
    }
    PP_DEBUG ("chunk %" G_GUINT64_FORMAT " step %u took %.3f ms",
        chunk->chunk_id, k, (g_get_monotonic_time () - t0) / 1000.0);
  }
  pp_recorder_end (event, PP_REC_DONE);
  set_state (w, PP_WORK_IDLE, PP_HEARTBEAT_NONE);
  chunk->next_step = w->slice.end;
  /* A warm-up pass is no work of the stream's. */
  if (!(chunk->flags & PP_CHUNK_FLAG_WARMUP))
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
      set_state (w, PP_WORK_DONE, PP_HEARTBEAT_NONE);
      PP_INFO ("shutting down after %" G_GUINT64_FORMAT " chunks, busy %.3f s",
          chunk->chunk_id, w->busy_us / 1e6);
    } else {
      run_steps (w, chunk);
    }
    if (!pp_queue_push (w->out, chunk, worker_deadline (w))) {
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
  g_autoptr (GHashTable) parity = NULL;
  g_autofree gchar *plan_text = NULL;
  g_autofree gchar *digest = NULL;
  PpHelloOptions options = { 0 };
  GError *error = NULL;

  hello = pp_transport_recv_bytes (&wait, PP_TAG_HANDSHAKE, PP_HANDSHAKE_MAX,
      "handshake hello", &error);
  if (hello == NULL)
    worker_fail (w, "handshake", error);
  w->plan = pp_handshake_hello_parse (hello, &w->rank0_pid, &w->rank0_host,
      &options, &error);
  w->dump_dir = g_steal_pointer (&options.dump_dir);
  if (w->plan != NULL && w->rank > (gint) w->plan->n_workers)
    g_set_error (&error, PP_ERROR, PP_ERROR_PROTOCOL,
        "rank %d is outside a plan of %u workers", w->rank,
        w->plan->n_workers);
  if (error == NULL) {
    w->slice = w->plan->slices[w->rank - 1];
    w->model = pp_model_new (w->plan->model, w->plan->n_steps,
        PP_MODEL_ROLE_STEPS, &error);
  }
  if (error == NULL) {
    digest = pp_model_digest (w->model);
    if (pp_fault_fires (&w->fault, PP_FAULT_BAD_DIGEST, 0)) {
      PP_WARN ("injecting fault bad-digest");
      digest[0] = digest[0] == '0' ? '1' : '0';
    }
    parity = pp_parity_local (digest, &w->plan->plan_id);
  }
  reply = pp_handshake_reply_new (w->plan ? w->plan->plan_id : 0, w->rank,
      error ? error->message : NULL, parity);
  wait.deadline_us = pp_deadline_in_ms (PP_WORKER_HELLO_TIMEOUT_MS);
  if (!pp_transport_send_bytes (&wait, PP_TAG_HANDSHAKE_REPLY, reply,
          "handshake reply", error ? NULL : &error) || error != NULL)
    worker_fail (w, "handshake", error);
  plan_text = pp_plan_describe (w->plan);
  PP_INFO ("rank %d runs steps [%u,%u) of %s", w->rank, w->slice.first,
      w->slice.end, plan_text);
}

/* Sends rank 0 what this worker is doing, every heartbeat period; takes
 * rank 0's heartbeats and fails the worker when rank 0 has been silent for
 * timeout-ms before the shutdown marker came. */
static gpointer
heartbeat_thread (gpointer data)
{
  Worker *w = data;
  const guint period_ms = pp_heartbeat_period_ms (w->plan->timeout_ms);
  gint64 last_heard = g_get_monotonic_time ();
  gint64 next_send = 0;
  MPI_Request pending = MPI_REQUEST_NULL;
  GBytes *pending_bytes = NULL;
  guint64 seq = 0;

  while (!g_atomic_int_get (&w->heartbeat_stop)) {
    const gint64 now = g_get_monotonic_time ();
    GError *error = NULL;
    GBytes *in;
    gint source;

    freeze_point (w);
    while ((in = pp_transport_try_recv_bytes (w->world, PP_TAG_HEARTBEAT,
                PP_HEARTBEAT_MAX, &source, &error)) != NULL) {
      if (source == 0)
        last_heard = g_get_monotonic_time ();
      g_bytes_unref (in);
    }
    if (error != NULL)
      worker_fail (w, "heartbeat", error);
    if (g_atomic_int_get (&w->state) != PP_WORK_DONE
        && now - last_heard > (gint64) w->plan->timeout_ms * 1000) {
      pp_recorder_note (PP_REC_HEARTBEAT, PP_RECORDER_NO_CHUNK, 0, 0,
          PP_REC_FAILED);
      g_set_error (&error, PP_ERROR, PP_ERROR_TIMEOUT,
          "no heartbeat from rank 0 (pid %" G_GINT64_FORMAT " on %s) for %"
          G_GINT64_FORMAT " ms: the application has gone", w->rank0_pid,
          w->rank0_host, (now - last_heard) / 1000);
      worker_fail (w, "heartbeat", error);
    }
    if (now >= next_send) {
      int done = pending == MPI_REQUEST_NULL;

      if (!done)
        MPI_Test (&pending, &done, MPI_STATUS_IGNORE);
      if (done) {
        const PpHeartbeat hb = { (guint32) w->rank, g_atomic_int_get
              (&w->state), w->state_chunk, (guint64) (now - w->state_since_us),
          w->last_received, w->last_sent, seq++
        };
        gconstpointer bytes;
        gsize len;

        g_clear_pointer (&pending_bytes, g_bytes_unref);
        pending_bytes = pp_heartbeat_encode (&hb);
        bytes = g_bytes_get_data (pending_bytes, &len);
        MPI_Isend (bytes, (int) len, MPI_BYTE, 0, PP_TAG_HEARTBEAT, w->world,
            &pending);
      }
      next_send = now + (gint64) period_ms * 1000;
    }
    g_usleep (MIN (period_ms, PP_HEARTBEAT_MIN_PERIOD_MS) * 1000);
  }
  /* A heartbeat still in flight at the clean end: rank 0 drains it, or
   * MPI_Finalize does; its buffer stays alive until the process ends. */
  return NULL;
}

/* MPI_Init_thread and MPI_Intercomm_merge have no timeout of their own:
 * until the handshake is done, this thread ends the process after
 * PP_WORKER_HELLO_TIMEOUT_MS. */
static gint started;

static gpointer
start_watchdog (gpointer data)
{
  const gint64 deadline = pp_deadline_in_ms (PP_WORKER_HELLO_TIMEOUT_MS);

  while (!g_atomic_int_get (&started)) {
    if (g_get_monotonic_time () > deadline) {
      fprintf (stderr, "ppdiffuse-worker: MPI start-up and handshake did "
          "not finish within %d ms; exiting\n", PP_WORKER_HELLO_TIMEOUT_MS);
      fflush (stderr);
      _exit (PP_WORKER_EXIT_FAILURE);
    }
    g_usleep (100 * 1000);
  }
  return NULL;
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

/* The early-crash fault must fire before MPI_Init, when the world rank is
 * only in Open MPI's environment. */
static void
early_crash_fault (void)
{
  const gchar *spawn_rank = g_getenv (OMPI_RANK_ENV);
  guint64 r;
  PpFault fault;

  if (spawn_rank == NULL || !g_ascii_string_to_unsigned (spawn_rank, 10, 0,
          G_MAXINT - 1, &r, NULL))
    return;
  fault = pp_fault_for_rank ((gint) r + 1);
  if (fault.kind == PP_FAULT_EARLY_CRASH) {
    fprintf (stderr, "ppdiffuse-worker rank %d: injecting fault early-crash "
        "before MPI_Init\n", (int) r + 1);
    fflush (stderr);
    abort ();
  }
}

int
main (int argc, char **argv)
{
  Worker w = { 0 };
  GThread *receiver, *sender, *heartbeat;
  int provided = 0, world_size = 0;
  GError *error = NULL;

  w.world = MPI_COMM_NULL;
  early_crash_fault ();
  g_thread_unref (g_thread_new ("pp-start-watchdog", start_watchdog, NULL));
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
  w.fault = pp_fault_for_rank (w.rank);
  w.deadlines = g_strcmp0 (g_getenv (PP_MESH_NO_WATCHDOG_ENV), "1") != 0;
  w.last_received = w.last_sent = w.state_chunk = PP_HEARTBEAT_NONE;
  set_state (&w, PP_WORK_IDLE, PP_HEARTBEAT_NONE);
  do_handshake (&w);
  g_atomic_int_set (&started, 1);

  w.in = pp_queue_new (PP_WORKER_QUEUE_DEPTH);
  w.out = pp_queue_new (PP_WORKER_QUEUE_DEPTH);
  heartbeat = g_thread_new ("pp-heartbeat", heartbeat_thread, &w);
  receiver = g_thread_new ("pp-receiver", receiver_thread, &w);
  sender = g_thread_new ("pp-sender", sender_thread, &w);
  compute_loop (&w);
  g_thread_join (receiver);
  g_thread_join (sender);
  g_atomic_int_set (&w.heartbeat_stop, 1);
  g_thread_join (heartbeat);

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
  g_free (w.dump_dir);
  return 0;
}
