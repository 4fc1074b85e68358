/* GStreamer ppdiffuse — progress messages and statistics
 * (gstppdiffuse-live.h). */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstppdiffuse-live.h"
#include "gstppdiffuse-stats.h"

#include <string.h>

GST_DEBUG_CATEGORY_EXTERN (gst_pp_diffuse_debug);
#define GST_CAT_DEFAULT gst_pp_diffuse_debug

/* Where each stage of a start puts the progress, in percent: the
 * handshakes share what lies between the spawn and the mesh being up. */
#define PROGRESS_LOADING_MODEL 5
#define PROGRESS_SPAWNING 20
#define PROGRESS_HANDSHAKES_DONE 95

/* ---- progress ---------------------------------------------------------- */

static void
post_progress (GstPpDiffuse * self, GstProgressType type, gint percent,
    const gchar * text)
{
  GstMessage *msg = gst_message_new_progress (GST_OBJECT (self), type,
      GST_PP_DIFFUSE_PROGRESS_CODE, text);

  /* As other elements extend theirs: the structure's "percent". */
  if (percent >= 0)
    gst_structure_set (gst_message_writable_structure (msg), "percent",
        G_TYPE_INT, percent, NULL);
  GST_DEBUG_OBJECT (self, "progress %d%%: %s", percent, text);
  gst_element_post_message (GST_ELEMENT (self), msg);
}

void
gst_pp_diffuse_progress_start (GstPpDiffuse * self)
{
  post_progress (self, GST_PROGRESS_TYPE_START, 0,
      "starting the ppdiffuse worker mesh");
  gst_pp_diffuse_progress_continue (self, PROGRESS_LOADING_MODEL,
      "loading model");
}

void
gst_pp_diffuse_progress_continue (GstPpDiffuse * self, gint percent,
    const gchar * format, ...)
{
  g_autofree gchar *text = NULL;
  va_list args;

  va_start (args, format);
  text = g_strdup_vprintf (format, args);
  va_end (args);
  post_progress (self, GST_PROGRESS_TYPE_CONTINUE, percent, text);
}

void
gst_pp_diffuse_progress_complete (GstPpDiffuse * self)
{
  post_progress (self, GST_PROGRESS_TYPE_COMPLETE, 100,
      "the ppdiffuse worker mesh is up");
}

void
gst_pp_diffuse_progress_error (GstPpDiffuse * self, const gchar * text)
{
  post_progress (self, GST_PROGRESS_TYPE_ERROR, -1, text);
}

void
gst_pp_diffuse_mesh_progress (PpStreamProgress stage, guint rank,
    guint n_workers, guint64 loaded_bytes, gpointer data)
{
  GstPpDiffuse *self = data;
  const gint span = PROGRESS_HANDSHAKES_DONE - PROGRESS_SPAWNING;

  switch (stage) {
    case PP_STREAM_PROGRESS_SPAWNING:
      gst_pp_diffuse_progress_continue (self, PROGRESS_SPAWNING,
          "starting %u workers", n_workers);
      break;
    case PP_STREAM_PROGRESS_WAITING:
      gst_pp_diffuse_progress_continue (self, PROGRESS_SPAWNING
          + span * (gint) (rank - 1) / (gint) n_workers,
          "waiting for rank %u", rank);
      break;
    case PP_STREAM_PROGRESS_LOADING:
      gst_pp_diffuse_progress_continue (self, PROGRESS_SPAWNING
          + span * (gint) (rank - 1) / (gint) n_workers,
          "rank %u loading its model: %.1f MB of weights read or digested",
          rank, loaded_bytes / 1e6);
      break;
    case PP_STREAM_PROGRESS_RANK_READY:
      gst_pp_diffuse_progress_continue (self, PROGRESS_SPAWNING
          + span * (gint) rank / (gint) n_workers, "rank %u ready", rank);
      break;
  }
}

/* ---- statistics -------------------------------------------------------- */

/* What an interval found, as the stats carry it. */
typedef struct
{
  PpLatencySummary latency;
  gdouble fps;
  guint n_workers;
  gdouble busy[PP_STREAM_MAX_WORKERS];    /* fraction of the interval */
  gdouble overlap;
  /* cumulative, as the workers' heartbeats told it at the interval's end */
  PpStreamWorkerCounts counts[PP_STREAM_MAX_WORKERS];
  /* CPU time a second (1.0: a core's worth): rank 0's process over the
   * interval, each worker's between its last two heartbeats */
  gdouble cpu_load;
  gdouble worker_cpu[PP_STREAM_MAX_WORKERS];
} Interval;

/* A worker's heartbeat that said its CPU time. */
typedef struct
{
  guint64 seq;
  guint64 cpu_us;
  gint64 heard_us;
} CpuBeat;

struct _GstPpDiffuseStatsTimer
{
  GstPpDiffuse *self;           /* not a reference: joined in stop */
  GThread *thread;
  GMutex lock;
  GCond cond;
  gboolean stop;                /* under lock */
  gboolean running;             /* under lock: a mesh is up */
  Interval last;                /* under lock: the last completed one */

  /* Interval thread only: where the current interval started. */
  gint64 since_us;
  guint64 frames_out;
  gdouble busy_s[PP_STREAM_MAX_WORKERS];  /* cumulative, never decreasing */
  guint64 cpu_us;               /* rank 0's process */
  CpuBeat beat[PP_STREAM_MAX_WORKERS];    /* the last one seen */
  gdouble worker_cpu[PP_STREAM_MAX_WORKERS];      /* the last rate */
};

/* Worker @i's CPU load between the heartbeat @c came in and the one
 * before it that the timer saw: a heartbeat comes every timeout-ms / 4,
 * more seldom than the intervals, so the load is over the last two
 * heartbeats, not over the interval.  Interval thread. */
static gdouble
worker_cpu_load (GstPpDiffuseStatsTimer * timer, guint i,
    const PpStreamWorkerCounts * c)
{
  CpuBeat *last = &timer->beat[i];

  /* None said yet, or the one already seen (a worker's first heartbeat
   * is its sequence number 0; none seen, cpu_us is 0). */
  if (c->cpu_us == 0 || (last->cpu_us != 0 && c->seq == last->seq))
    return timer->worker_cpu[i];
  if (last->cpu_us != 0 && c->heard_us > last->heard_us
      && c->cpu_us >= last->cpu_us)
    timer->worker_cpu[i] = (gdouble) (c->cpu_us - last->cpu_us)
        / (gdouble) (c->heard_us - last->heard_us);
  last->seq = c->seq;
  last->cpu_us = c->cpu_us;
  last->heard_us = c->heard_us;
  return timer->worker_cpu[i];
}

GstPpDiffuseStatsTimer *
gst_pp_diffuse_stats_timer_new (GstPpDiffuse * self)
{
  GstPpDiffuseStatsTimer *timer = g_new0 (GstPpDiffuseStatsTimer, 1);

  timer->self = self;
  g_mutex_init (&timer->lock);
  g_cond_init (&timer->cond);
  return timer;
}

void
gst_pp_diffuse_stats_timer_free (GstPpDiffuseStatsTimer * timer)
{
  gst_pp_diffuse_stats_timer_stop (timer);
  g_mutex_clear (&timer->lock);
  g_cond_clear (&timer->cond);
  g_free (timer);
}

/* Closes the interval that started at since_us: takes its latencies from
 * the tracker (which starts the next one empty) and the workers' busy
 * time from their heartbeats.  Interval thread. */
static void
close_interval (GstPpDiffuseStatsTimer * timer, Interval * iv)
{
  GstPpDiffuse *self = timer->self;
  const gint64 now = g_get_monotonic_time ();
  const gdouble elapsed_s = MAX (now - timer->since_us, 1) / 1e6;
  gdouble busy_s[PP_STREAM_MAX_WORKERS];
  const guint64 cpu_us = pp_stream_rank0_cpu_us ();
  guint64 frames_out;
  gdouble sum = 0;

  g_mutex_lock (&self->lock);
  pp_latency_tracker_end_interval (self->latencies, &iv->latency);
  frames_out = self->frames_out;
  g_mutex_unlock (&self->lock);
  iv->fps = (frames_out - timer->frames_out) / elapsed_s;
  iv->n_workers = MIN (pp_stream_worker_busy (self->stream, busy_s,
          PP_STREAM_MAX_WORKERS), PP_STREAM_MAX_WORKERS);
  for (guint i = 0; i < iv->n_workers; i++) {
    /* A heartbeat's compute in progress counts up to now; when it ended
     * sooner the next heartbeat says less: hold the larger sum. */
    const gdouble cumulative = MAX (busy_s[i], timer->busy_s[i]);

    iv->busy[i] = CLAMP ((cumulative - timer->busy_s[i]) / elapsed_s, 0, 1);
    timer->busy_s[i] = cumulative;
    sum += iv->busy[i];
  }
  iv->overlap = iv->n_workers ? sum / iv->n_workers : 0;
  pp_stream_worker_counts (self->stream, iv->counts, iv->n_workers);
  for (guint i = 0; i < iv->n_workers; i++)
    iv->worker_cpu[i] = worker_cpu_load (timer, i, &iv->counts[i]);
  iv->cpu_load = cpu_us >= timer->cpu_us
      ? (cpu_us - timer->cpu_us) / (elapsed_s * 1e6) : 0;
  timer->cpu_us = cpu_us;
  timer->frames_out = frames_out;
  timer->since_us = now;
}

static guint
interval_ms (GstPpDiffuse * self)
{
  guint ms;

  GST_OBJECT_LOCK (self);
  ms = self->stats_interval_ms;
  GST_OBJECT_UNLOCK (self);
  return ms;
}

static gpointer
stats_thread (gpointer data)
{
  GstPpDiffuseStatsTimer *timer = data;
  GstPpDiffuse *self = timer->self;

  g_mutex_lock (&timer->lock);
  while (!timer->stop) {
    const guint ms = interval_ms (self);
    gboolean failed;
    Interval iv;

    if (ms == 0) {
      /* Off: wait for the property or the stop. */
      g_cond_wait (&timer->cond, &timer->lock);
      timer->since_us = g_get_monotonic_time ();
      continue;
    }
    if (g_get_monotonic_time () < timer->since_us + (gint64) ms * 1000) {
      g_cond_wait_until (&timer->cond, &timer->lock,
          timer->since_us + (gint64) ms * 1000);
      continue;                 /* woken: the stop, or another interval */
    }
    g_mutex_unlock (&timer->lock);
    close_interval (timer, &iv);
    g_mutex_lock (&self->lock);
    failed = self->mesh_failed;
    g_mutex_unlock (&self->lock);
    g_mutex_lock (&timer->lock);
    timer->last = iv;
    g_mutex_unlock (&timer->lock);
    if (!failed)
      gst_element_post_message (GST_ELEMENT (self),
          gst_message_new_element (GST_OBJECT (self),
              gst_pp_diffuse_stats_structure (self)));
    g_mutex_lock (&timer->lock);
  }
  g_mutex_unlock (&timer->lock);
  return NULL;
}

void
gst_pp_diffuse_stats_timer_start (GstPpDiffuseStatsTimer * timer,
    guint n_workers)
{
  g_return_if_fail (timer->thread == NULL);
  g_mutex_lock (&timer->lock);
  memset (&timer->last, 0, sizeof timer->last);
  timer->last.n_workers = MIN (n_workers, PP_STREAM_MAX_WORKERS);
  memset (timer->busy_s, 0, sizeof timer->busy_s);
  memset (timer->beat, 0, sizeof timer->beat);
  memset (timer->worker_cpu, 0, sizeof timer->worker_cpu);
  timer->cpu_us = pp_stream_rank0_cpu_us ();
  timer->frames_out = 0;
  timer->since_us = g_get_monotonic_time ();
  timer->stop = FALSE;
  timer->running = TRUE;
  g_mutex_unlock (&timer->lock);
  timer->thread = g_thread_new ("ppdiffuse-stats", stats_thread, timer);
}

void
gst_pp_diffuse_stats_timer_stop (GstPpDiffuseStatsTimer * timer)
{
  if (timer->thread == NULL)
    return;
  g_mutex_lock (&timer->lock);
  timer->stop = TRUE;
  timer->running = FALSE;
  g_cond_broadcast (&timer->cond);
  g_mutex_unlock (&timer->lock);
  g_thread_join (g_steal_pointer (&timer->thread));
}

void
gst_pp_diffuse_stats_timer_wake (GstPpDiffuseStatsTimer * timer)
{
  g_mutex_lock (&timer->lock);
  g_cond_broadcast (&timer->cond);
  g_mutex_unlock (&timer->lock);
}

/* @array: a GstValueArray of the @n values. */
static void
u64_array (GValue * array, const PpStreamWorkerCounts * counts, guint n,
    gsize field)
{
  gst_value_array_init (array, n);
  for (guint i = 0; i < n; i++) {
    GValue v = G_VALUE_INIT;

    g_value_init (&v, G_TYPE_UINT64);
    g_value_set_uint64 (&v, G_STRUCT_MEMBER (guint64, &counts[i], field));
    gst_value_array_append_and_take_value (array, &v);
  }
}

/* @array: a GstValueArray of the @n values. */
static void
double_array (GValue * array, const gdouble * values, guint n)
{
  gst_value_array_init (array, n);
  for (guint i = 0; i < n; i++) {
    GValue v = G_VALUE_INIT;

    g_value_init (&v, G_TYPE_DOUBLE);
    g_value_set_double (&v, values[i]);
    gst_value_array_append_and_take_value (array, &v);
  }
}

GstStructure *
gst_pp_diffuse_stats_structure (GstPpDiffuse * self)
{
  GstPpDiffuseStatsTimer *timer = self->stats_timer;
  PpLatencySummary total;
  GValue busy = G_VALUE_INIT;
  GValue builds = G_VALUE_INIT;
  GValue bank = G_VALUE_INIT;
  GValue batched = G_VALUE_INIT;
  GValue cpu = G_VALUE_INIT;
  const gchar *device, *worker_devices[PP_STREAM_MAX_WORKERS];
  guint n_devices;
  GValue workers = G_VALUE_INIT;
  GstStructure *s;
  gboolean running;
  PpStreamStats last;
  Interval iv;

  g_mutex_lock (&timer->lock);
  iv = timer->last;
  running = timer->running;
  g_mutex_unlock (&timer->lock);

  double_array (&busy, iv.busy, iv.n_workers);
  u64_array (&builds, iv.counts, iv.n_workers,
      G_STRUCT_OFFSET (PpStreamWorkerCounts, cache_builds));
  u64_array (&bank, iv.counts, iv.n_workers,
      G_STRUCT_OFFSET (PpStreamWorkerCounts, stream_bytes));
  u64_array (&batched, iv.counts, iv.n_workers,
      G_STRUCT_OFFSET (PpStreamWorkerCounts, batched_steps));
  double_array (&cpu, iv.worker_cpu, iv.n_workers);

  pp_stream_last_stats (self->stream, &last);
  device = pp_stream_device (self->stream);
  n_devices = pp_stream_worker_devices (self->stream, worker_devices,
      PP_STREAM_MAX_WORKERS);
  /* Interned: no copy of ours at each interval (the frame-allocations
   * check counts the stats thread's too). */
  gst_value_array_init (&workers, n_devices);
  for (guint i = 0; i < n_devices; i++) {
    GValue v = G_VALUE_INIT;

    g_value_init (&v, G_TYPE_STRING);
    g_value_set_interned_string (&v, worker_devices[i]);
    gst_value_array_append_and_take_value (&workers, &v);
  }
  g_mutex_lock (&self->lock);
  pp_latency_tracker_total (self->latencies, &total);
  s = gst_structure_new (GST_PP_DIFFUSE_STATS_NAME,
      "frames-in", G_TYPE_UINT64, self->frames_in,
      "frames-out", G_TYPE_UINT64, self->frames_out,
      "fps", G_TYPE_DOUBLE, iv.fps,
      "latency", G_TYPE_UINT64, (guint64) self->latency,
      "latency-p50", G_TYPE_UINT64, iv.latency.p50,
      "latency-p95", G_TYPE_UINT64, iv.latency.p95,
      "latency-p99", G_TYPE_UINT64, iv.latency.p99,
      "latency-max", G_TYPE_UINT64, iv.latency.max,
      "latency-p50-total", G_TYPE_UINT64, total.p50,
      "latency-p95-total", G_TYPE_UINT64, total.p95,
      "latency-p99-total", G_TYPE_UINT64, total.p99,
      "latency-max-total", G_TYPE_UINT64, total.max,
      "in-flight", G_TYPE_UINT, self->in_flight,
      "overlap-score", G_TYPE_DOUBLE,
      running ? iv.overlap : last.overlap,
      "dropped-flush", G_TYPE_UINT64, self->dropped_flush,
      "dropped-error", G_TYPE_UINT64, self->dropped_error,
      "dropped-qos", G_TYPE_UINT64, self->dropped_qos,
      "dropped-leaky", G_TYPE_UINT64, self->dropped_leaky,
      "skipped-similar", G_TYPE_UINT64, self->skipped_similar,
      "cache-epoch", G_TYPE_UINT, pp_stream_cache_epoch (self->stream),
      "mesh-chunks", G_TYPE_UINT64, last.chunks,
      "mesh-wall-s", G_TYPE_DOUBLE, last.wall_s,
      "warm-up-passes", G_TYPE_UINT64, last.warm_ups,
      "cpu-load", G_TYPE_DOUBLE, iv.cpu_load,
      "device", G_TYPE_STRING, device != NULL ? device : "", NULL);
  g_mutex_unlock (&self->lock);
  gst_structure_take_value (s, "worker-busy", &busy);
  gst_structure_take_value (s, "kv-cache-builds", &builds);
  gst_structure_take_value (s, "bank-bytes", &bank);
  gst_structure_take_value (s, "batched-steps", &batched);
  gst_structure_take_value (s, "worker-cpu-load", &cpu);
  gst_structure_take_value (s, "worker-devices", &workers);
  return s;
}

/* ---- the engine's log ------------------------------------------------- */

/* Mesh log lines go to our debug category. */
static void
mesh_log (PpLogLevel level, const gchar * message, gpointer user_data)
{
  static const GstDebugLevel map[] = { GST_LEVEL_NONE, GST_LEVEL_ERROR,
    GST_LEVEL_WARNING, GST_LEVEL_INFO, GST_LEVEL_DEBUG, GST_LEVEL_LOG
  };

  GST_CAT_LEVEL_LOG (gst_pp_diffuse_debug, map[level], NULL, "rank 0: %s",
      message);
}

/* Mesh messages are only formatted when our category would show them. */
void
gst_pp_diffuse_log_follow_threshold (void)
{
  GstDebugLevel t = gst_debug_category_get_threshold (gst_pp_diffuse_debug);
  PpLogLevel level = t >= GST_LEVEL_LOG ? PP_LOG_TRACE
      : t >= GST_LEVEL_DEBUG ? PP_LOG_DEBUG
      : t >= GST_LEVEL_INFO ? PP_LOG_INFO
      : t >= GST_LEVEL_WARNING ? PP_LOG_WARNING : PP_LOG_ERROR;

  pp_log_set_handler (mesh_log, NULL, level);
}
