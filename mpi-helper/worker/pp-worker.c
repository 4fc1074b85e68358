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
 * A fourth thread keeps the heartbeats with rank 0 (pp-liveness.h, the
 * module rank 0 uses too): it tells rank 0 every period what the compute
 * thread is doing, and ends the process when rank 0 has been silent for
 * timeout-ms (the application died).
 *
 * Any error is sent to rank 0 as a report, logged with the rank and the
 * chunk together with the flight recorder, and the process exits.
 *
 * The break-it tests' faults fire in test hooks (pp-worker-room.h), which
 * only builds with the fault-injection option install. */
#include "pp-worker-room.h"
#include "pp-allowance.h"
#include "pp-bells.h"
#include "pp-lanes.h"
#include "pp-checkpoint.h"
#include "pp-data-plane-choice.h"
#include "pp-error.h"
#include "pp-handshake.h"
#include "pp-liveness.h"
#include "pp-log.h"
#include "pp-model.h"
#include "pp-nccl-links.h"
#include "pp-ompi-help.h"
#include "pp-proc.h"
#include "pp-protocol.h"
#include "pp-queue.h"
#include "pp-recorder.h"
#include "pp-transport.h"
#include "pp-weights.h"

#include <fcntl.h>
#include <string.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define PP_WORKER_QUEUE_DEPTH 2
/* Chunks the receiver and the sender hold, one each, besides the queues'
 * and the compute thread's (batch_held). */
#define PP_WORKER_CHUNKS_IN_THREADS 2
#define PP_WORKER_EXIT_FAILURE 3
/* A failing worker is gone within this many seconds, whatever blocks. */
#define PP_WORKER_FAIL_GRACE_S 3
/* How often the start watchdog looks at the clock. */
#define PP_WORKER_START_POLL_US 100000

/* The test hooks, NULL unless a test build installed them. */
static const PpWorkerHooks *hooks;

void
pp_worker_set_hooks (const PpWorkerHooks * table)
{
  hooks = table;
}

typedef struct
{
  MPI_Comm parent;
  MPI_Comm world;
  gint rank;
  PpPlan *plan;
  PpSlice slice;
  PpBackend *backend;
  PpModel *model;
  gint64 rank0_pid;
  gchar *rank0_host;
  gint node_rank;               /* among the workers on this host */
  guint32 graph_epoch;          /* cache epoch of the model's graph */
  /* The settings the model took last, and in which cache epoch: the same
   * ones again in that epoch (the warm-up passes and the first frame carry
   * them all) are not applied again, which would drop the graph. */
  GBytes *applied_settings;
  guint32 applied_epoch;
  guint warm_ups;               /* warm-up passes computed */
  PpQueue *in;
  PpQueue *out;
  PpChunkLink *from_prev;       /* the receiver's */
  PpChunkLink *to_next;         /* the sender's */
  /* The NCCL planes of this worker's two links when the plan's data plane
   * is NCCL, else NULL; aborted on the first failure. */
  PpNcclLinks *planes;
  gint64 busy_us;                /* compute thread only */
  /* Compute thread only: the measure the heartbeats carry, of the frames'
   * current size, and the sample shape it is of (zeros before the first
   * chunk). */
  PpPace pace;
  gint64 pace_shape[PP_TENSOR_MAX_DIMS];
  guint64 batched_steps;        /* compute thread only: frame-steps run in
                                 * stream-batch passes of two or more */
  guint widest_pass;            /* compute thread only: the most frames a
                                 * pass ran */
  /* Compute thread only: a sample of a new shape came (pace_note_shape)
   * whose batch sizes the next pass runs first (warm_batches). */
  gboolean warm_pending;
  gchar *dump_dir;
  /* What the heartbeats say: the compute thread's state and the last
   * chunks received and sent, written by three threads. */
  PpLiveness *liveness;
  gint failing;                 /* atomic: first failure wins; others wait */
  gboolean deadlines;           /* FALSE only under the test-only switch */
  /* What this worker's computes took, warm-up passes included: written by
   * the compute thread, read by the threads that wait behind a stage. */
  GMutex pace_lock;
  gint64 measured_us;
  guint64 measured_steps;
} Worker;

/* What the slowest stage is expected to take for one chunk: this
 * worker's measured time per step (every stage runs the same model on
 * the same frames) times the longest slice of the plan; before anything
 * was measured, pp_allowance_unmeasured_us. */
static gint64
stage_expected_us (Worker * w)
{
  guint longest = 0;
  gint64 us;
  guint64 steps;

  for (guint i = 0; i < w->plan->n_workers; i++)
    longest = MAX (longest, w->plan->slices[i].end - w->plan->slices[i].first);
  g_mutex_lock (&w->pace_lock);
  us = w->measured_us;
  steps = w->measured_steps;
  g_mutex_unlock (&w->pace_lock);
  if (steps == 0 || us <= 0)
    return pp_allowance_unmeasured_us (w->plan->timeout_ms, longest);
  return us * (gint64) longest / (gint64) steps;
}

/* How long a wait behind a stage may take (a queue, a send: at worst the
 * next stage finishes one chunk first), pp-allowance.h; in ms for messages. */
static guint
worker_allowance_ms (Worker * w)
{
  return (guint) MIN (pp_allowance_us (w->plan->timeout_ms,
          stage_expected_us (w)) / 1000, G_MAXUINT);
}

/* The deadline of a wait behind a stage, or none under the test-only
 * switch. */
static gint64
worker_deadline (Worker * w)
{
  return w->deadlines ? pp_deadline_in_ms (worker_allowance_ms (w))
      : PP_NO_DEADLINE;
}

/* Best effort: rank 0 gets the text before this process goes.  The send
 * is done once rank 0 has taken the report (or at the deadline): a report
 * still in flight when rank 0 sees the process gone would leave it only
 * "has exited", without the why. */
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
  if (!pp_transport_send_bytes_taken (&wait, PP_TAG_REPORT, report,
          "error report", &error)) {
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
  /* No NCCL wait may outlive the failure (the other threads may be in
   * one): abort every plane; never finalize or destroy here. */
  if (w->planes != NULL) {
    GError *reason = g_error_new (PP_ERROR, PP_ERROR_RESOURCE, "%s", text);

    pp_nccl_links_abort (w->planes, reason);
    g_error_free (reason);
  }
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

/* The worker, for the log writer, once it exists. */
static Worker *fatal_worker;

/* GLib's writer, except for a fatal message (g_error: a backend that
 * cannot go on, such as a device out of memory in the middle of an op):
 * that fails the worker as any failure does, with its report to rank 0
 * (whose error then says why), instead of aborting with the text on
 * stderr alone. */
static GLogWriterOutput
log_writer (GLogLevelFlags level, const GLogField * fields, gsize n_fields,
    gpointer data)
{
  if ((level & G_LOG_LEVEL_ERROR) && fatal_worker != NULL) {
    const gchar *message = "(no message)";
    GError *error;

    for (gsize i = 0; i < n_fields; i++)
      if (g_strcmp0 (fields[i].key, "MESSAGE") == 0 && fields[i].length < 0)
        message = fields[i].value;
    error = g_error_new (PP_ERROR, PP_ERROR_RESOURCE, "%s", message);
    worker_fail (fatal_worker, "its backend", error);
  }
  return g_log_writer_default (level, fields, n_fields, data);
}

static gboolean
rank0_alive (gpointer data, GError ** error)
{
  Worker *w = data;

  if (hooks != NULL)
    hooks->freeze_point ();
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
    PpChunk *chunk = pp_transport_recv_chunk (&wait, w->from_prev,
        w->plan->timeout_ms, &error);
    gboolean last;

    /* A chunk that cannot be received or is wrong is its sender's. */
    if (chunk == NULL)
      worker_fail_blaming (w, "receive", w->rank - 1, error);
    if (!pp_chunk_check (chunk, &expect, &error)) {
      g_prefix_error (&error, "chunk from rank %d: ", w->rank - 1);
      worker_fail_blaming (w, "receive", w->rank - 1, error);
    }
    last = (chunk->flags & PP_CHUNK_FLAG_SHUTDOWN) != 0;
    pp_liveness_note_received (w->liveness, chunk->chunk_id);
    if (!last && chunk->cache_epoch > expect.min_cache_epoch) {
      PP_INFO ("cache epoch %u starts at chunk %" G_GUINT64_FORMAT,
          chunk->cache_epoch, chunk->chunk_id);
      expect.min_cache_epoch = chunk->cache_epoch;
    }
    expect.chunk_id++;
    if (!pp_queue_push (w->in, chunk, worker_deadline (w))) {
      g_set_error (&error, PP_ERROR, PP_ERROR_TIMEOUT,
          "compute did not take chunk %" G_GUINT64_FORMAT " within %u ms "
          "(max (timeout-ms, %d × the expected stage time))",
          chunk->chunk_id, worker_allowance_ms (w), PP_ALLOWANCE_FACTOR);
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
    PpWait wait = { w->world, next_rank (w), PP_NO_DEADLINE, rank0_alive, w };
    PpChunk *chunk = pp_queue_pop (w->out, PP_NO_DEADLINE);
    GError *error = NULL;
    PpSendDefect defect;
    gboolean last, twice;

    if (chunk == NULL)
      return NULL;
    /* The send's deadline runs from when there is a chunk to send: a mesh
     * left idle longer than timeout-ms (keep-workers) is not late. */
    wait.deadline_us = worker_deadline (w);
    last = (chunk->flags & PP_CHUNK_FLAG_SHUTDOWN) != 0;
    defect = PP_SEND_INTACT;
    twice = FALSE;
    if (hooks != NULL
        && !hooks->before_send (chunk, next_rank (w), &defect, &twice)) {
      pp_chunk_free (chunk);
      continue;
    }
    if (twice) {
      PpChunk *copy = pp_chunk_copy (chunk, &error);

      if (copy == NULL)
        worker_fail (w, "send", error);
      if (!pp_transport_send_chunk (&wait, w->to_next, copy, &error))
        worker_fail_blaming (w, "send", next_rank (w), error);
    }
    pp_liveness_note_sent (w->liveness, chunk->chunk_id);
    /* A send that fails or stalls: the next rank died or does not take
     * its chunks. */
    if (!pp_transport_send_chunk_as (&wait, w->to_next, chunk, defect,
            &error))
      worker_fail_blaming (w, "send", next_rank (w), error);
    if (last)
      return NULL;
  }
}

typedef struct
{
  PpChunk *chunk;
  guint timeout_ms;
} StepDone;

static void
step_done (guint step, gpointer data)
{
  const StepDone *d = data;

  if (hooks != NULL)
    hooks->after_step (d->chunk->chunk_id, d->timeout_ms);
}

/* The settings @chunk carries, if any (a serialised PpSettings): the
 * model takes them before it computes the chunk. */
static void
apply_settings (Worker * w, PpChunk * chunk)
{
  PpTensor *t = pp_chunk_get_tensor (chunk, PP_SETTINGS_TENSOR);
  g_autofree guint8 *bytes = NULL;
  g_autofree gchar *text = NULL;
  PpSettings settings;
  GError *error = NULL;

  if (t == NULL)
    return;
  if (t->dtype != PP_DTYPE_U8 || t->ndim != 1 || t->nbytes == 0
      || t->nbytes > PP_SETTINGS_MAX) {
    g_autofree gchar *got = pp_tensor_describe (t);
    g_set_error (&error, PP_ERROR, PP_ERROR_PROTOCOL,
        "chunk %" G_GUINT64_FORMAT " carries a '%s' tensor %s; expected "
        "U8[n], 0 < n <= %d", chunk->chunk_id, PP_SETTINGS_TENSOR, got,
        PP_SETTINGS_MAX);
    worker_fail (w, "settings", error);
  }
  bytes = g_malloc (t->nbytes);
  if (t->backend != NULL)       /* a device payload (NCCL) */
    pp_backend_download (t->backend, bytes, t->data, t->nbytes);
  else
    memcpy (bytes, t->data, t->nbytes);
  if (w->applied_settings != NULL && w->applied_epoch == chunk->cache_epoch
      && g_bytes_get_size (w->applied_settings) == t->nbytes
      && memcmp (g_bytes_get_data (w->applied_settings, NULL), bytes,
          t->nbytes) == 0) {
    PP_DEBUG ("cache epoch %u: chunk %" G_GUINT64_FORMAT " carries the "
        "settings the model has", chunk->cache_epoch, chunk->chunk_id);
    return;
  }
  pp_settings_init (&settings);
  /* The chunk's other tensors are what came with the settings. */
  if (!pp_settings_deserialize (bytes, t->nbytes, &settings, &error)
      || !pp_model_update (w->model, &settings, chunk->tensors, &error)) {
    g_prefix_error (&error, "cache epoch %u (chunk %" G_GUINT64_FORMAT "): ",
        chunk->cache_epoch, chunk->chunk_id);
    worker_fail (w, "settings", error);
  }
  g_clear_pointer (&w->applied_settings, g_bytes_unref);
  w->applied_settings = g_bytes_new_take (g_steal_pointer (&bytes),
      t->nbytes);
  w->applied_epoch = chunk->cache_epoch;
  text = pp_settings_describe (&settings);
  PP_INFO ("cache epoch %u: settings %s", chunk->cache_epoch, text);
  pp_settings_clear (&settings);
}

/* The chunk's sample tensor; a chunk without one fails the worker. */
static PpTensor *
chunk_sample (Worker * w, PpChunk * chunk)
{
  PpTensor *sample = pp_chunk_get_tensor (chunk, PP_MODEL_SAMPLE_NAME);
  GError *error = NULL;

  if (sample == NULL) {
    g_set_error (&error, PP_ERROR, PP_ERROR_PROTOCOL,
        "chunk %" G_GUINT64_FORMAT " carries no '%s' tensor", chunk->chunk_id,
        PP_MODEL_SAMPLE_NAME);
    worker_fail (w, "compute", error);
  }
  return sample;
}

/* A chunk whose sample has another shape than the one before (the first
 * chunk, a caps change) is other work: what this worker measured no
 * longer says what a chunk takes, so its measures start again (the
 * chunks before it have all been computed: a batch takes no chunk of
 * another shape).  Until a chunk of the new size is done its waits get
 * the allowance of unmeasured work, and so does it at rank 0, which
 * counts the sizes alike (PpPace); a batching worker's next pass warms
 * the new size's batch sizes first (warm_batches). */
static void
pace_note_shape (Worker * w, const PpTensor * sample)
{
  if (!pp_tensor_shape_changed (sample, w->pace_shape))
    return;
  w->warm_pending = TRUE;
  if (w->pace.work > 0)
    PP_DEBUG ("a sample of another shape: the pace is measured again");
  w->pace.work++;
  w->pace.us = w->pace.passes = 0;
  g_mutex_lock (&w->pace_lock);
  w->measured_us = 0;
  w->measured_steps = 0;
  g_mutex_unlock (&w->pace_lock);
  pp_liveness_set_busy (w->liveness, (guint64) w->busy_us, &w->pace);
}

/* Before a chunk's steps: its settings, a new cache epoch when it starts
 * one, and whether it is a frame of the stream.  The flight recorder's
 * event for its compute, which chunk_end closes. */
static guint64
chunk_begin (Worker * w, PpChunk * chunk, PpTensor * sample)
{
  guint64 event;

  pace_note_shape (w, sample);
  pp_liveness_set_state (w->liveness, PP_WORK_COMPUTING, chunk->chunk_id);
  event = pp_recorder_begin (PP_REC_COMPUTE, chunk->chunk_id, w->rank,
      sample->nbytes);
  if (hooks != NULL)
    hooks->before_steps (chunk->chunk_id);
  apply_settings (w, chunk);
  /* A new cache epoch (and RESET, which starts one) changes what the
   * steps compute: no graph or per-epoch cache of an older one may serve. */
  if (chunk->cache_epoch != w->graph_epoch
      || (chunk->flags & PP_CHUNK_FLAG_RESET)) {
    pp_model_new_epoch (w->model);
    w->graph_epoch = chunk->cache_epoch;
  }
  /* A warm-up pass is no frame of the stream: per-stream state (a
   * temporal feature bank) does not take it. */
  pp_model_stream_frame (w->model,
      (chunk->flags & PP_CHUNK_FLAG_WARMUP) == 0);
  return event;
}

/* After a chunk's last step. */
static void
chunk_end (Worker * w, PpChunk * chunk, guint64 event)
{
  pp_recorder_end (event, PP_REC_DONE);
  pp_liveness_set_cache_builds (w->liveness, pp_model_cache_builds (w->model));
  pp_liveness_set_stream_bytes (w->liveness, pp_model_stream_bytes (w->model));
  chunk->next_step = w->slice.end;
  if (chunk->flags & PP_CHUNK_FLAG_WARMUP)
    w->warm_ups++;
}

/* Compute time spent: @steps steps of a chunk's progress took @us, and
 * whether stream chunks ran their slice's last step in it (@finished:
 * warm-up passes count for this worker's own pace, not for busy or the
 * pace the heartbeats carry, where a compute that finished chunks counts
 * once, however many: PpPace). */
static void
add_compute_time (Worker * w, gint64 us, guint steps, gboolean warm_up,
    gboolean finished)
{
  g_mutex_lock (&w->pace_lock);
  w->measured_us += us;
  w->measured_steps += steps;
  g_mutex_unlock (&w->pace_lock);
  if (!warm_up) {
    w->busy_us += us;
    w->pace.us += (guint64) us;
    w->pace.passes += finished;
    pp_liveness_set_busy (w->liveness, (guint64) w->busy_us, &w->pace);
  }
}

static void
run_steps (Worker * w, PpChunk * chunk)
{
  PpTensor *sample = chunk_sample (w, chunk);
  gint64 start = g_get_monotonic_time ();
  GError *error = NULL;
  guint64 event = chunk_begin (w, chunk, sample);

  /* The sample goes to the device once and stays there for the slice. */
  if (!pp_model_steps_begin (w->model, sample, &error))
    worker_fail (w, "compute", error);
  {
    StepDone done = { chunk, w->plan->timeout_ms };

    if (!pp_model_steps_slice (w->model, w->slice.first, w->slice.end,
            w->plan->n_steps, sample, step_done, &done, &error))
      worker_fail (w, "compute", error);
  }
  if (!pp_model_steps_end (w->model, sample, &error))
    worker_fail (w, "compute", error);
  PP_DEBUG ("chunk %" G_GUINT64_FORMAT " steps [%u,%u) took %.3f ms",
      chunk->chunk_id, w->slice.first, w->slice.end,
      (g_get_monotonic_time () - start) / 1000.0);
  chunk_end (w, chunk, event);
  pp_liveness_set_state (w->liveness, PP_WORK_IDLE, PP_HEARTBEAT_NONE);
  add_compute_time (w, g_get_monotonic_time () - start,
      w->slice.end - w->slice.first,
      (chunk->flags & PP_CHUNK_FLAG_WARMUP) != 0, TRUE);
}

/* Hands a computed chunk (or the shutdown marker) to the sender. */
static void
push_out (Worker * w, PpChunk * chunk)
{
  GError *error = NULL;

  /* Behind the chunk's work on the device: its send waits for this fence,
   * not for the next chunks' work queued after it. */
  pp_chunk_mark_ready (chunk);
  if (!pp_queue_push (w->out, chunk, worker_deadline (w))) {
    g_set_error (&error, PP_ERROR, PP_ERROR_TIMEOUT,
        "the sender did not take chunk %" G_GUINT64_FORMAT " within %u ms "
        "(max (timeout-ms, %d × the expected stage time))",
        chunk->chunk_id, worker_allowance_ms (w), PP_ALLOWANCE_FACTOR);
    worker_fail (w, "compute", error);
  }
}

/* Stream batch and frame batch (docs/architecture.md): the chunks between
 * their first and last step of this worker's slice, oldest first, each at
 * its own step.  A pass runs one step of each in one batched call and
 * hands on those that have run the slice's last step, oldest first; a
 * chunk joins at the slice's first step when it is waiting, up to
 * frame-batch chunks at that step (and, without stream-batch, only before
 * the batch's first pass), and none is waited for. */
typedef struct
{
  PpChunk *chunk;
  PpTensor *sample;
  guint step;                   /* the next to run */
  guint64 event;
} Rider;

typedef struct
{
  Rider *riders;
  guint n, max;
  /* For the pass: the riders' samples and steps. */
  PpTensor **samples;
  guint *steps;
} Batch;

/* A chunk that must compute alone: a reset or a warm-up pass. */
#define ALONE_FLAGS (PP_CHUNK_FLAG_RESET | PP_CHUNK_FLAG_WARMUP)

/* Whether @chunk's settings tensor is absent or the settings the model
 * has (the same again in its epoch): joining a batch changes nothing. */
static gboolean
settings_unchanged (Worker * w, PpChunk * chunk)
{
  PpTensor *t = pp_chunk_get_tensor (chunk, PP_SETTINGS_TENSOR);

  if (t == NULL)
    return TRUE;
  if (w->applied_settings == NULL || w->applied_epoch != chunk->cache_epoch
      || g_bytes_get_size (w->applied_settings) != t->nbytes
      || t->backend != NULL)
    return FALSE;
  return memcmp (g_bytes_get_data (w->applied_settings, NULL), t->data,
      t->nbytes) == 0;
}

/* Whether riders may join behind others' steps: a stream batch over a
 * slice of two steps or more. */
static gboolean
batch_staggered (Worker * w)
{
  return w->model->stream_batch && w->slice.end - w->slice.first > 1;
}

/* Whether @chunk may join the riders: room at the slice's first step, and
 * nothing that changes what their steps compute (a new epoch, settings, a
 * reset, a warm-up pass, a size).  What the riders share is the first
 * one's.  A chunk that may not waits until they have all left. */
static gboolean
batch_admits (Worker * w, const Batch * b, PpChunk * chunk)
{
  const Rider *first = &b->riders[0];
  PpTensor *sample;
  guint at_first = 0;

  if (b->n == 0)
    return TRUE;
  for (guint i = 0; i < b->n; i++)
    at_first += b->riders[i].step == w->slice.first;
  if (at_first == w->model->frame_batch
      || (!batch_staggered (w) && at_first < b->n))
    return FALSE;
  if (b->n == b->max || (first->chunk->flags & ALONE_FLAGS)
      || (chunk->flags & (PP_CHUNK_FLAG_SHUTDOWN | ALONE_FLAGS))
      || chunk->cache_epoch != first->chunk->cache_epoch)
    return FALSE;
  sample = pp_chunk_get_tensor (chunk, PP_MODEL_SAMPLE_NAME);
  return sample != NULL && sample->ndim == first->sample->ndim
      && memcmp (sample->shape, first->sample->shape,
          sample->ndim * sizeof sample->shape[0]) == 0
      && settings_unchanged (w, chunk);
}

static void
batch_join (Worker * w, Batch * b, PpChunk * chunk)
{
  Rider *r = &b->riders[b->n];

  r->chunk = chunk;
  r->sample = chunk_sample (w, chunk);
  r->step = w->slice.first;
  b->n++;
  r->event = chunk_begin (w, chunk, r->sample);
}

/* Before the first pass of a sample shape (a warm-up pass's, or the first
 * frame's of a new size): every batch size this worker may run, once,
 * where the backend makes plans per shape, so that none makes them in the
 * middle of the stream (once a sample shape: the second warm-up pass, a
 * steady one, does not).  A new size's first chunk is unmeasured work
 * (pace_note_shape), whose allowance covers this. */
static void
warm_batches (Worker * w, const Batch * b)
{
  const PpTensor *sample = b->riders[0].sample;
  const gint64 start = g_get_monotonic_time ();
  GError *error = NULL;
  guint sizes;

  w->warm_pending = FALSE;
  if (!pp_model_warm_batches (w->model, sample, b->max, w->slice.first,
          w->plan->n_steps, &sizes, &error)) {
    g_prefix_error (&error, "running each batch size up to %u samples "
        "(frame-batch × this worker's steps with stream-batch; lower them "
        "where the device cannot take that many): ", b->max);
    worker_fail (w, "warm-up", error);
  }
  if (sizes > 0) {
    g_autofree gchar *desc = pp_tensor_describe (sample);

    PP_INFO ("warm-up: batches of 2 to %u samples run once (%.0f ms), "
        "their plans made before the frames of %s", sizes + 1,
        (g_get_monotonic_time () - start) / 1000.0, desc);
  }
}

/* One pass: a step of every rider, then those whose slice is done leave,
 * oldest first (they are the first riders). */
static void
batch_pass (Worker * w, Batch * b)
{
  const gint64 start = g_get_monotonic_time ();
  GError *error = NULL;

  pp_liveness_set_state (w->liveness, PP_WORK_COMPUTING,
      b->riders[b->n - 1].chunk->chunk_id);
  /* A sample of a new shape joins only an empty batch: the riders are its
   * first pass, all at the slice's first step. */
  if (w->warm_pending)
    warm_batches (w, b);
  for (guint i = 0; i < b->n; i++) {
    b->samples[i] = b->riders[i].sample;
    b->steps[i] = b->riders[i].step;
  }
  if (!pp_model_steps_batch (w->model, b->n, b->samples, b->steps,
          w->plan->n_steps, &error))
    worker_fail (w, "compute", error);
  for (guint i = 0; i < b->n; i++) {
    StepDone done = { b->riders[i].chunk, w->plan->timeout_ms };

    step_done (b->riders[i].step++, &done);
  }
  PP_DEBUG ("stream batch of %u (chunks %" G_GUINT64_FORMAT "..%"
      G_GUINT64_FORMAT ") took %.3f ms", b->n, b->riders[0].chunk->chunk_id,
      b->riders[b->n - 1].chunk->chunk_id,
      (g_get_monotonic_time () - start) / 1000.0);
  w->widest_pass = MAX (w->widest_pass, b->n);
  if (b->n > 1) {
    w->batched_steps += b->n;
    pp_liveness_set_batched_steps (w->liveness, w->batched_steps);
  }
  /* A pass moves each rider one step on: the pace counts one step, and
   * whether riders ran their last (the oldest, riders[0], first). */
  add_compute_time (w, g_get_monotonic_time () - start, 1,
      (b->riders[0].chunk->flags & PP_CHUNK_FLAG_WARMUP) != 0,
      b->riders[0].step >= w->slice.end);
  while (b->n > 0 && b->riders[0].step >= w->slice.end) {
    chunk_end (w, b->riders[0].chunk, b->riders[0].event);
    push_out (w, b->riders[0].chunk);
    memmove (b->riders, b->riders + 1, --b->n * sizeof b->riders[0]);
  }
  if (b->n == 0)
    pp_liveness_set_state (w->liveness, PP_WORK_IDLE, PP_HEARTBEAT_NONE);
}

/* How many chunks a worker's compute thread holds at once: frame-batch at
 * each of its slice's steps with a stream batch, else frame-batch. */
static guint
batch_size (Worker * w)
{
  const guint frames = w->model->frame_batch;

  return batch_staggered (w) ? frames * (w->slice.end - w->slice.first)
      : frames;
}

/* The most chunks the compute thread holds: a whole batch and the chunk
 * that waits for it to empty, or the one it computes. */
static guint
batch_held (Worker * w)
{
  return batch_size (w) > 1 ? batch_size (w) + 1 : 1;
}

/* The shutdown marker: this rank's busy time goes into its busy tensor. */
static void
mark_shutdown (Worker * w, PpChunk * chunk)
{
  PpTensor *busy = pp_chunk_get_tensor (chunk, PP_BUSY_TENSOR);
  GError *error = NULL;
  guint64 captures, launches, batch_captures, batch_launches;
  g_autofree gchar *batched = NULL;

  if (busy == NULL || busy->dtype != PP_DTYPE_F64
      || busy->shape[0] != (gint64) w->plan->n_workers) {
    g_set_error (&error, PP_ERROR, PP_ERROR_PROTOCOL,
        "shutdown marker without an F64[%u] %s tensor",
        w->plan->n_workers, PP_BUSY_TENSOR);
    worker_fail (w, "shutdown", error);
  }
  if (busy->backend != NULL) {
    /* A device payload (NCCL): this rank's entry goes through the
     * host. */
    g_autofree gdouble *host = g_new0 (gdouble, w->plan->n_workers);

    pp_backend_download (busy->backend, host, busy->data, busy->nbytes);
    host[w->rank - 1] = w->busy_us / 1e6;
    pp_backend_upload (busy->backend, busy->data, host, busy->nbytes);
  } else {
    ((gdouble *) busy->data)[w->rank - 1] = w->busy_us / 1e6;
  }
  pp_liveness_set_state (w->liveness, PP_WORK_DONE, PP_HEARTBEAT_NONE);
  pp_model_graph_counts (w->model, &captures, &launches);
  pp_model_batch_graph_counts (w->model, &batch_captures, &batch_launches);
  batched = batch_size (w) > 1 ? g_strdup_printf (", stream batch: %"
      G_GUINT64_FORMAT " frame-steps batched, batch graphs: %"
      G_GUINT64_FORMAT " captured, %" G_GUINT64_FORMAT " launched, passes "
      "of up to %u frames (of %u)", w->batched_steps, batch_captures,
      batch_launches, w->widest_pass, batch_size (w)) : NULL;
  PP_INFO ("shutting down after %" G_GUINT64_FORMAT " chunks and %u "
      "warm-up passes, busy %.3f s, step graphs: %" G_GUINT64_FORMAT
      " captured, %" G_GUINT64_FORMAT " launched%s",
      chunk->chunk_id - w->warm_ups, w->warm_ups, w->busy_us / 1e6,
      captures, launches, batched ? batched : "");
  if (pp_log_enabled (PP_LOG_INFO)) {
    g_autofree gchar *pools = pp_model_describe_pools (w->model);

    if (pools != NULL)
      PP_INFO ("%s", pools);
  }
}

static void
compute_loop (Worker * w)
{
  Batch b = { 0 };
  PpChunk *held = NULL;         /* the chunk that waits for an empty batch */

  b.max = batch_size (w);
  b.riders = g_new0 (Rider, b.max);
  b.samples = g_new0 (PpTensor *, b.max);
  b.steps = g_new0 (guint, b.max);
  for (;;) {
    PpChunk *chunk = held;

    held = NULL;
    /* With riders, take only a chunk that is already waiting. */
    if (chunk == NULL)
      chunk = pp_queue_pop (w->in, b.n > 0 ? g_get_monotonic_time ()
          : PP_NO_DEADLINE);
    if (chunk == NULL && (b.n == 0 || pp_queue_is_closed (w->in)))
      break;
    if (chunk != NULL && b.n > 0 && !batch_admits (w, &b, chunk)) {
      held = chunk;
      chunk = NULL;
    }
    if (chunk != NULL && (chunk->flags & PP_CHUNK_FLAG_SHUTDOWN)) {
      mark_shutdown (w, chunk);
      push_out (w, chunk);
      break;
    }
    if (chunk != NULL && b.max == 1) {
      run_steps (w, chunk);
      push_out (w, chunk);
      continue;
    }
    if (chunk != NULL) {
      batch_join (w, &b, chunk);
      /* The others already waiting join too, while the first step has
       * room (frame-batch); the first that may not waits. */
      while (held == NULL && b.n < b.max) {
        PpChunk *next = pp_queue_pop (w->in, g_get_monotonic_time ());

        if (next == NULL)
          break;
        if (batch_admits (w, &b, next))
          batch_join (w, &b, next);
        else
          held = next;
      }
    }
    batch_pass (w, &b);
  }
  g_free (b.riders);
  g_free (b.samples);
  g_free (b.steps);
}

/* How long MPI start-up and the handshake may take: rank 0's start
 * budget when it passed one (PP_WORKER_START_ARG), else the default.  A
 * model load that keeps making progress may take longer: the budget
 * counts from its last progress. */
static guint start_timeout_ms = PP_WORKER_HELLO_TIMEOUT_MS;

/* The load's progress reports to rank 0 (PP_TAG_LOAD_PROGRESS), from a
 * thread of their own while the main thread loads. */
typedef struct
{
  MPI_Comm world;
  guint period_ms;
  GMutex lock;
  GCond wake;
  gboolean stop;
  GThread *thread;
} LoadReports;

static gpointer
load_reports_run (gpointer data)
{
  LoadReports *r = data;
  guint64 reported = pp_weights_load_progress ();

  g_mutex_lock (&r->lock);
  while (!r->stop) {
    const gint64 until = g_get_monotonic_time ()
        + (gint64) r->period_ms * 1000;
    guint64 now;

    while (!r->stop && g_cond_wait_until (&r->wake, &r->lock, until));
    now = pp_weights_load_progress ();
    if (r->stop || now == reported)
      continue;
    g_mutex_unlock (&r->lock);
    {
      const guint64 le = GUINT64_TO_LE (now);
      g_autoptr (GBytes) msg = g_bytes_new (&le, sizeof le);
      PpWait wait = { r->world, 0, pp_deadline_in_ms (start_timeout_ms),
        NULL, NULL
      };
      GError *error = NULL;

      G_STATIC_ASSERT (sizeof le == PP_LOAD_PROGRESS_BYTES);
      if (!pp_transport_send_bytes (&wait, PP_TAG_LOAD_PROGRESS, msg,
              "load progress", &error)) {
        /* Rank 0 is gone or stuck: the handshake reply finds out. */
        PP_WARN ("%s", error->message);
        g_error_free (error);
        return NULL;
      }
    }
    reported = now;
    g_mutex_lock (&r->lock);
  }
  g_mutex_unlock (&r->lock);
  return NULL;
}

static LoadReports *
load_reports_start (MPI_Comm world, guint timeout_ms)
{
  LoadReports *r = g_new0 (LoadReports, 1);

  r->world = world;
  r->period_ms = CLAMP (timeout_ms / 4, PP_LOAD_PROGRESS_MIN_MS,
      PP_LOAD_PROGRESS_MAX_MS);
  g_mutex_init (&r->lock);
  g_cond_init (&r->wake);
  r->thread = g_thread_new ("pp-load-reports", load_reports_run, r);
  return r;
}

/* Stops the reports; every report sent has left before it returns, so
 * none follows the handshake reply. */
static void
load_reports_stop (LoadReports * r)
{
  g_mutex_lock (&r->lock);
  r->stop = TRUE;
  g_cond_signal (&r->wake);
  g_mutex_unlock (&r->lock);
  g_thread_join (r->thread);
  g_cond_clear (&r->wake);
  g_mutex_clear (&r->lock);
  g_free (r);
}

/* The digest of a pipeline's UNet weights, made on a thread of its own
 * while the model loads (pp_weights_file_digest keeps it for the model's
 * own pp_weights_digest): the handshake then waits for the longer of the
 * two, not their sum.  NULL for a built-in model; errors are the
 * loader's to report. */
static gpointer
digest_ahead_thread (gpointer data)
{
  g_autofree gchar *model = data;
  g_autofree gchar *unet_dir = g_build_filename (model, "unet", NULL);
  /* A single-file checkpoint's digest is the whole file's. */
  g_autofree gchar *path = pp_checkpoint_is_file (model) ? g_strdup (model)
      : pp_model_dir_weights_path (unet_dir, NULL);

  if (path != NULL)
    g_free (pp_weights_file_digest (path, NULL));
  return NULL;
}

static GThread *
digest_ahead_start (const gchar * uri)
{
  g_autofree gchar *dir = NULL;

  if (pp_model_uri_is_builtin (uri))
    return NULL;
  dir = g_strndup (uri, strcspn (uri, "?"));
  return g_thread_new ("pp-digest-ahead", digest_ahead_thread,
      g_steal_pointer (&dir));
}

/* The mesh's doorbells when rank 0 is on this host (pp-bells.h), mapped
 * before the reply (rank 0 unlinks their name once every reply is in),
 * and their chunk lanes (pp-lanes.h) joined. */
static void
open_bells (Worker * w, const gchar * name)
{
  g_autoptr (GError) error = NULL;
  PpBells *bells;

  if (!pp_proc_is_local (w->rank0_host))
    return;
  bells = pp_bells_open (name, w->plan->n_workers + 1, &error);
  if (bells == NULL) {
    PP_INFO ("no doorbells (%s): waits poll", error->message);
    return;
  }
  if (pp_bells_lanes (bells) != NULL)
    pp_lanes_join (pp_bells_lanes (bells), (guint) w->rank);
  pp_bells_attach (w->world, bells);
}

static void
do_handshake (Worker * w)
{
  PpWait wait = { w->world, 0, pp_deadline_in_ms (start_timeout_ms),
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
  if (g_bytes_get_size (hello) == PP_HELLO_CANCEL_BYTES) {
    /* Rank 0 gave up on this start before the spawn completed. */
    PP_WARN ("%s; exiting", PP_WORKER_CANCELLED_TEXT);
    fflush (stderr);
    _exit (PP_WORKER_EXIT_FAILURE);
  }
  w->plan = pp_handshake_hello_parse (hello, &w->rank0_pid, &w->rank0_host,
      &options, &error);
  w->dump_dir = g_steal_pointer (&options.dump_dir);
  if (w->plan != NULL && options.bells != NULL)
    open_bells (w, options.bells);
  pp_hello_options_clear (&options);
  if (w->plan != NULL && w->rank > (gint) w->plan->n_workers)
    g_set_error (&error, PP_ERROR, PP_ERROR_PROTOCOL,
        "rank %d is outside a plan of %u workers", w->rank,
        w->plan->n_workers);
  if (error == NULL) {
    /* Rank 0 counts as the first rank of its host. */
    const gint local_rank = w->node_rank
        + (pp_proc_is_local (w->rank0_host) ? 1 : 0);

    w->slice = w->plan->slices[w->rank - 1];
    w->backend = pp_backend_get_local (w->plan->backend, local_rank, &error);
    if (w->backend != NULL)
      PP_INFO ("node-local rank %d: backend %s on %s", local_rank,
          pp_backend_name (w->backend), pp_backend_device (w->backend));
  }
  /* The plan's data plane must be one this build and backend can run
   * (the NCCL table there, the emulated one only on host memory). */
  if (error == NULL && pp_plan_uses_nccl (w->plan)
      && pp_data_plane_api (w->plan->data_plane, w->world, &error) != NULL
      && g_str_equal (w->plan->data_plane, PP_DATA_PLANE_NCCL_EMULATED)
      && !g_str_equal (pp_backend_name (w->backend), PP_BACKEND_CPU))
    g_set_error (&error, PP_ERROR, PP_ERROR_CONFIG, "the emulated NCCL data "
        "plane needs the cpu backend, not %s", pp_backend_name (w->backend));
  if (error == NULL) {
    LoadReports *reports = load_reports_start (w->world, w->plan->timeout_ms);
    GThread *ahead;
    gint64 t0, t1;

    if (hooks != NULL)
      hooks->model_load ();
    t0 = g_get_monotonic_time ();
    ahead = digest_ahead_start (w->plan->model);
    w->model = pp_model_new (w->plan->model, w->plan->n_steps,
        PP_MODEL_ROLE_STEPS, w->backend, &error);
    t1 = g_get_monotonic_time ();
    if (ahead != NULL)
      g_thread_join (ahead);
    if (w->model != NULL)
      digest = pp_model_digest (w->model);
    load_reports_stop (reports);
    if (w->model != NULL)
      PP_INFO ("model loaded in %.2f s, its weights' digest (made beside "
          "the load) %.2f s after it", (t1 - t0) / 1e6,
          (g_get_monotonic_time () - t1) / 1e6);
  }
  if (error == NULL) {
    if (hooks != NULL)
      hooks->model_digest (digest);
    parity = pp_parity_local (digest, &w->plan->plan_id, w->backend,
        w->plan->model);
    g_hash_table_insert (parity, g_strdup (PP_PARITY_DATA_PLANE),
        g_strdup (w->plan->data_plane));
  }
  reply = pp_handshake_reply_new (w->plan ? w->plan->plan_id : 0, w->rank,
      error ? error->message : NULL, parity);
  wait.deadline_us = pp_deadline_in_ms (start_timeout_ms);
  if (!pp_transport_send_bytes (&wait, PP_TAG_HANDSHAKE_REPLY, reply,
          "handshake reply", error ? NULL : &error) || error != NULL)
    worker_fail (w, "handshake", error);
  plan_text = pp_plan_describe (w->plan);
  PP_INFO ("rank %d runs steps [%u,%u) of %s", w->rank, w->slice.first,
      w->slice.end, plan_text);
}

/* This worker's NCCL links (from the previous rank, to the next), made
 * in the order every rank makes its links, under timeout-ms and rank 0's
 * liveness. */
static void
connect_planes (Worker * w)
{
  PpWait wait = { w->world, 0, worker_deadline (w), rank0_alive, w };
  GError *error = NULL;

  if (!pp_nccl_links_connect (w->planes, w->plan, w->world, w->rank,
          w->backend, &wait, &error))
    worker_fail (w, "NCCL set-up", error);
  pp_chunk_link_set_data_plane (w->from_prev,
      pp_nccl_links_from_prev (w->planes));
  pp_chunk_link_set_data_plane (w->to_next,
      pp_nccl_links_to_next (w->planes));
}

/* Liveness, the worker's side: rank 0 is its one peer. */
static void
poll_point (gpointer data)
{
  if (hooks != NULL)
    hooks->freeze_point ();
}

/* Until the shutdown marker came: after it rank 0 may stop its
 * heartbeats first. */
static gboolean
watching (gpointer data)
{
  Worker *w = data;

  return pp_liveness_state (w->liveness) != PP_WORK_DONE;
}

static void
rank0_dead (gpointer data, guint index, PpPeerVerdict verdict,
    const PpHeartbeat * last, gint64 silent_us)
{
  Worker *w = data;
  GError *error = NULL;

  g_set_error (&error, PP_ERROR, PP_ERROR_TIMEOUT,
      "no heartbeat from rank 0 (pid %" G_GINT64_FORMAT " on %s) for %"
      G_GINT64_FORMAT " ms: the application has gone", w->rank0_pid,
      w->rank0_host, silent_us / 1000);
  worker_fail (w, "heartbeat", error);
}

static void
heartbeats_broken (gpointer data, const GError * error)
{
  worker_fail (data, "heartbeat", error);
}

static PpLiveness *
worker_liveness_new (Worker * w)
{
  static const PpLivenessCallbacks callbacks = {
    poll_point, watching, rank0_dead, heartbeats_broken
  };
  const gint rank0 = 0;

  return pp_liveness_new (w->world, w->rank, &rank0, 1, w->plan->timeout_ms,
      TRUE, &callbacks, w);
}

/* MPI_Init_thread and MPI_Intercomm_merge have no timeout of their own:
 * until the handshake is done, this thread ends the process after
 * start_timeout_ms. */
static gint started;

static gpointer
start_watchdog (gpointer data)
{
  gint64 deadline = pp_deadline_in_ms (start_timeout_ms);
  guint64 progress = pp_weights_load_progress ();

  while (!g_atomic_int_get (&started)) {
    if (pp_weights_load_progress () != progress) {
      progress = pp_weights_load_progress ();
      deadline = pp_deadline_in_ms (start_timeout_ms);
    }
    if (g_get_monotonic_time () > deadline) {
      fprintf (stderr, "ppdiffuse-worker: MPI start-up and handshake did "
          "not finish within %u ms (of no progress loading the model); "
          "exiting\n", start_timeout_ms);
      fflush (stderr);
      _exit (PP_WORKER_EXIT_FAILURE);
    }
    g_usleep (PP_WORKER_START_POLL_US);
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

/* This worker's rank among the workers on its host (MPI_Comm_split_type
 * over the workers, who all reach this point right after start-up, under
 * the start watchdog): a GPU backend picks its device from it. */
static gboolean
node_rank (gint * rank, GError ** error)
{
  MPI_Comm node = MPI_COMM_NULL;

  if (!pp_mpi_check (MPI_Comm_split_type (MPI_COMM_WORLD,
              MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node),
          "MPI_Comm_split_type (the workers of this host)", error))
    return FALSE;
  MPI_Comm_rank (node, rank);
  MPI_Comm_free (&node);
  return TRUE;
}

int
main (int argc, char **argv)
{
  Worker w = { 0 };
  GThread *receiver, *sender;
  int provided = 0, world_size = 0;
  guint depth, late_ms;
  GError *error = NULL;

  g_log_set_writer_func (log_writer, NULL, NULL);
  w.world = MPI_COMM_NULL;
  fatal_worker = &w;
  if (pp_worker_answer_probe (argc, argv))
    return 0;
  start_timeout_ms = pp_worker_start_timeout_arg (argc, argv,
      PP_WORKER_HELLO_TIMEOUT_MS);
  g_mutex_init (&w.pace_lock);
  if (hooks != NULL)
    hooks->before_mpi_init ();
  g_thread_unref (g_thread_new ("pp-start-watchdog", start_watchdog, NULL));
  if (MPI_Init_thread (&argc, &argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS
      || provided < MPI_THREAD_MULTIPLE) {
    fprintf (stderr, "ppdiffuse-worker: MPI_THREAD_MULTIPLE is not available "
        "(got level %d)\n", provided);
    return 2;
  }
  pp_ompi_help_here (NULL);
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
  if (!node_rank (&w.node_rank, &error))
    worker_fail (&w, "start", error);
  MPI_Comm_rank (w.world, &w.rank);
  MPI_Comm_size (w.world, &world_size);
  pp_log_set_rank (w.rank);
  if (hooks != NULL)
    hooks->init (w.rank);
  else
    pp_fault_injection_check ();
  w.deadlines = pp_liveness_watchdog_enabled ();
  do_handshake (&w);
  g_atomic_int_set (&started, 1);

  /* Each queue holds a whole frame batch: its chunks join from the
   * in-queue and leave a pass together. */
  depth = MAX (PP_WORKER_QUEUE_DEPTH, w.model->frame_batch);
  w.in = pp_queue_new (depth);
  w.out = pp_queue_new (depth);
  /* Over NCCL the chunks live on the backend's device, received there and
   * handed to the model without a host round trip.  The most chunks a
   * worker holds at once: both queues full, and those of its threads. */
  w.from_prev = pp_chunk_link_new_on (2 * depth
      + PP_WORKER_CHUNKS_IN_THREADS + batch_held (&w),
      pp_plan_uses_nccl (w.plan) ? w.backend : NULL);
  w.to_next = pp_chunk_link_new (0);
  if (pp_plan_uses_nccl (w.plan))
    w.planes = pp_nccl_links_new ();
  w.liveness = worker_liveness_new (&w);
  pp_liveness_start (w.liveness);
  if (w.planes != NULL)
    connect_planes (&w);
  receiver = g_thread_new ("pp-receiver", receiver_thread, &w);
  sender = g_thread_new ("pp-sender", sender_thread, &w);
  compute_loop (&w);
  g_thread_join (receiver);
  g_thread_join (sender);
  /* The clean end of the links: finalize and destroy, nothing in flight. */
  if (w.planes != NULL) {
    PpWait wait = { w.world, 0, pp_deadline_in_ms (w.plan->timeout_ms), NULL,
      NULL
    };

    if (!pp_nccl_links_close (w.planes, &wait, &error))
      worker_fail (&w, "shutdown", error);
  }
  /* What the links carried, while rank 0 still reads this worker's
   * output: after the farewell its log may have stopped. */
  pp_chunk_link_report (w.from_prev);
  pp_chunk_link_report (w.to_next);
  /* A heartbeat still in flight at the clean end: rank 0 drains it, or
   * MPI_Finalize does; its buffer stays alive until the process ends. */
  pp_liveness_stop (w.liveness);

  g_thread_unref (g_thread_new ("pp-exit-watchdog", exit_watchdog, NULL));
  /* The last of this rank's heartbeats: rank 0 frees the communicator
   * once it has it (pp-liveness.h). */
  late_ms = hooks != NULL ? hooks->late_beat_ms () : 0;
  if (late_ms > 0) {
    g_usleep ((gulong) late_ms * 1000);
    pp_liveness_beat_now (w.liveness);
  }
  pp_liveness_farewell (w.liveness);
  MPI_Comm_free (&w.world);
  MPI_Comm_disconnect (&w.parent);
  MPI_Finalize ();
  PP_INFO ("exited cleanly");
  pp_queue_free (w.in, (GDestroyNotify) pp_chunk_free);
  pp_queue_free (w.out, (GDestroyNotify) pp_chunk_free);
  pp_chunk_link_free (w.from_prev);
  pp_chunk_link_free (w.to_next);
  pp_nccl_links_free (w.planes);
  pp_liveness_free (w.liveness);
  pp_model_free (w.model);
  pp_plan_free (w.plan);
  g_free (w.rank0_host);
  g_free (w.dump_dir);
  g_clear_pointer (&w.applied_settings, g_bytes_unref);
  return 0;
}
