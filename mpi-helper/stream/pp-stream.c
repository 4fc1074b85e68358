/* ppdiffuse — rank 0's stream engine: the start, reuse and stop of the
 * mesh and of rank 0's model, frames into chunks and back, the warm-up
 * passes and the collector thread.  Settings: pp-stream-settings.c. */
#include "pp-stream-private.h"

#include "pp-log.h"
#include "pp-proc.h"
#include "pp-sigpipe.h"

#include <string.h>
#include <unistd.h>

G_STATIC_ASSERT (PP_STREAM_MAX_WORKERS == PP_MESH_MAX_WORKERS);
G_STATIC_ASSERT ((gint) PP_STREAM_PROGRESS_SPAWNING
    == (gint) PP_MESH_PROGRESS_SPAWNING);
G_STATIC_ASSERT ((gint) PP_STREAM_PROGRESS_WAITING
    == (gint) PP_MESH_PROGRESS_WAITING);
G_STATIC_ASSERT ((gint) PP_STREAM_PROGRESS_LOADING
    == (gint) PP_MESH_PROGRESS_LOADING);
G_STATIC_ASSERT ((gint) PP_STREAM_PROGRESS_RANK_READY
    == (gint) PP_MESH_PROGRESS_RANK_READY);

/* A frame is the chunk it was encoded into. */
#define FRAME_CHUNK(f) ((PpChunk *) (f))
#define CHUNK_FRAME(c) ((PpStreamFrame *) (c))

PpStream *
pp_stream_new (const PpStreamCallbacks * callbacks, gpointer data)
{
  PpStream *stream = g_new0 (PpStream, 1);

  stream->cb = *callbacks;
  stream->data = data;
  g_mutex_init (&stream->lock);
  g_cond_init (&stream->cond);
  g_cond_init (&stream->settings_cond);
  stream->prompt = pp_stream_prompt_new ();
  return stream;
}

void
pp_stream_free (PpStream * stream)
{
  if (stream == NULL)
    return;
  pp_stream_halt (stream, FALSE);
  pp_stream_release (stream);
  pp_stream_prompt_free (stream->prompt);
  pp_stream_settings_free (stream->running);
  g_free (stream->vae);
  g_free (stream->lora);
  g_free (stream->dtype);
  g_mutex_clear (&stream->lock);
  g_cond_clear (&stream->cond);
  g_cond_clear (&stream->settings_cond);
  g_free (stream);
}

gboolean
pp_stream_running (PpStream * stream)
{
  return stream->mesh != NULL;
}

/* ---- collector thread: chunks back from the mesh ----------------------- */

static gpointer
collector_loop (gpointer data)
{
  PpStream *stream = data;

  g_mutex_lock (&stream->lock);
  for (;;) {
    GError *error = NULL;
    PpChunk *chunk;

    while (!stream->collector_stop && stream->outstanding == 0)
      g_cond_wait (&stream->cond, &stream->lock);
    if (stream->collector_stop)
      break;
    g_mutex_unlock (&stream->lock);
    chunk = pp_mesh_collect (stream->mesh, &error);
    g_mutex_lock (&stream->lock);
    if (chunk == NULL) {
      const guint outstanding = stream->outstanding;

      stream->failed = TRUE;
      g_cond_broadcast (&stream->cond);
      g_mutex_unlock (&stream->lock);
      stream->cb.failed (error, outstanding, stream->data);
      g_error_free (error);
      return NULL;
    }
    stream->outstanding--;
    g_cond_broadcast (&stream->cond);
    g_mutex_unlock (&stream->lock);
    /* Without a warm-up pass, the first frame back is the first measure. */
    if (g_atomic_int_compare_and_exchange (&stream->measured, 0, 1))
      stream->cb.measured (stream->data);
    stream->cb.returned (CHUNK_FRAME (chunk), stream->data);
    g_mutex_lock (&stream->lock);
  }
  g_mutex_unlock (&stream->lock);
  return NULL;
}

/* ---- start, reuse, stop ----------------------------------------------- */

static const gchar *
or_none (const gchar * s)
{
  return s != NULL ? s : "";
}

/* What a mesh was started with, as one string: two starts can share a
 * mesh exactly when their keys are equal.  The settings are not in it:
 * the running model checks new ones itself. */
static gchar *
mesh_key (const PpMeshConfig * config)
{
  return g_strdup_printf ("ranks=%u steps=%u backend=%s worker=%s "
      "hosts=%s hostfile=%s timeout-ms=%u dump-dir=%s in-flight=%u",
      config->n_workers, config->n_steps, or_none (config->backend),
      or_none (config->worker_path), or_none (config->hosts),
      or_none (config->hostfile), config->timeout_ms,
      or_none (config->dump_dir), config->max_in_flight);
}

/* TRUE when the mesh kept from the last run serves a start of @key that
 * runs @settings (a live update with @inputs), and is still healthy.  A
 * kept mesh that does not is left for the caller to stop. */
static gboolean
mesh_reusable (PpStream * stream, const gchar * key,
    const PpSettings * settings, GPtrArray * inputs)
{
  GError *error = NULL;

  if (stream->mesh == NULL)
    return FALSE;
  if (g_strcmp0 (stream->mesh_key, key) != 0) {
    PP_INFO ("settings changed: the workers are spawned anew (was %s, "
        "now %s)", stream->mesh_key, key);
    return FALSE;
  }
  /* What rank 0's model keeps may be garbage after its backend failed
   * during its work: it is loaded again, with the mesh. */
  if (pp_model_spoiled (stream->model)) {
    PP_INFO ("rank 0's backend failed during the last stream: the model "
        "is loaded again and the workers are spawned anew");
    return FALSE;
  }
  /* The same model with the same start-only parameters: its live settings
   * go to every rank with the first frame. */
  if (!pp_model_check_update (stream->model, settings, inputs, &error)) {
    PP_INFO ("the model changed: the workers are spawned anew (%s)",
        error->message);
    g_error_free (error);
    return FALSE;
  }
  if (!pp_mesh_is_healthy (stream->mesh, &error)) {
    PP_WARN ("the kept worker mesh failed while idle, spawning it anew: %s",
        error->message);
    g_error_free (error);
    return FALSE;
  }
  PP_INFO ("reusing the worker mesh (%s)", key);
  return TRUE;
}

/* Rank 0's model for @resolved on @backend, its settings checked where
 * every rank would load them: a bad setting fails the start before any
 * worker is spawned. */
static PpModel *
model_new (const PpSettings * resolved, guint n_steps, PpBackend * backend,
    GPtrArray * inputs, GError ** error)
{
  PpModel *model = pp_model_new (resolved->model, n_steps,
      PP_MODEL_ROLE_IMAGE, backend, error);

  if (model != NULL && (!pp_model_check_update (model, resolved, inputs,
              error) || !pp_model_update (model, resolved, inputs, error)))
    g_clear_pointer (&model, pp_model_free);
  return model;
}

/* Names rank 0, this process, at the head of @error. */
static void
prefix_rank0 (GError ** error)
{
  g_prefix_error (error, "rank 0 (pid %d on %s): ", (gint) getpid (),
      g_get_host_name ());
}

/* Takes @backend back into use when a kept failure halted it, saying
 * so. */
static void
recover_backend (PpBackend * backend)
{
  g_autofree gchar *failure = NULL;

  if (pp_backend_recover (backend, &failure))
    PP_INFO ("backend %s (%s) is taken back into use after its failure "
        "(%s)", pp_backend_name (backend), pp_backend_device (backend),
        failure);
}

/* Rank 0's backend @name.  Rank 0 is the application's process, whose
 * life is not the backend's to end: a failure inside an op (a device out
 * of memory) halts the backend and fails the stream with its message
 * instead (pp_backend_keep_failures), and the next start takes a halted
 * backend back into use.  One whose device was lost stays halted: every
 * start fails at once with that failure, before anything is loaded.  Its
 * errors name rank 0. */
static PpBackend *
rank0_backend (const gchar * name, GError ** error)
{
  PpBackend *backend = pp_backend_get (name, error);

  if (backend != NULL) {
    pp_backend_keep_failures (backend);
    recover_backend (backend);
    if (!pp_backend_check (backend, pp_backend_failures (backend), error))
      backend = NULL;
  }
  if (backend == NULL)
    prefix_rank0 (error);
  return backend;
}

/* The backend of a start: as configured, else the best this build has.
 * auto passing over CUDA is only logged: the CPU on a machine without a
 * GPU is what auto is for; backend=cuda fails instead. */
static PpBackend *
start_backend (const gchar * name, GError ** error)
{
  PpBackend *backend = rank0_backend (name, error);

  if (backend == NULL)
    return NULL;
  if (name == NULL && pp_backend_auto_reason () != NULL)
    PP_INFO ("backend %s: %s; auto passed over CUDA: %s",
        pp_backend_name (backend), pp_backend_device (backend),
        pp_backend_auto_reason ());
  else
    PP_INFO ("backend %s: %s", pp_backend_name (backend),
        pp_backend_device (backend));
  return backend;
}

static void
mesh_progress (PpMeshProgress stage, guint rank, guint n_workers,
    guint64 loaded_bytes, gpointer data)
{
  PpStream *stream = data;

  if (stream->cb.progress != NULL)
    stream->cb.progress ((PpStreamProgress) stage, rank, n_workers,
        loaded_bytes, stream->data);
}

gboolean
pp_stream_start (PpStream * stream, const PpStreamConfig * sc,
    const PpSettings * settings, gboolean * reused, GError ** error)
{
  g_autofree gchar *key = NULL, *prompt_ref = NULL, *spec = NULL;
  g_autoptr (GPtrArray) inputs = NULL;
  PpMeshConfig config = { 0 };
  PpSettings resolved = { 0 };
  PpTensor *states = NULL;
  PpBackend *backend;

  config.n_workers = sc->n_workers;
  config.n_steps = sc->n_steps;
  config.backend = sc->backend;
  config.worker_path = sc->worker_path;
  config.hosts = sc->hosts;
  config.hostfile = sc->hostfile;
  config.dump_dir = sc->dump_dir;
  config.timeout_ms = sc->timeout_ms;
  config.max_in_flight = sc->max_in_flight;
  config.progress = mesh_progress;
  config.progress_data = stream;
  key = mesh_key (&config);
  g_free (stream->dtype);
  stream->dtype = g_strdup (sc->dtype);
  g_free (stream->vae);
  stream->vae = g_strdup (sc->vae);
  g_free (stream->lora);
  stream->lora = g_strdup (sc->lora);
  stream->cuda_graphs = sc->cuda_graphs;
  stream->stream_batch = sc->stream_batch;
  stream->frame_batch = sc->frame_batch;
  stream->timeout_ms = sc->timeout_ms;
  stream->warm_up = sc->warm_up;

  if (!pp_stream_check_prompt_model (settings, error))
    return FALSE;
  /* A text prompt is encoded before anything starts: the settings name
   * its states, the first chunk brings them to the workers. */
  if (pp_settings_has_prompt (settings)) {
    backend = rank0_backend (sc->backend, error);
    if (backend == NULL || !pp_stream_encode_prompt (stream, settings,
            backend, NULL, &states, &prompt_ref, error)) {
      /* A setting to change, whatever failed. */
      if (error != NULL && *error != NULL && !g_error_matches (*error,
              PP_ERROR, PP_ERROR_CONFIG)) {
        GError *e = g_error_new_literal (PP_ERROR, PP_ERROR_CONFIG,
            (*error)->message);

        g_clear_error (error);
        g_propagate_error (error, e);
      }
      return FALSE;
    }
    inputs = pp_stream_states_inputs (states);
  }
  pp_stream_resolve (stream, settings, prompt_ref, &resolved);
  /* The plan names only what to load; the settings go with the first
   * chunk. */
  config.model = resolved.model;
  /* A mesh kept by the last stop serves when nothing it was started with
   * changed; else it ends here. */
  *reused = mesh_reusable (stream, key, &resolved, inputs);
  if (!*reused) {
    pp_stream_halt (stream, FALSE);
    pp_stream_release (stream);
    backend = start_backend (sc->backend, error);
    if (backend != NULL) {
      /* The mesh and its workers use the very backend rank 0 resolved,
       * its device named ("cuda:1"): rank 0's data plane on the device
       * its model computes on, its host's workers on the ones after it. */
      config.backend = spec = pp_backend_spec (backend);
      stream->model = model_new (&resolved, config.n_steps, backend, inputs,
          error);
      g_mutex_lock (&stream->lock);
      stream->device = g_intern_string (pp_backend_device (backend));
      g_mutex_unlock (&stream->lock);
    }
    if (stream->model != NULL)
      stream->mesh = pp_mesh_start (&config, error);
    if (stream->mesh != NULL) {
      g_auto (GStrv) devices = pp_mesh_worker_devices (stream->mesh);

      g_mutex_lock (&stream->lock);
      stream->n_worker_devices = 0;
      for (guint i = 0; i < PP_STREAM_MAX_WORKERS && devices[i] != NULL; i++)
        stream->worker_devices[stream->n_worker_devices++] =
            g_intern_string (devices[i]);
      g_mutex_unlock (&stream->lock);
    }
    if (stream->mesh == NULL) {
      g_clear_pointer (&stream->model, pp_model_free);
      pp_tensor_free (states);
      pp_settings_clear (&resolved);
      return FALSE;
    }
    g_free (stream->mesh_key);
    stream->mesh_key = g_steal_pointer (&key);
    /* The warm-up passes are once per mesh. */
    stream->warmed_up = FALSE;
    g_atomic_int_set (&stream->measured, 0);
  } else {
    /* A reused mesh's workers start a new stream state; its model, not
     * spoiled, takes its backend back if another user's failure halted
     * it. */
    g_atomic_int_inc (&stream->cache_epoch);
    recover_backend (stream->model->backend);
  }
  stream->kept = FALSE;
  PP_INFO ("mesh up: %u workers, %u steps, %u chunks in flight at most",
      config.n_workers, config.n_steps, config.max_in_flight);

  /* The chain encodes one frame at a time, and its chunk is given back
   * once sent.  Over NCCL its tensors live on the device, where the
   * chunk's fence orders its send after the encoding. */
  stream->chunks = pp_chunk_pool_new_on (1,
      pp_mesh_data_plane_backend (stream->mesh));
  stream->sample_width = stream->sample_height = 0;
  g_mutex_lock (&stream->lock);
  stream->outstanding = 0;
  stream->collector_stop = FALSE;
  stream->failed = FALSE;
  g_mutex_unlock (&stream->lock);
  pp_stream_settings_begin (stream, &resolved, states, *reused);
  pp_settings_clear (&resolved);
  stream->collector = pp_thread_new ("ppdiffuse-collect", collector_loop,
      stream);
  return TRUE;
}

/* At a stop that keeps the mesh, after the caller dropped its frames:
 * waits, up to timeout-ms, until the collector has taken back every chunk
 * still in the mesh.  FALSE when the mesh failed, did not give every chunk
 * back in time, or is no longer healthy: it must then be stopped. */
static gboolean
mesh_drain (PpStream * stream)
{
  const gint64 deadline = g_get_monotonic_time ()
      + stream->timeout_ms * G_TIME_SPAN_MILLISECOND;
  GError *error = NULL;
  gboolean drained;

  g_mutex_lock (&stream->lock);
  while (stream->outstanding > 0 && !stream->failed)
    if (!g_cond_wait_until (&stream->cond, &stream->lock, deadline))
      break;
  drained = stream->outstanding == 0 && !stream->failed;
  if (!drained)
    PP_WARN ("%u chunks did not come back from the mesh at stop%s: the "
        "workers are stopped", stream->outstanding,
        stream->failed ? " (it failed)" : " within timeout-ms");
  g_mutex_unlock (&stream->lock);
  if (drained && !pp_mesh_is_healthy (stream->mesh, &error)) {
    PP_WARN ("the mesh failed: %s", error->message);
    g_error_free (error);
    drained = FALSE;
  }
  return drained;
}

gboolean
pp_stream_halt (PpStream * stream, gboolean keep)
{
  if (stream->mesh == NULL)
    return FALSE;
  if (keep)
    keep = mesh_drain (stream);
  g_mutex_lock (&stream->lock);
  stream->collector_stop = TRUE;
  g_cond_broadcast (&stream->cond);
  g_mutex_unlock (&stream->lock);
  /* None when the mesh was kept by the last stop. */
  if (stream->collector != NULL)
    g_thread_join (g_steal_pointer (&stream->collector));
  pp_stream_settings_end (stream);
  g_clear_pointer (&stream->chunks, pp_chunk_pool_unref);
  if (keep)
    PP_INFO ("workers kept for the next start");
  stream->kept = keep;
  return keep;
}

void
pp_stream_release (PpStream * stream)
{
  GError *error = NULL;
  PpMeshStats stats;

  if (stream->mesh == NULL || stream->kept)
    return;
  g_clear_pointer (&stream->mesh_key, g_free);
  if (!pp_mesh_stop (g_steal_pointer (&stream->mesh), &stats, &error)) {
    PP_WARN ("mesh did not stop cleanly: %s", error->message);
    g_error_free (error);
  } else {
    PP_INFO ("mesh stopped: %" G_GUINT64_FORMAT " chunks, overlap %.3f "
        "over %.3f s", stats.chunks, stats.overlap, stats.wall_s);
  }
  g_mutex_lock (&stream->lock);
  stream->last_stats.wall_s = stats.wall_s;
  stream->last_stats.overlap = stats.overlap;
  stream->last_stats.chunks = stats.chunks;
  stream->last_stats.warm_ups = stats.warm_ups;
  /* Chunks the shutdown discarded are no longer in flight. */
  stream->outstanding = 0;
  g_mutex_unlock (&stream->lock);
  if (stream->model != NULL) {
    guint64 ec, el, dc, dl;

    pp_model_image_graph_counts (stream->model, &ec, &el, &dc, &dl);
    if (ec + el + dc + dl > 0)
      PP_INFO ("image graphs: encoding %" G_GUINT64_FORMAT " captured, %"
          G_GUINT64_FORMAT " launched; decoding %" G_GUINT64_FORMAT
          " captured, %" G_GUINT64_FORMAT " launched", ec, el, dc, dl);
    if (pp_log_enabled (PP_LOG_INFO)) {
      g_autofree gchar *pools = pp_model_describe_pools (stream->model);

      if (pools != NULL)
        PP_INFO ("%s", pools);
    }
  }
  if (stream->model != NULL) {
    PpBackend *backend = stream->model->backend;

    g_clear_pointer (&stream->model, pp_model_free);
    /* What the model freed goes back to the device, not kept while the
     * stream is stopped. */
    pp_backend_give_back (backend);
  }
}

void
pp_stream_last_stats (PpStream * stream, PpStreamStats * stats)
{
  g_mutex_lock (&stream->lock);
  *stats = stream->last_stats;
  g_mutex_unlock (&stream->lock);
}

const gchar *
pp_stream_device (PpStream * stream)
{
  const gchar *device;

  g_mutex_lock (&stream->lock);
  device = stream->device;
  g_mutex_unlock (&stream->lock);
  return device;
}

guint
pp_stream_worker_devices (PpStream * stream, const gchar ** devices, guint n)
{
  guint count;

  g_mutex_lock (&stream->lock);
  count = stream->n_worker_devices;
  for (guint i = 0; i < MIN (n, count); i++)
    devices[i] = stream->worker_devices[i];
  g_mutex_unlock (&stream->lock);
  return count;
}

/* ---- frames ------------------------------------------------------------ */

void
pp_stream_new_epoch (PpStream * stream)
{
  g_atomic_int_inc (&stream->cache_epoch);
}

guint32
pp_stream_cache_epoch (PpStream * stream)
{
  return (guint32) g_atomic_int_get (&stream->cache_epoch);
}

/* Encodes @image into @chunk's sample: into the tensor an earlier frame
 * left in the pooled chunk when it has the shape the model gives frames of
 * this size, else into a new one (the first frame of a size). */
static gboolean
encode_sample (PpStream * stream, const PpImage * image, PpChunk * chunk,
    GError ** error)
{
  PpTensor *sample = chunk->tensors->len == 1
      ? g_ptr_array_index (chunk->tensors, 0) : NULL;
  /* Over NCCL the sample is a device tensor of rank 0's backend, encoded
   * into on the device and sent from there. */
  PpBackend *device = pp_mesh_data_plane_backend (stream->mesh);

  if (sample != NULL && image->width == stream->sample_width
      && image->height == stream->sample_height
      && pp_tensor_has_spec_on (sample, &stream->sample_spec, device))
    return pp_model_encode_into (stream->model, image, sample, error);
  pp_chunk_truncate (chunk, 0);
  sample = pp_model_encode (stream->model, image, error);
  if (sample == NULL)
    return FALSE;
  /* The first frame of a size: its tensor moves to the device once; the
   * next frames are encoded into it there. */
  if (!pp_stream_add_payload (stream, chunk, sample, error))
    return FALSE;
  sample = g_ptr_array_index (chunk->tensors, 0);
  stream->sample_width = image->width;
  stream->sample_height = image->height;
  pp_tensor_spec_of (sample, &stream->sample_spec);
  PP_DEBUG ("frames of %dx%d give samples of %" G_GSIZE_FORMAT " bytes",
      image->width, image->height, sample->nbytes);
  return TRUE;
}

PpStreamFrame *
pp_stream_encode (PpStream * stream, const PpImage * image, guint64 pts,
    GError ** error)
{
  PpChunk *chunk = pp_chunk_pool_acquire (stream->chunks);

  /* A pooled chunk may still carry an epoch's settings. */
  if (chunk->tensors->len > 1)
    pp_chunk_truncate (chunk, 1);
  if (!encode_sample (stream, image, chunk, error)) {
    prefix_rank0 (error);
    pp_chunk_free (chunk);
    return NULL;
  }
  if (!pp_stream_attach_settings (stream, chunk, error)) {
    pp_chunk_free (chunk);
    return NULL;
  }
  /* The send waits on the device for this fence, not for the stream. */
  pp_chunk_mark_ready (chunk);
  chunk->pts = pts;
  return CHUNK_FRAME (chunk);
}

/* Warm-up passes before the first frame of a mesh: as many as the
 * backend wants, unless the configuration says none or at least one.
 * Graphs asked for on a backend that emulates them (cpu-strict) get the
 * passes a device gets: the first runs as is, the second is captured, and
 * the first frame launches the graph, as on a GPU. */
static guint
warm_ups (PpStream * stream)
{
  guint wanted = pp_mesh_warm_ups_wanted (stream->mesh);

  if (wanted == 0 && stream->model != NULL && stream->model->graphs
      && pp_backend_has_graphs (stream->model->backend))
    wanted = PP_MESH_DEVICE_WARM_UPS;

  if (stream->warm_up < 0)
    return wanted;
  return stream->warm_up > 0 ? MAX (wanted, 1) : 0;
}

gboolean
pp_stream_warm_up (PpStream * stream, const PpStreamFrame * frame,
    GError ** error)
{
  guint passes;

  if (stream->warmed_up)
    return TRUE;
  passes = warm_ups (stream);
  stream->warmed_up = TRUE;
  if (passes == 0)
    return TRUE;
  /* Nothing is in flight yet, so the collector is idle and the chain
   * collects the passes itself, in lockstep. */
  for (guint i = 0; i < passes; i++) {
    PpChunk *pass = pp_chunk_copy (FRAME_CHUNK (frame), error);

    gboolean ok = pass != NULL;

    if (ok) {
      pass->cache_epoch = pp_stream_cache_epoch (stream);
      PP_DEBUG ("warm-up pass %u of %u before the first frame", i + 1,
          passes);
      ok = pp_mesh_warm_up (stream->mesh, pass, error);
    }
    if (!ok) {
      g_mutex_lock (&stream->lock);
      stream->failed = TRUE;
      g_cond_broadcast (&stream->cond);
      g_mutex_unlock (&stream->lock);
      return FALSE;
    }
  }
  /* Measured now: the caller can say early when the stream is too fast. */
  if (g_atomic_int_compare_and_exchange (&stream->measured, 0, 1))
    stream->cb.measured (stream->data);
  return TRUE;
}

gboolean
pp_stream_submit (PpStream * stream, PpStreamFrame * frame,
    PpStreamAssignedFunc assigned, gpointer data, GError ** error)
{
  PpChunk *chunk = FRAME_CHUNK (frame);

  chunk->cache_epoch = pp_stream_cache_epoch (stream);
  /* Before the collector wakes to wait for it. */
  pp_mesh_before_submit (stream->mesh, chunk);
  g_mutex_lock (&stream->lock);
  stream->outstanding++;
  g_cond_broadcast (&stream->cond);
  g_mutex_unlock (&stream->lock);
  if (!pp_mesh_submit (stream->mesh, chunk, assigned, data, error)) {
    g_mutex_lock (&stream->lock);
    stream->failed = TRUE;
    g_cond_broadcast (&stream->cond);
    g_mutex_unlock (&stream->lock);
    return FALSE;
  }
  /* Chunks of the mesh are never lost on the way: every worker has seen
   * the settings once this one went out. */
  pp_stream_settings_sent (stream);
  return TRUE;
}

gboolean
pp_stream_decode (PpStream * stream, const PpStreamFrame * result,
    PpImage * image, GError ** error)
{
  PpTensor *sample = pp_chunk_get_tensor (FRAME_CHUNK (result),
      PP_MODEL_SAMPLE_NAME);

  if (sample == NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "it came back without a sample tensor");
    return FALSE;
  }
  if (!pp_model_decode (stream->model, sample, image, error)) {
    prefix_rank0 (error);
    return FALSE;
  }
  return TRUE;
}

guint64
pp_stream_frame_id (const PpStreamFrame * frame)
{
  return FRAME_CHUNK (frame)->chunk_id;
}

gint64
pp_stream_frame_submit_us (const PpStreamFrame * frame)
{
  return (gint64) FRAME_CHUNK (frame)->submit_us;
}

void
pp_stream_frame_free (PpStreamFrame * frame)
{
  pp_chunk_free (FRAME_CHUNK (frame));
}

/* ---- measures ---------------------------------------------------------- */

guint
pp_stream_worker_busy (PpStream * stream, gdouble * busy_s, guint n)
{
  return stream->mesh != NULL ? pp_mesh_worker_busy (stream->mesh, busy_s,
      n) : 0;
}

guint64
pp_stream_rank0_cpu_us (void)
{
  return pp_proc_cpu_us ();
}

guint
pp_stream_worker_counts (PpStream * stream, PpStreamWorkerCounts * counts,
    guint n)
{
  PpWorkerCounts mesh[PP_STREAM_MAX_WORKERS];
  guint n_workers;

  if (stream->mesh == NULL)
    return 0;
  n = MIN (n, PP_STREAM_MAX_WORKERS);
  n_workers = pp_mesh_worker_counts (stream->mesh, mesh, n);
  for (guint i = 0; i < MIN (n, n_workers); i++) {
    counts[i].cache_builds = mesh[i].cache_builds;
    counts[i].stream_bytes = mesh[i].stream_bytes;
    counts[i].batched_steps = mesh[i].batched_steps;
    counts[i].cpu_us = mesh[i].cpu_us;
    counts[i].seq = mesh[i].seq;
    counts[i].heard_us = mesh[i].heard_us;
  }
  return n_workers;
}

void
pp_stream_pace (PpStream * stream, PpStreamPace * out)
{
  const PpPlan *plan = pp_mesh_plan (stream->mesh);
  const PpSlice *slice;
  PpMeshPace pace;

  pp_mesh_pace (stream->mesh, &pace);
  slice = &plan->slices[pace.slowest];
  out->round_us = pace.round_us;
  out->stage_us = pace.stage_us;
  out->slowest = pace.slowest;
  out->slice_first = slice->first;
  out->slice_end = slice->end;
  out->source = pace.source;
  out->round_allowance_us = pace.round_allowance_us;
  out->stage_allowance_us = pace.stage_allowance_us;
  out->n_workers = plan->n_workers;
  out->n_steps = plan->n_steps;
  out->advice = pace.advice;
}
