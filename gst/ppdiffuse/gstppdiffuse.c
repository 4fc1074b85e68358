/* GStreamer ppdiffuse — live video diffusion, pipeline-parallel over an
 * MPI worker mesh.
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */

/**
 * SECTION:element-ppdiffuse
 * @title: ppdiffuse
 *
 * Restyles video with a diffusion model whose denoising steps run
 * pipeline-parallel over a mesh of worker processes spawned through MPI:
 * every worker runs a contiguous slice of the steps, and frames flow
 * through the workers like an assembly line.  At most #GstPpDiffuse:max-in-flight
 * frames are inside the mesh at once; when that many are out, the element
 * blocks upstream.  Serialized events (caps, segment, EOS) keep their place
 * among the frames in flight, and EOS drains every frame before it goes
 * downstream.
 *
 * ## Example launch line
 * |[
 * gst-launch-1.0 videotestsrc num-buffers=60 ! video/x-raw,format=RGBA,width=320,height=240 ! \
 *     ppdiffuse ranks=2 steps=4 model=builtin:anisotropic ! videoconvert ! autovideosink
 * ]|
 * Each frame gets four Perona–Malik diffusion steps, two on each worker.
 *
 * Open MPI refuses to run as root unless OMPI_ALLOW_RUN_AS_ROOT=1 and
 * OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 are set.
 *
 * ## Changing settings while playing
 * #GstPpDiffuse:strength, #GstPpDiffuse:seed, #GstPpDiffuse:t-index-list,
 * #GstPpDiffuse:prompt-embeds and the parameters of #GstPpDiffuse:model
 * can be set while playing.  A change is checked off the streaming thread
 * (a bad one posts a warning and is undone; the stream goes on), then
 * takes effect at the next frame with a new cache epoch on every rank at
 * once: frames in flight finish with the settings they started with and
 * come out first, and no frame computed with older settings follows one
 * computed with the new.
 *
 * ## Buffers
 * Upstream's buffer is released as soon as its frame is encoded: it is
 * copied once, every byte and its metas, into a buffer of the element's own
 * pool, which the result is written into.  A source with a small fixed
 * pool is never starved by #GstPpDiffuse:max-in-flight.
 *
 * ## Worker lifetime
 * By default the workers are spawned at every READY→PAUSED and stopped at
 * every PAUSED→READY.  With #GstPpDiffuse:keep-workers they stay up, idle,
 * once the chunks in flight came back, and the next start uses them when
 * the settings they were spawned with are unchanged; they end when the
 * element is freed, when such a setting changed (they are spawned anew),
 * or after a mesh error.
 */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstppdiffuse.h"
#include "gstppdiffuse-live.h"
#include "gstppdiffuse-pace.h"
#include "gstppdiffuse-pool.h"
#include "gstppdiffuse-prompt.h"
#include "gstppdiffuse-restart.h"
#include "pp-log.h"
#include "pp-prompt.h"
#include "pp-protocol.h"

#include <string.h>
#include <unistd.h>

GST_DEBUG_CATEGORY (gst_pp_diffuse_debug);
#define GST_CAT_DEFAULT gst_pp_diffuse_debug

#define DEFAULT_RANKS 2
#define DEFAULT_STEPS 4
#define DEFAULT_MAX_IN_FLIGHT 0
#define DEFAULT_MODEL PP_MODEL_DEFAULT_URI
#define DEFAULT_BACKEND GST_PP_DIFFUSE_BACKEND_AUTO
#define DEFAULT_DTYPE GST_PP_DIFFUSE_DTYPE_AUTO
#define DEFAULT_CUDA_GRAPHS FALSE
#define DEFAULT_TIMEOUT_MS 10000
#define DEFAULT_STRENGTH 0.5
#define DEFAULT_SEED 0
#define DEFAULT_SIMILARITY_THRESHOLD 0.0
#define MAX_STEPS 1000
#define MAX_IN_FLIGHT_LIMIT 1024
#define MIN_TIMEOUT_MS 100
#define MAX_TIMEOUT_MS (24 * 3600 * 1000)
/* Growth of the measured latency (the p95 of submit→return since start)
 * over the last reported one that makes us ask the pipeline to recompute
 * latency (a LATENCY message). */
#define LATENCY_REPORT_GROWTH 1.25
#define DEFAULT_QOS TRUE
#define DEFAULT_STATS_INTERVAL_MS 1000
#define MAX_STATS_INTERVAL_MS (3600 * 1000)
/* The chunk id of a frame in the FIFO until the mesh has assigned one. */
#define CHUNK_ID_UNSENT G_MAXUINT64

enum
{
  PROP_0,
  PROP_RANKS,
  PROP_STEPS,
  PROP_MAX_IN_FLIGHT,
  PROP_MODEL,
  PROP_BACKEND,
  PROP_DTYPE,
  PROP_CUDA_GRAPHS,
  PROP_TIMEOUT_MS,
  PROP_WORKER,
  PROP_HOSTS,
  PROP_HOSTFILE,
  PROP_DUMP_DIR,
  PROP_PROMPT,
  PROP_PROMPT_EMBEDS,
  PROP_STRENGTH,
  PROP_SEED,
  PROP_T_INDEX_LIST,
  PROP_WARM_UP,
  PROP_LEAKY,
  PROP_SIMILARITY_THRESHOLD,
  PROP_KEEP_WORKERS,
  PROP_STATS,
  PROP_QOS,
  PROP_STATS_INTERVAL_MS,
};

#define VIDEO_CAPS GST_VIDEO_CAPS_MAKE ("{ RGBA, RGBx, BGRx, RGB }")

static GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE ("sink",
    GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS (VIDEO_CAPS));
static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE ("src",
    GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS (VIDEO_CAPS));

G_DEFINE_TYPE (GstPpDiffuse, gst_pp_diffuse, GST_TYPE_ELEMENT);
GST_ELEMENT_REGISTER_DEFINE (ppdiffuse, "ppdiffuse", GST_RANK_NONE,
    GST_TYPE_PP_DIFFUSE);

GType
gst_pp_diffuse_backend_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    {GST_PP_DIFFUSE_BACKEND_AUTO, "$PPDIFFUSE_BACKEND when set, else CUDA "
          "when this build has it and rank 0 sees a GPU, else the CPU (with "
          "a warning that says why)", "auto"},
    {GST_PP_DIFFUSE_BACKEND_CPU, "CPU kernels, MPI data plane", "cpu"},
    {GST_PP_DIFFUSE_BACKEND_CUDA, "CUDA kernels on the GPU of each rank's "
          "node-local rank; fails at start without a device", "cuda"},
    {GST_PP_DIFFUSE_BACKEND_CPU_STRICT, "CPU kernels on device buffers the "
          "host cannot touch: a debugging backend that faults on any stray "
          "host access to device memory", "cpu-strict"},
    {0, NULL, NULL},
  };

  if (g_once_init_enter (&type))
    g_once_init_leave (&type,
        g_enum_register_static ("GstPpDiffuseBackend", values));
  return type;
}

GType
gst_pp_diffuse_dtype_get_type (void)
{
  static GType type = 0;
  static const GEnumValue values[] = {
    {GST_PP_DIFFUSE_DTYPE_AUTO, "the backend's default: f16 on CUDA, f32 "
          "on the CPU", "auto"},
    {GST_PP_DIFFUSE_DTYPE_F32, "32-bit float weights", "f32"},
    {GST_PP_DIFFUSE_DTYPE_F16, "IEEE half weights (the CPU backends round "
          "the weights to half precision and compute in f32)", "f16"},
    {GST_PP_DIFFUSE_DTYPE_BF16, "bfloat16 weights (the CPU backends round "
          "likewise)", "bf16"},
    {0, NULL, NULL},
  };

  if (g_once_init_enter (&type))
    g_once_init_leave (&type,
        g_enum_register_static ("GstPpDiffuseDtype", values));
  return type;
}

static void
item_clear (GstPpDiffuseItem * item)
{
  gst_clear_event (&item->event);
  gst_clear_buffer (&item->buffer);
  g_clear_pointer (&item->result, pp_chunk_free);
}

/* An item for a frame: a spare one.  Frames in the element are at most
 * limit + 1 (the one the src task is pushing no longer counts in
 * in_flight), and that many spare items are made at start.  Called with
 * the lock held. */
static GstPpDiffuseItem *
item_take_frame (GstPpDiffuse * self)
{
  GList *link = g_queue_pop_head_link (&self->spare_items);
  GstPpDiffuseItem *item;

  if (link != NULL) {
    item = link->data;
  } else {
    item = g_new (GstPpDiffuseItem, 1);
    self->n_spare_items++;
  }
  memset (item, 0, sizeof *item);
  item->link.data = item;
  item->spare = TRUE;
  return item;
}

/* An item for a serialized event: events are few, theirs are made anew. */
static GstPpDiffuseItem *
item_new_event (GstEvent * event)
{
  GstPpDiffuseItem *item = g_new0 (GstPpDiffuseItem, 1);

  item->link.data = item;
  item->event = event;
  return item;
}

/* Makes spare items until there are @n: one per frame the element can
 * hold.  Called with the lock held. */
static void
items_reserve (GstPpDiffuse * self, guint n)
{
  while (self->n_spare_items < n) {
    GstPpDiffuseItem *item = g_new0 (GstPpDiffuseItem, 1);

    item->link.data = item;
    g_queue_push_head_link (&self->spare_items, &item->link);
    self->n_spare_items++;
  }
}

/* Clears @item and gives it back: a frame's to the spare items, an
 * event's to the heap.  Called with the lock held. */
static void
item_recycle_locked (GstPpDiffuse * self, GstPpDiffuseItem * item)
{
  item_clear (item);
  if (item->spare)
    g_queue_push_head_link (&self->spare_items, &item->link);
  else
    g_free (item);
}

static void
item_recycle (GstPpDiffuse * self, GstPpDiffuseItem * item)
{
  item_clear (item);
  g_mutex_lock (&self->lock);
  item_recycle_locked (self, item);
  g_mutex_unlock (&self->lock);
}

static void
items_free (GQueue * items)
{
  GList *link;

  while ((link = g_queue_pop_head_link (items)) != NULL) {
    item_clear (link->data);
    g_free (link->data);
  }
}

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
static void
mesh_log_follow_threshold (void)
{
  GstDebugLevel t = gst_debug_category_get_threshold (gst_pp_diffuse_debug);
  PpLogLevel level = t >= GST_LEVEL_LOG ? PP_LOG_TRACE
      : t >= GST_LEVEL_DEBUG ? PP_LOG_DEBUG
      : t >= GST_LEVEL_INFO ? PP_LOG_INFO
      : t >= GST_LEVEL_WARNING ? PP_LOG_WARNING : PP_LOG_ERROR;

  pp_log_set_handler (mesh_log, NULL, level);
}

/* ---- the FIFO: called with self->lock held ---------------------------- */

/* Drops every queued item.  A frame whose chunk is still inside the mesh
 * stays counted in in_flight until the collector discards it. */
static void
fifo_flush (GstPpDiffuse * self, guint64 * dropped)
{
  GList *link;

  while ((link = g_queue_pop_head_link (&self->fifo)) != NULL) {
    GstPpDiffuseItem *item = link->data;
    GstEvent *event = item->event;

    /* Sticky events still apply after the flush (as in queue): keep them
     * on the src pad so the next frame goes out behind them. */
    if (event != NULL && GST_EVENT_IS_STICKY (event)
        && GST_EVENT_TYPE (event) != GST_EVENT_SEGMENT
        && GST_EVENT_TYPE (event) != GST_EVENT_EOS)
      gst_pad_store_sticky_event (self->srcpad, event);
    if (event == NULL) {
      if (item->result != NULL || item->repeat)
        self->in_flight--;
      (*dropped)++;
      GST_DEBUG_OBJECT (self, "flushed frame of chunk %" G_GUINT64_FORMAT,
          item->chunk_id);
    }
    item_recycle_locked (self, item);
  }
  self->submitting = NULL;
  /* Repeats to come follow a frame sent after the flush. */
  gst_clear_buffer (&self->last_output);
  g_cond_broadcast (&self->cond);
}

static GstPpDiffuseItem *
fifo_first_pending (GstPpDiffuse * self)
{
  for (GList * l = self->fifo.head; l != NULL; l = l->next) {
    GstPpDiffuseItem *item = l->data;
    if (item->event == NULL && !item->repeat && item->result == NULL)
      return item;
  }
  return NULL;
}

/* ---- collector thread: chunks back from the mesh ----------------------- */

/* Returns TRUE when the measured latency outgrew the reported one. */
static gboolean
collector_attach (GstPpDiffuse * self, PpChunk * chunk)
{
  GstPpDiffuseItem *item = fifo_first_pending (self);
  GstClockTime took;

  /* A frame whose id is not yet known (CHUNK_ID_UNSENT) cannot own a chunk
   * that is back: the mesh tells its id before the chunk goes out. */
  if (item == NULL || chunk->chunk_id < item->chunk_id) {
    /* Its frame was flushed while the chunk was in the mesh. */
    GST_DEBUG_OBJECT (self, "discarding chunk %" G_GUINT64_FORMAT
        " of a flushed frame", chunk->chunk_id);
    self->in_flight--;
    pp_chunk_free (chunk);
    return FALSE;
  }
  g_assert (item->chunk_id == chunk->chunk_id);     /* the mesh checks order */
  took = (g_get_monotonic_time () - (gint64) chunk->submit_us) * GST_USECOND;
  pp_latency_tracker_record (self->latencies, took);
  self->latency = pp_latency_histogram_percentile (&self->latencies->total,
      95);
  GST_DEBUG_OBJECT (self, "chunk %" G_GUINT64_FORMAT " back after %"
      GST_TIME_FORMAT, chunk->chunk_id, GST_TIME_ARGS (took));
  item->result = chunk;
  return self->latency > self->reported_latency * LATENCY_REPORT_GROWTH;
}

static gpointer
gst_pp_diffuse_collector (gpointer data)
{
  GstPpDiffuse *self = data;

  g_mutex_lock (&self->lock);
  for (;;) {
    GError *error = NULL;
    PpChunk *chunk;

    while (!self->collector_stop && self->outstanding == 0)
      g_cond_wait (&self->cond, &self->lock);
    if (self->collector_stop)
      break;
    g_mutex_unlock (&self->lock);
    chunk = pp_mesh_collect (self->mesh, &error);
    g_mutex_lock (&self->lock);
    if (chunk == NULL) {
      self->srcresult = GST_FLOW_ERROR;
      self->mesh_failed = TRUE;
      g_cond_broadcast (&self->cond);
      g_mutex_unlock (&self->lock);
      GST_ELEMENT_ERROR (self, RESOURCE, READ,
          ("The ppdiffuse worker mesh stopped returning frames: %s",
              error->message), ("collecting a chunk failed; %" G_GUINT64_FORMAT
              " frames were in flight", (guint64) self->outstanding));
      g_error_free (error);
      return NULL;
    }
    self->outstanding--;
    /* Without a warm-up pass, the first frame back is the first measure. */
    if (g_atomic_int_compare_and_exchange (&self->pace_checked, 0, 1)) {
      GstVideoInfo info = self->in_info;

      g_mutex_unlock (&self->lock);
      gst_pp_diffuse_pace_check (self, &info);
      g_mutex_lock (&self->lock);
    }
    if (collector_attach (self, chunk)) {
      /* Asked once per growth: the query answer updates reported_latency. */
      self->reported_latency = self->latency;
      g_mutex_unlock (&self->lock);
      GST_DEBUG_OBJECT (self, "latency grew to %" GST_TIME_FORMAT,
          GST_TIME_ARGS (self->reported_latency));
      gst_element_post_message (GST_ELEMENT (self),
          gst_message_new_latency (GST_OBJECT (self)));
      g_mutex_lock (&self->lock);
    }
    g_cond_broadcast (&self->cond);
  }
  g_mutex_unlock (&self->lock);
  return NULL;
}

/* A pipeline directory gets the diffusion settings as URI parameters, so
 * that every worker sees them in the plan (and in plan_id).  A text
 * prompt's states travel with the chunks; the URI names them by
 * @prompt_ref.  Called without the object lock. */
static gchar *
gst_pp_diffuse_model_uri (GstPpDiffuse * self, const GstPpDiffuseLive * live,
    const gchar * prompt_ref)
{
  PpPipelineSettings settings = {
    .prompt_embeds = prompt_ref != NULL ? prompt_ref : live->prompt_embeds,
    .strength = live->strength,
    .seed = live->seed,
    .t_index_list = live->t_index_list,
  };

  GST_OBJECT_LOCK (self);
  settings.dtype = self->dtype == GST_PP_DIFFUSE_DTYPE_AUTO ? NULL
      : g_enum_get_value (g_type_class_peek (GST_TYPE_PP_DIFFUSE_DTYPE),
      self->dtype)->value_nick;
  settings.cuda_graphs = self->cuda_graphs;
  GST_OBJECT_UNLOCK (self);
  return pp_model_uri_with_settings (live->model_uri, &settings);
}

static gboolean
has_prompt (const GstPpDiffuseLive * live)
{
  return live->prompt != NULL && *live->prompt != '\0';
}

/* The states of @live's prompt, when it has one: *@states and *@ref (NULL
 * and NULL without a prompt).  A prompt cut to fit gets a warning.  Start
 * and settings thread. */
static gboolean
gst_pp_diffuse_encode_prompt (GstPpDiffuse * self,
    const GstPpDiffuseLive * live, PpBackend * backend, PpTensor ** states,
    gchar ** ref, GError ** error)
{
  g_autofree gchar *dir = NULL;
  gboolean truncated = FALSE;
  const gchar *query;

  *states = NULL;
  *ref = NULL;
  if (!has_prompt (live))
    return TRUE;
  query = strchr (live->model_uri, '?');
  dir = query != NULL ? g_strndup (live->model_uri, query - live->model_uri)
      : g_strdup (live->model_uri);
  *states = gst_pp_diffuse_prompt_encode (self->prompt_cache, dir, backend,
      live->prompt, ref, &truncated, error);
  if (*states == NULL) {
    g_prefix_error (error, "prompt '%s': ", live->prompt);
    return FALSE;
  }
  if (truncated)
    GST_ELEMENT_WARNING (self, RESOURCE, SETTINGS,
        ("The prompt is longer than the text encoder's 77 tokens: the rest "
            "is left out"), ("prompt: %s", live->prompt));
  return TRUE;
}

/* A GPtrArray holding @states, or NULL: the inputs of a model update. */
static GPtrArray *
states_inputs (PpTensor * states)
{
  GPtrArray *inputs;

  if (states == NULL)
    return NULL;
  inputs = g_ptr_array_new ();
  g_ptr_array_add (inputs, states);
  return inputs;
}

/* ---- live settings ----------------------------------------------------- */

static void
live_copy (GstPpDiffuseLive * dst, const GstPpDiffuseLive * src)
{
  g_free (dst->model_uri);
  g_free (dst->prompt);
  g_free (dst->prompt_embeds);
  g_free (dst->t_index_list);
  dst->model_uri = g_strdup (src->model_uri);
  dst->prompt = g_strdup (src->prompt);
  dst->prompt_embeds = g_strdup (src->prompt_embeds);
  dst->t_index_list = g_strdup (src->t_index_list);
  dst->strength = src->strength;
  dst->seed = src->seed;
}

static void
live_clear (GstPpDiffuseLive * live)
{
  g_clear_pointer (&live->model_uri, g_free);
  g_clear_pointer (&live->prompt, g_free);
  g_clear_pointer (&live->prompt_embeds, g_free);
  g_clear_pointer (&live->t_index_list, g_free);
}

static gboolean
live_equal (const GstPpDiffuseLive * a, const GstPpDiffuseLive * b)
{
  return g_strcmp0 (a->model_uri, b->model_uri) == 0
      && g_strcmp0 (a->prompt, b->prompt) == 0
      && g_strcmp0 (a->prompt_embeds, b->prompt_embeds) == 0
      && g_strcmp0 (a->t_index_list, b->t_index_list) == 0
      && a->strength == b->strength && a->seed == b->seed;
}

static const gchar *const live_property_names[] = {
  "model", "prompt", "prompt-embeds", "strength", "seed", "t-index-list",
};

/* Checks the live properties as they are now against the running model:
 * accepted, their URI waits for the chain; refused, the properties go
 * back to what was last accepted (unless they changed again meanwhile:
 * that change is checked next) and the application gets a warning.  The
 * stream goes on either way.  Settings thread. */
static void
gst_pp_diffuse_check_settings (GstPpDiffuse * self)
{
  GstPpDiffuseLive snapshot = { 0 };
  g_autofree gchar *uri = NULL, *ref = NULL;
  g_autoptr (GPtrArray) inputs = NULL;
  PpTensor *states = NULL;
  GError *error = NULL;
  gboolean same, ok, restored = FALSE;

  GST_OBJECT_LOCK (self);
  live_copy (&snapshot, &self->settings);
  GST_OBJECT_UNLOCK (self);

  /* A prompt is encoded here, off the streaming thread; its states are
   * named in the URI by their digest. */
  ok = gst_pp_diffuse_encode_prompt (self, &snapshot, self->model->backend,
      &states, &ref, &error);
  if (ok) {
    uri = gst_pp_diffuse_model_uri (self, &snapshot, ref);
    g_mutex_lock (&self->lock);
    same = g_strcmp0 (uri, self->next_uri ? self->next_uri
        : self->running_uri) == 0;
    g_mutex_unlock (&self->lock);
    if (same) {
      pp_tensor_free (states);
      live_clear (&snapshot);
      return;
    }
    inputs = states_inputs (states);
    ok = pp_model_check_update (self->model, uri, inputs, &error);
  }
  if (ok) {
    GST_OBJECT_LOCK (self);
    live_copy (&self->accepted, &snapshot);
    GST_OBJECT_UNLOCK (self);
    g_mutex_lock (&self->lock);
    g_free (self->next_uri);
    self->next_uri = g_steal_pointer (&uri);
    g_clear_pointer (&self->next_states, pp_tensor_free);
    self->next_states = states;
    g_mutex_unlock (&self->lock);
    GST_INFO_OBJECT (self, "new settings accepted; they apply from the next "
        "frame");
    live_clear (&snapshot);
    return;
  }
  pp_tensor_free (states);
  GST_OBJECT_LOCK (self);
  if (live_equal (&self->settings, &snapshot)) {
    live_copy (&self->settings, &self->accepted);
    restored = TRUE;
  }
  GST_OBJECT_UNLOCK (self);
  GST_ELEMENT_WARNING (self, RESOURCE, SETTINGS,
      ("Ignoring new settings, the stream goes on with the previous ones: "
          "%s", error->message), ("refused model URI: %s",
          uri ? uri : snapshot.model_uri));
  g_error_free (error);
  live_clear (&snapshot);
  if (restored)
    for (guint i = 0; i < G_N_ELEMENTS (live_property_names); i++)
      g_object_notify (G_OBJECT (self), live_property_names[i]);
}

static gpointer
gst_pp_diffuse_settings_loop (gpointer data)
{
  GstPpDiffuse *self = data;

  g_mutex_lock (&self->lock);
  for (;;) {
    while (!self->settings_stop && !self->settings_dirty)
      g_cond_wait (&self->settings_cond, &self->lock);
    if (self->settings_stop)
      break;
    self->settings_dirty = FALSE;
    g_mutex_unlock (&self->lock);
    gst_pp_diffuse_check_settings (self);
    g_mutex_lock (&self->lock);
  }
  g_mutex_unlock (&self->lock);
  return NULL;
}

/* A live property changed: checked off the streaming thread when a mesh
 * runs, else simply used at the next start.  Called with the object lock
 * held (lock order: object lock, then lock). */
static void
gst_pp_diffuse_settings_changed (GstPpDiffuse * self)
{
  g_mutex_lock (&self->lock);
  if (self->settings_thread != NULL) {
    self->settings_dirty = TRUE;
    g_cond_signal (&self->settings_cond);
  }
  g_mutex_unlock (&self->lock);
}

/* The settings the next frame starts with, when new ones were accepted:
 * applied to rank 0's model at this chunk boundary, with a new cache
 * epoch.  Chain thread, before the frame is encoded.  TRUE when new
 * settings start with this frame. */
static gboolean
gst_pp_diffuse_take_settings (GstPpDiffuse * self)
{
  g_autofree gchar *uri = NULL;
  g_autoptr (GPtrArray) inputs = NULL;
  PpTensor *states;
  GError *error = NULL;

  g_mutex_lock (&self->lock);
  uri = g_steal_pointer (&self->next_uri);
  states = g_steal_pointer (&self->next_states);
  g_mutex_unlock (&self->lock);
  if (uri == NULL)
    return FALSE;
  inputs = states_inputs (states);
  if (!pp_model_update (self->model, uri, inputs, &error)) {
    GST_ELEMENT_WARNING (self, RESOURCE, SETTINGS,
        ("Ignoring new settings, the stream goes on with the previous ones: "
            "%s", error->message), ("model URI: %s", uri));
    g_error_free (error);
    pp_tensor_free (states);
    return FALSE;
  }
  g_mutex_lock (&self->lock);
  self->cache_epoch++;
  GST_INFO_OBJECT (self, "cache epoch %u: settings %s", self->cache_epoch,
      uri);
  g_free (self->running_uri);
  self->running_uri = g_strdup (uri);
  g_mutex_unlock (&self->lock);
  g_free (self->unsent_uri);
  self->unsent_uri = g_steal_pointer (&uri);
  g_clear_pointer (&self->unsent_states, pp_tensor_free);
  self->unsent_states = states;
  return TRUE;
}

/* Adds the settings not yet sent to @chunk: every worker applies them
 * before it computes the chunk.  On the payload plane's device when the
 * chunk travels from there.  Chain thread. */
static gboolean
add_payload (GstPpDiffuse * self, PpChunk * chunk, PpTensor * host,
    GError ** error)
{
  PpBackend *device = pp_mesh_payload_backend (self->mesh);
  PpTensor *dev;

  if (device == NULL) {
    pp_chunk_add_tensor (chunk, host);
    return TRUE;
  }
  dev = pp_tensor_new_on (device, host->name, host->dtype, host->ndim,
      host->shape, error);
  if (dev == NULL || !pp_tensor_upload (dev, host, error)) {
    pp_tensor_free (dev);
    pp_tensor_free (host);
    return FALSE;
  }
  pp_tensor_free (host);
  pp_chunk_add_tensor (chunk, dev);
  return TRUE;
}

static gboolean
attach_settings (GstPpDiffuse * self, PpChunk * chunk, GError ** error)
{
  const gint64 n = (gint64) strlen (self->unsent_uri);
  PpTensor *host = pp_tensor_new (PP_SETTINGS_TENSOR, PP_DTYPE_U8, 1, &n,
      error);

  if (host == NULL)
    return FALSE;
  memcpy (host->data, self->unsent_uri, n);
  if (!add_payload (self, chunk, host, error))
    return FALSE;
  /* A prompt's states go with its settings. */
  return self->unsent_states == NULL || add_payload (self, chunk,
      gst_pp_diffuse_tensor_copy (self->unsent_states), error);
}

/* ---- chain: frames into the mesh -------------------------------------- */

/* The packed RGB formats we accept are one plane with R, G, B at fixed
 * offsets in each pixel. */
static void
image_from_frame (GstVideoFrame * frame, PpImage * image)
{
  image->data = GST_VIDEO_FRAME_PLANE_DATA (frame, 0);
  image->width = GST_VIDEO_FRAME_WIDTH (frame);
  image->height = GST_VIDEO_FRAME_HEIGHT (frame);
  image->row_stride = GST_VIDEO_FRAME_PLANE_STRIDE (frame, 0);
  image->pixel_stride = GST_VIDEO_FRAME_COMP_PSTRIDE (frame, 0);
  image->offset[0] = GST_VIDEO_FRAME_COMP_POFFSET (frame, GST_VIDEO_COMP_R);
  image->offset[1] = GST_VIDEO_FRAME_COMP_POFFSET (frame, GST_VIDEO_COMP_G);
  image->offset[2] = GST_VIDEO_FRAME_COMP_POFFSET (frame, GST_VIDEO_COMP_B);
}

/* Encodes @image into @chunk's sample: into the tensor an earlier frame
 * left in the pooled chunk when it has the shape the model gives frames of
 * this size, else into a new one (the first frame of a size).  Chain
 * thread only. */
static gboolean
encode_sample (GstPpDiffuse * self, const PpImage * image, PpChunk * chunk,
    GError ** error)
{
  PpTensor *sample = chunk->tensors->len == 1
      ? g_ptr_array_index (chunk->tensors, 0) : NULL;
  /* Over NCCL the sample is a device tensor of rank 0's backend, encoded
   * into on the device and sent from there. */
  PpBackend *device = pp_mesh_payload_backend (self->mesh);

  if (sample != NULL && image->width == self->sample_width
      && image->height == self->sample_height
      && pp_tensor_has_spec_on (sample, &self->sample_spec, device))
    return pp_model_encode_into (self->model, image, sample, error);
  pp_chunk_truncate (chunk, 0);
  sample = pp_model_encode (self->model, image, error);
  if (sample == NULL)
    return FALSE;
  if (device != NULL) {
    /* The first frame of a size: its tensor moves to the device once; the
     * next frames are encoded into it there. */
    PpTensor *dev = pp_tensor_new_on (device, sample->name, sample->dtype,
        sample->ndim, sample->shape, error);

    if (dev == NULL || !pp_tensor_upload (dev, sample, error)) {
      pp_tensor_free (dev);
      pp_tensor_free (sample);
      return FALSE;
    }
    pp_tensor_free (sample);
    sample = dev;
  }
  pp_chunk_add_tensor (chunk, sample);
  self->sample_width = image->width;
  self->sample_height = image->height;
  pp_tensor_spec_of (sample, &self->sample_spec);
  GST_DEBUG_OBJECT (self, "frames of %dx%d give samples of %" G_GSIZE_FORMAT
      " bytes", image->width, image->height, sample->nbytes);
  return TRUE;
}

static PpChunk *
gst_pp_diffuse_encode (GstPpDiffuse * self, GstBuffer * buf,
    const GstVideoInfo * info, GError ** error)
{
  GstVideoFrame frame;
  PpImage image;
  PpChunk *chunk;
  gboolean ok;

  if (!gst_video_frame_map (&frame, (GstVideoInfo *) info, buf, GST_MAP_READ)) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
        "the input buffer does not hold a %dx%d %s frame",
        GST_VIDEO_INFO_WIDTH (info), GST_VIDEO_INFO_HEIGHT (info),
        GST_VIDEO_INFO_NAME (info));
    return NULL;
  }
  image_from_frame (&frame, &image);
  chunk = pp_chunk_pool_acquire (self->chunks);
  /* A pooled chunk may still carry an epoch's settings. */
  if (chunk->tensors->len > 1)
    pp_chunk_truncate (chunk, 1);
  ok = encode_sample (self, &image, chunk, error);
  if (ok && self->unsent_uri != NULL)
    ok = attach_settings (self, chunk, error);
  gst_video_frame_unmap (&frame);
  if (!ok) {
    pp_chunk_free (chunk);
    return NULL;
  }
  chunk->pts = GST_BUFFER_PTS (buf);
  return chunk;
}

/* Counts a frame dropped before it reached the mesh, tells the
 * application with a QoS message, and marks the next frame out DISCONT.
 * Called with the lock held; takes @buf. */
static void
drop_frame (GstPpDiffuse * self, GstBuffer * buf, guint64 * counter,
    const gchar * why)
{
  const GstClockTime pts = GST_BUFFER_PTS (buf);
  const GstClockTime running = self->segment.format == GST_FORMAT_TIME
      ? gst_segment_to_running_time (&self->segment, GST_FORMAT_TIME, pts)
      : GST_CLOCK_TIME_NONE;
  const GstClockTime stream = self->segment.format == GST_FORMAT_TIME
      ? gst_segment_to_stream_time (&self->segment, GST_FORMAT_TIME, pts)
      : GST_CLOCK_TIME_NONE;
  GstMessage *qos;
  guint64 dropped;

  self->frames_in++;
  (*counter)++;
  self->discont_next = TRUE;
  dropped = self->dropped_qos + self->dropped_leaky;
  qos = gst_message_new_qos (GST_OBJECT (self), self->live, running, stream,
      pts, GST_BUFFER_DURATION (buf));
  gst_message_set_qos_stats (qos, GST_FORMAT_BUFFERS,
      self->frames_in - dropped, dropped);
  g_mutex_unlock (&self->lock);
  GST_DEBUG_OBJECT (self, "dropping frame %" GST_TIME_FORMAT ": %s",
      GST_TIME_ARGS (pts), why);
  gst_buffer_unref (buf);
  gst_element_post_message (GST_ELEMENT (self), qos);
  g_mutex_lock (&self->lock);
}

/* TRUE when downstream's last QoS event says this frame would be late:
 * its running time is at or before the earliest time it can still use. */
static gboolean
frame_is_late (GstPpDiffuse * self, GstBuffer * buf)
{
  GstClockTime running;

  if (!GST_CLOCK_TIME_IS_VALID (self->qos_earliest)
      || self->segment.format != GST_FORMAT_TIME
      || !GST_BUFFER_PTS_IS_VALID (buf))
    return FALSE;
  running = gst_segment_to_running_time (&self->segment, GST_FORMAT_TIME,
      GST_BUFFER_PTS (buf));
  return GST_CLOCK_TIME_IS_VALID (running) && running <= self->qos_earliest;
}

/* Waits for room in the mesh.  Bounded by the src task, whose only
 * open-ended wait is downstream flow control (as in queue). */
static GstFlowReturn
wait_for_room (GstPpDiffuse * self)
{
  while (self->srcresult == GST_FLOW_OK && !self->flushing
      && self->in_flight >= self->limit) {
    GST_LOG_OBJECT (self, "%u chunks in flight, waiting for room",
        self->in_flight);
    g_cond_wait (&self->cond, &self->lock);
  }
  if (self->flushing)
    return GST_FLOW_FLUSHING;
  return self->srcresult;
}

/* The mesh assigned the chunk of the frame being submitted its id: filed
 * before the chunk goes out, so the collector can match it. */
static void
gst_pp_diffuse_chunk_assigned (guint64 chunk_id, gpointer data)
{
  GstPpDiffuse *self = data;

  g_mutex_lock (&self->lock);
  if (self->submitting != NULL) {
    self->submitting->chunk_id = chunk_id;
    GST_DEBUG_OBJECT (self, "submitting frame %" GST_TIME_FORMAT " as chunk %"
        G_GUINT64_FORMAT, GST_TIME_ARGS (GST_BUFFER_PTS
            (self->submitting->buffer)), chunk_id);
    self->submitting = NULL;
  } else {
    GST_DEBUG_OBJECT (self, "submitting chunk %" G_GUINT64_FORMAT " of a "
        "flushed frame", chunk_id);
  }
  g_mutex_unlock (&self->lock);
}

/* Warm-up passes before the first frame of a mesh: as many as the
 * backend wants (pp_mesh_warm_ups_wanted), unless the warm-up property was
 * set: then none, or at least one. */
static guint
gst_pp_diffuse_warm_ups (GstPpDiffuse * self)
{
  const guint wanted = pp_mesh_warm_ups_wanted (self->mesh);

  if (!self->warm_up_set)
    return wanted;
  return self->warm_up ? MAX (wanted, 1) : 0;
}

/* The warm-up passes, on the first frame of a mesh: copies of @chunk go
 * round the mesh in lockstep; nothing is in flight yet, so the collector
 * is idle and the chain thread collects them itself.  What the last took
 * is the mesh's first measure of the work, checked against the framerate
 * of @info. */
static gboolean
gst_pp_diffuse_warm_up (GstPpDiffuse * self, const PpChunk * chunk,
    const GstVideoInfo * info, guint passes)
{
  GError *error = NULL;

  self->warmed_up = TRUE;
  for (guint i = 0; i < passes && error == NULL; i++) {
    PpChunk *pass = pp_chunk_copy (chunk, &error);

    if (pass == NULL)
      break;
    g_mutex_lock (&self->lock);
    pass->cache_epoch = self->cache_epoch;
    g_mutex_unlock (&self->lock);
    GST_DEBUG_OBJECT (self, "warm-up pass %u of %u before the first frame",
        i + 1, passes);
    pp_mesh_warm_up (self->mesh, pass, &error);
  }
  if (error == NULL) {
    /* Measured now: say early when the stream is too fast for it. */
    if (g_atomic_int_compare_and_exchange (&self->pace_checked, 0, 1))
      gst_pp_diffuse_pace_check (self, info);
    return TRUE;
  }
  g_mutex_lock (&self->lock);
  self->srcresult = GST_FLOW_ERROR;
  self->mesh_failed = TRUE;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  GST_ELEMENT_ERROR (self, RESOURCE, WRITE,
      ("The warm-up pass round the ppdiffuse worker mesh failed: %s",
          error->message), (NULL));
  g_error_free (error);
  return FALSE;
}

/* The similarity filter: TRUE when @buf is to be skipped, alike the last
 * frame sent to the mesh (gstppdiffuse-similarity.h has the rule).  A
 * frame let through becomes the reference.  Chain thread only. */
static gboolean
similar_to_last_sent (GstPpDiffuse * self, GstBuffer * buf,
    const GstVideoInfo * info, gdouble threshold)
{
  GstVideoFrame frame;
  PpImage image;
  gdouble similarity;
  gboolean skip;

  if (threshold <= 0) {
    pp_similarity_filter_forget (self->similar);
    return FALSE;
  }
  /* An unreadable frame goes on: the encode reports it. */
  if (!gst_video_frame_map (&frame, (GstVideoInfo *) info, buf, GST_MAP_READ))
    return FALSE;
  image_from_frame (&frame, &image);
  skip = pp_similarity_filter_skip (self->similar, &image, threshold,
      &similarity);
  gst_video_frame_unmap (&frame);
  GST_LOG_OBJECT (self, "frame %" GST_TIME_FORMAT ": similarity %.5f to the "
      "last frame sent, %s", GST_TIME_ARGS (GST_BUFFER_PTS (buf)), similarity,
      skip ? "skipped" : "sent");
  return skip;
}

/* Files a frame the similarity filter skipped: a repeat item takes its
 * place in the FIFO, so that the last output goes out again in its stead,
 * in order.  Takes @buf and @item. */
static GstFlowReturn
queue_repeat (GstPpDiffuse * self, GstPpDiffuseItem * item, GstBuffer * buf)
{
  g_mutex_lock (&self->lock);
  self->frames_in++;
  if (self->flushing) {
    self->dropped_flush++;
    item_recycle_locked (self, item);
    g_mutex_unlock (&self->lock);
    gst_buffer_unref (buf);
    return GST_FLOW_FLUSHING;
  }
  item->buffer = buf;
  item->repeat = TRUE;
  g_queue_push_tail_link (&self->fifo, &item->link);
  self->in_flight++;
  self->skipped_similar++;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  GST_DEBUG_OBJECT (self, "frame %" GST_TIME_FORMAT " skipped as similar: "
      "the last output repeats", GST_TIME_ARGS (GST_BUFFER_PTS (buf)));
  return GST_FLOW_OK;
}

static GstFlowReturn
gst_pp_diffuse_chain (GstPad * pad, GstObject * parent, GstBuffer * buf)
{
  GstPpDiffuse *self = GST_PP_DIFFUSE (parent);
  GstPpDiffuseItem *item;
  GError *error = NULL;
  PpChunk *chunk;
  GstBuffer *out;
  GstFlowReturn ret;
  gboolean qos, leaky, leaky_set;
  gdouble threshold;

  GST_OBJECT_LOCK (self);
  qos = self->qos;
  leaky = self->leaky;
  leaky_set = self->leaky_set;
  GST_OBJECT_UNLOCK (self);
  g_mutex_lock (&self->lock);
  /* Unset, leaky follows upstream: live sources cannot wait. */
  if (!leaky_set)
    leaky = self->live;
  if (!self->have_info) {
    g_mutex_unlock (&self->lock);
    gst_buffer_unref (buf);
    GST_ELEMENT_ERROR (self, CORE, NEGOTIATION, (NULL),
        ("received a buffer before caps"));
    return GST_FLOW_NOT_NEGOTIATED;
  }
  /* Late frames and, when leaky, frames that find the mesh full are
   * dropped before any work is spent on them. */
  if (qos && frame_is_late (self, buf)) {
    drop_frame (self, buf, &self->dropped_qos, "too late for downstream");
    g_mutex_unlock (&self->lock);
    return GST_FLOW_OK;
  }
  if (leaky && self->srcresult == GST_FLOW_OK && !self->flushing
      && self->in_flight >= self->limit) {
    drop_frame (self, buf, &self->dropped_leaky, "the mesh is full");
    g_mutex_unlock (&self->lock);
    return GST_FLOW_OK;
  }
  ret = wait_for_room (self);
  if (ret != GST_FLOW_OK) {
    g_mutex_unlock (&self->lock);
    GST_DEBUG_OBJECT (self, "refusing buffer: %s", gst_flow_get_name (ret));
    gst_buffer_unref (buf);
    return ret;
  }
  item = item_take_frame (self);
  item->info = self->in_info;
  item->discont = self->discont_next;
  self->discont_next = FALSE;
  g_mutex_unlock (&self->lock);

  /* New settings must show even in a still scene: the frame they start
   * with is sent, whatever the similarity filter would say. */
  if (gst_pp_diffuse_take_settings (self))
    pp_similarity_filter_forget (self->similar);
  GST_OBJECT_LOCK (self);
  threshold = self->similarity_threshold;
  GST_OBJECT_UNLOCK (self);
  if (similar_to_last_sent (self, buf, &item->info, threshold))
    return queue_repeat (self, item, buf);
  item->keep_output = threshold > 0;

  chunk = gst_pp_diffuse_encode (self, buf, &item->info, &error);
  if (chunk == NULL) {
    GST_ELEMENT_ERROR (self, STREAM, FORMAT, ("Cannot read an input frame: %s",
            error->message), (NULL));
    g_error_free (error);
    item_recycle (self, item);
    gst_buffer_unref (buf);
    return GST_FLOW_ERROR;
  }
  /* Upstream's buffer goes back at once: the output is a copy of it. */
  out = gst_pp_diffuse_copy_to_output (self, buf, &item->info, &error);
  gst_buffer_unref (buf);
  if (out == NULL) {
    GST_ELEMENT_ERROR (self, RESOURCE, NO_SPACE_LEFT, ("No output buffer for "
            "a frame: %s", error->message), (NULL));
    g_error_free (error);
    pp_chunk_free (chunk);
    item_recycle (self, item);
    return GST_FLOW_ERROR;
  }

  if (!self->warmed_up && gst_pp_diffuse_warm_ups (self) > 0
      && !gst_pp_diffuse_warm_up (self, chunk, &item->info,
          gst_pp_diffuse_warm_ups (self))) {
    pp_chunk_free (chunk);
    item_recycle (self, item);
    gst_buffer_unref (out);
    return GST_FLOW_ERROR;
  }

  /* The item goes into the FIFO before the chunk goes out, so that the
   * collector always finds the frame its chunk belongs to. */
  g_mutex_lock (&self->lock);
  if (self->flushing) {
    self->frames_in++;
    self->dropped_flush++;
    item_recycle_locked (self, item);
    g_mutex_unlock (&self->lock);
    pp_chunk_free (chunk);
    gst_buffer_unref (out);
    return GST_FLOW_FLUSHING;
  }
  chunk->cache_epoch = self->cache_epoch;
  item->buffer = out;
  item->chunk_id = CHUNK_ID_UNSENT;
  self->submitting = item;
  g_queue_push_tail_link (&self->fifo, &item->link);
  self->in_flight++;
  self->outstanding++;
  self->frames_in++;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);

  /* The item may be flushed from here on: only the callback touches it. */
  if (!pp_mesh_submit (self->mesh, chunk, gst_pp_diffuse_chunk_assigned, self,
          &error)) {
    g_mutex_lock (&self->lock);
    self->submitting = NULL;
    self->srcresult = GST_FLOW_ERROR;
    self->mesh_failed = TRUE;
    g_cond_broadcast (&self->cond);
    g_mutex_unlock (&self->lock);
    GST_ELEMENT_ERROR (self, RESOURCE, WRITE,
        ("Cannot hand a frame to the ppdiffuse worker mesh: %s",
            error->message), (NULL));
    g_error_free (error);
    return GST_FLOW_ERROR;
  }
  /* Chunks of the mesh are never lost on the way: every worker has seen
   * the settings once this one went out. */
  g_clear_pointer (&self->unsent_uri, g_free);
  g_clear_pointer (&self->unsent_states, pp_tensor_free);
  return GST_FLOW_OK;
}

/* ---- src task: frames and events out, in order ------------------------ */

static GstFlowReturn
gst_pp_diffuse_push_frame (GstPpDiffuse * self, GstPpDiffuseItem * item)
{
  GstBuffer *out = gst_buffer_make_writable (g_steal_pointer (&item->buffer));
  GError *error = NULL;
  GstVideoFrame frame;
  PpImage image;
  PpTensor *sample = pp_chunk_get_tensor (item->result, PP_MODEL_SAMPLE_NAME);
  gboolean ok;

  if (!gst_video_frame_map (&frame, &item->info, out, GST_MAP_WRITE)) {
    gst_buffer_unref (out);
    GST_ELEMENT_ERROR (self, STREAM, FAILED, (NULL),
        ("cannot map an output frame for writing"));
    return GST_FLOW_ERROR;
  }
  image_from_frame (&frame, &image);
  ok = sample != NULL && pp_model_decode (self->model, sample, &image, &error);
  gst_video_frame_unmap (&frame);
  if (!ok) {
    GST_ELEMENT_ERROR (self, STREAM, DECODE,
        ("Chunk %" G_GUINT64_FORMAT " came back unusable: %s", item->chunk_id,
            error ? error->message : "it carries no sample tensor"), (NULL));
    g_clear_error (&error);
    gst_buffer_unref (out);
    return GST_FLOW_ERROR;
  }
  if (item->discont)
    GST_BUFFER_FLAG_SET (out, GST_BUFFER_FLAG_DISCONT);
  /* A reference, not a copy: downstream finds the buffer shared and copies
   * it before writing, so the repeats get these pixels. */
  if (item->keep_output)
    gst_buffer_replace (&self->last_output, out);
  else
    gst_clear_buffer (&self->last_output);
  GST_DEBUG_OBJECT (self, "pushing chunk %" G_GUINT64_FORMAT " pts %"
      GST_TIME_FORMAT, item->chunk_id, GST_TIME_ARGS (GST_BUFFER_PTS (out)));
  return gst_pad_push (self->srcpad, out);
}

/* A frame the similarity filter skipped: the pixels (and video meta) of
 * the last output, with the skipped frame's timestamps, offsets and flags,
 * DISCONT when frames were dropped just before it. */
static GstFlowReturn
gst_pp_diffuse_push_repeat (GstPpDiffuse * self, GstPpDiffuseItem * item)
{
  GstBuffer *out;

  /* The frame sent before it went out first, or its push failed and
   * stopped the task: a repeat always finds its frame. */
  if (self->last_output == NULL) {
    GST_ELEMENT_ERROR (self, STREAM, FAILED, (NULL),
        ("no output to repeat for the skipped frame %" GST_TIME_FORMAT,
            GST_TIME_ARGS (GST_BUFFER_PTS (item->buffer))));
    return GST_FLOW_ERROR;
  }
  out = gst_buffer_copy_region (self->last_output, GST_BUFFER_COPY_MEMORY
      | GST_BUFFER_COPY_META, 0, -1);
  gst_buffer_copy_into (out, item->buffer, GST_BUFFER_COPY_FLAGS
      | GST_BUFFER_COPY_TIMESTAMPS, 0, -1);
  if (item->discont)
    GST_BUFFER_FLAG_SET (out, GST_BUFFER_FLAG_DISCONT);
  GST_DEBUG_OBJECT (self, "pushing a repeat of %" GST_TIME_FORMAT " as %"
      GST_TIME_FORMAT, GST_TIME_ARGS (GST_BUFFER_PTS (self->last_output)),
      GST_TIME_ARGS (GST_BUFFER_PTS (out)));
  return gst_pad_push (self->srcpad, out);
}

static void
gst_pp_diffuse_loop (GstPad * pad)
{
  GstPpDiffuse *self = GST_PP_DIFFUSE (gst_pad_get_parent_element (pad));
  GstPpDiffuseItem *item;
  GstFlowReturn ret = GST_FLOW_OK;

  g_mutex_lock (&self->lock);
  for (;;) {
    if (self->flushing || self->srcresult != GST_FLOW_OK)
      goto pause;
    item = g_queue_peek_head (&self->fifo);
    if (item != NULL && (item->event != NULL || item->result != NULL
            || item->repeat))
      break;
    g_cond_wait (&self->cond, &self->lock);
  }
  g_queue_pop_head_link (&self->fifo);
  if (item->event == NULL)
    self->in_flight--;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);

  if (item->event != NULL) {
    GstEvent *event = g_steal_pointer (&item->event);
    gboolean eos = GST_EVENT_TYPE (event) == GST_EVENT_EOS;

    GST_DEBUG_OBJECT (self, "pushing %" GST_PTR_FORMAT, event);
    gst_pad_push_event (self->srcpad, event);
    if (eos)
      ret = GST_FLOW_EOS;
  } else {
    ret = item->repeat ? gst_pp_diffuse_push_repeat (self, item)
        : gst_pp_diffuse_push_frame (self, item);
    g_mutex_lock (&self->lock);
    if (ret == GST_FLOW_OK)
      self->frames_out++;
    else if (ret == GST_FLOW_FLUSHING)
      self->dropped_flush++;
    else
      self->dropped_error++;
    g_mutex_unlock (&self->lock);
  }
  item_recycle (self, item);
  if (ret != GST_FLOW_OK) {
    g_mutex_lock (&self->lock);
    if (self->srcresult == GST_FLOW_OK || ret == GST_FLOW_ERROR)
      self->srcresult = ret;
    g_cond_broadcast (&self->cond);
    g_mutex_unlock (&self->lock);
    if (ret == GST_FLOW_NOT_LINKED || ret < GST_FLOW_EOS)
      GST_ELEMENT_FLOW_ERROR (self, ret);
    gst_pad_pause_task (self->srcpad);
  }
  gst_object_unref (self);
  return;

pause:
  GST_DEBUG_OBJECT (self, "pausing task: %s%s", gst_flow_get_name
      (self->srcresult), self->flushing ? " (flushing)" : "");
  g_mutex_unlock (&self->lock);
  gst_pad_pause_task (self->srcpad);
  gst_object_unref (self);
}

/* ---- events and queries ------------------------------------------------ */

static gboolean
gst_pp_diffuse_queue_event (GstPpDiffuse * self, GstEvent * event)
{
  GstPpDiffuseItem *item;

  g_mutex_lock (&self->lock);
  if (self->flushing || self->srcresult == GST_FLOW_EOS) {
    g_mutex_unlock (&self->lock);
    GST_DEBUG_OBJECT (self, "dropping %" GST_PTR_FORMAT, event);
    gst_event_unref (event);
    return FALSE;
  }
  item = item_new_event (event);
  g_queue_push_tail_link (&self->fifo, &item->link);
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  return TRUE;
}

static gboolean
gst_pp_diffuse_sink_event (GstPad * pad, GstObject * parent, GstEvent * event)
{
  GstPpDiffuse *self = GST_PP_DIFFUSE (parent);

  switch (GST_EVENT_TYPE (event)) {
    case GST_EVENT_FLUSH_START:
      gst_pad_push_event (self->srcpad, event);
      g_mutex_lock (&self->lock);
      self->flushing = TRUE;
      self->srcresult = GST_FLOW_FLUSHING;
      g_cond_broadcast (&self->cond);
      g_mutex_unlock (&self->lock);
      /* The FIFO is emptied only once the src task has stopped: an event it
       * took from the FIFO may still be on its way out, and the sticky
       * events kept from the FIFO must land on the src pad after it (a
       * caps stored before the stream-start being pushed is misordered). */
      gst_pad_pause_task (self->srcpad);
      g_mutex_lock (&self->lock);
      fifo_flush (self, &self->dropped_flush);
      g_mutex_unlock (&self->lock);
      return TRUE;
    case GST_EVENT_FLUSH_STOP:
      gst_pad_push_event (self->srcpad, event);
      g_mutex_lock (&self->lock);
      self->flushing = FALSE;
      self->srcresult = GST_FLOW_OK;
      self->qos_earliest = GST_CLOCK_TIME_NONE;
      gst_segment_init (&self->segment, GST_FORMAT_UNDEFINED);
      /* Chunks of the new segment start a new stream state. */
      self->cache_epoch++;
      g_mutex_unlock (&self->lock);
      /* Serialized: the chain is not running. */
      pp_similarity_filter_forget (self->similar);
      return gst_pad_start_task (self->srcpad,
          (GstTaskFunction) gst_pp_diffuse_loop, self->srcpad, NULL);
    case GST_EVENT_CAPS:{
      GstCaps *caps;
      GstVideoInfo info;

      gst_event_parse_caps (event, &caps);
      if (!gst_video_info_from_caps (&info, caps)) {
        GST_ELEMENT_ERROR (self, CORE, NEGOTIATION, (NULL),
            ("invalid caps %" GST_PTR_FORMAT, caps));
        gst_event_unref (event);
        return FALSE;
      }
      g_mutex_lock (&self->lock);
      if (self->have_info && !gst_video_info_is_equal (&info, &self->in_info))
        self->cache_epoch++;
      self->in_info = info;
      self->have_info = TRUE;
      g_mutex_unlock (&self->lock);
      /* Frames of the new caps are compared among themselves. */
      pp_similarity_filter_forget (self->similar);
      GST_DEBUG_OBJECT (self, "input caps %" GST_PTR_FORMAT, caps);
      return gst_pp_diffuse_queue_event (self, event);
    }
    case GST_EVENT_SEGMENT:
      /* The chain converts frame times with it for QoS; the event itself
       * keeps its place among the frames in flight. */
      g_mutex_lock (&self->lock);
      gst_event_copy_segment (event, &self->segment);
      g_mutex_unlock (&self->lock);
      return gst_pp_diffuse_queue_event (self, event);
    default:
      if (GST_EVENT_IS_SERIALIZED (event))
        return gst_pp_diffuse_queue_event (self, event);
      return gst_pad_event_default (pad, parent, event);
  }
}

static gboolean
gst_pp_diffuse_sink_query (GstPad * pad, GstObject * parent, GstQuery * query)
{
  switch (GST_QUERY_TYPE (query)) {
    case GST_QUERY_ALLOCATION:
      gst_pp_diffuse_propose_allocation (GST_PP_DIFFUSE (parent), query);
      return TRUE;
    default:
      return gst_pad_query_default (pad, parent, query);
  }
}

/* QoS from downstream: remember the earliest running time a frame can
 * still be useful at (as video decoders do), then pass the event on. */
static gboolean
gst_pp_diffuse_src_event (GstPad * pad, GstObject * parent, GstEvent * event)
{
  GstPpDiffuse *self = GST_PP_DIFFUSE (parent);

  if (GST_EVENT_TYPE (event) == GST_EVENT_QOS) {
    GstQOSType type;
    gdouble proportion;
    GstClockTimeDiff diff;
    GstClockTime timestamp;

    gst_event_parse_qos (event, &type, &proportion, &diff, &timestamp);
    g_mutex_lock (&self->lock);
    if (diff > 0) {
      const GstClockTime duration = self->have_info
          && self->in_info.fps_n > 0 ? gst_util_uint64_scale_int (GST_SECOND,
          self->in_info.fps_d, self->in_info.fps_n) : 0;

      self->qos_earliest = timestamp + 2 * diff + duration;
    } else {
      self->qos_earliest = timestamp + diff;
    }
    g_mutex_unlock (&self->lock);
    GST_LOG_OBJECT (self, "QoS: frames before %" GST_TIME_FORMAT " are late",
        GST_TIME_ARGS (self->qos_earliest));
  }
  return gst_pad_event_default (pad, parent, event);
}

static gboolean
gst_pp_diffuse_src_query (GstPad * pad, GstObject * parent, GstQuery * query)
{
  GstPpDiffuse *self = GST_PP_DIFFUSE (parent);

  switch (GST_QUERY_TYPE (query)) {
    case GST_QUERY_LATENCY:{
      GstClockTime min, max, own_max = GST_CLOCK_TIME_NONE, frame;
      gboolean live;

      if (!gst_pad_peer_query (self->sinkpad, query))
        return FALSE;
      gst_query_parse_latency (query, &live, &min, &max);
      g_mutex_lock (&self->lock);
      self->live = live;
      g_mutex_unlock (&self->lock);
      g_mutex_lock (&self->lock);
      min += self->latency;
      self->reported_latency = self->latency;
      if (self->have_info && GST_VIDEO_INFO_FPS_N (&self->in_info) > 0) {
        frame = gst_util_uint64_scale_int (GST_SECOND,
            GST_VIDEO_INFO_FPS_D (&self->in_info),
            GST_VIDEO_INFO_FPS_N (&self->in_info));
        own_max = frame * MAX (self->limit, 1);
      }
      g_mutex_unlock (&self->lock);
      if (max != GST_CLOCK_TIME_NONE && own_max != GST_CLOCK_TIME_NONE)
        max += own_max;
      else
        max = GST_CLOCK_TIME_NONE;
      GST_DEBUG_OBJECT (self, "latency: live %d min %" GST_TIME_FORMAT
          " max %" GST_TIME_FORMAT, live, GST_TIME_ARGS (min),
          GST_TIME_ARGS (max));
      gst_query_set_latency (query, live, min, max);
      return TRUE;
    }
    default:
      return gst_pad_query_default (pad, parent, query);
  }
}

/* ---- pad activation ---------------------------------------------------- */

static gboolean
gst_pp_diffuse_src_activate_mode (GstPad * pad, GstObject * parent,
    GstPadMode mode, gboolean active)
{
  GstPpDiffuse *self = GST_PP_DIFFUSE (parent);

  if (mode != GST_PAD_MODE_PUSH)
    return FALSE;
  g_mutex_lock (&self->lock);
  self->flushing = !active;
  self->srcresult = active ? GST_FLOW_OK : GST_FLOW_FLUSHING;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  if (active)
    return gst_pad_start_task (pad, (GstTaskFunction) gst_pp_diffuse_loop,
        pad, NULL);
  return gst_pad_stop_task (pad);
}

static gboolean
gst_pp_diffuse_sink_activate_mode (GstPad * pad, GstObject * parent,
    GstPadMode mode, gboolean active)
{
  GstPpDiffuse *self = GST_PP_DIFFUSE (parent);

  if (mode != GST_PAD_MODE_PUSH)
    return FALSE;
  if (!active) {
    /* Wake a chain waiting for room; it returns FLUSHING. */
    g_mutex_lock (&self->lock);
    self->flushing = TRUE;
    g_cond_broadcast (&self->cond);
    g_mutex_unlock (&self->lock);
    GST_PAD_STREAM_LOCK (pad);
    GST_PAD_STREAM_UNLOCK (pad);
  }
  return TRUE;
}

/* ---- start / stop ------------------------------------------------------ */

static void gst_pp_diffuse_stop_mesh (GstPpDiffuse * self, gboolean keep);

static gboolean
gst_pp_diffuse_start (GstPpDiffuse * self)
{
  g_autofree gchar *model_uri = NULL, *worker = NULL, *hosts = NULL,
      *hostfile = NULL, *dump_dir = NULL, *key = NULL, *prompt_ref = NULL;
  g_autoptr (GPtrArray) inputs = NULL;
  GstPpDiffuseLive snapshot = { 0 };
  PpMeshConfig config = { 0 };
  PpTensor *states = NULL;
  GError *error = NULL;
  gboolean ok = FALSE, reused;
  PpBackend *backend;

  GST_OBJECT_LOCK (self);
  live_copy (&snapshot, &self->settings);
  live_copy (&self->accepted, &self->settings);
  config.n_workers = self->ranks;
  config.n_steps = self->steps;
  /* auto: $PPDIFFUSE_BACKEND when set, else the best this build has. */
  config.backend = self->backend == GST_PP_DIFFUSE_BACKEND_AUTO ? NULL
      : g_enum_get_value (g_type_class_peek (GST_TYPE_PP_DIFFUSE_BACKEND),
      self->backend)->value_nick;
  /* Copies: the mesh starts after the object lock is released. */
  config.worker_path = worker = g_strdup (self->worker);
  config.hosts = hosts = g_strdup (self->hosts);
  config.hostfile = hostfile = g_strdup (self->hostfile);
  config.dump_dir = dump_dir = g_strdup (self->dump_dir);
  config.timeout_ms = self->timeout_ms;
  /* The same seed, the same skips for the same frames. */
  pp_similarity_filter_reseed (self->similar, self->settings.seed);
  self->limit = self->max_in_flight ? self->max_in_flight : self->ranks + 1;
  /* A frame's chunk is freed after its push, which already made room for
   * the next frame: one more chunk than frames may be held. */
  config.max_in_flight = self->limit + 1;
  config.progress = gst_pp_diffuse_mesh_progress;
  config.progress_data = self;
  key = gst_pp_diffuse_mesh_key (&config);

  mesh_log_follow_threshold ();
  GST_OBJECT_UNLOCK (self);
  /* A text prompt is encoded on rank 0 before anything starts: the plan
   * names its states, the first chunk brings them to the workers. */
  if (has_prompt (&snapshot)) {
    backend = pp_backend_get (config.backend, &error);
    if (backend == NULL || !gst_pp_diffuse_encode_prompt (self, &snapshot,
            backend, &states, &prompt_ref, &error)) {
      GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS, ("%s", error->message),
          ("prompt=%s model=%s", snapshot.prompt, snapshot.model_uri));
      g_error_free (error);
      live_clear (&snapshot);
      return FALSE;
    }
    inputs = states_inputs (states);
  }
  model_uri = gst_pp_diffuse_model_uri (self, &snapshot, prompt_ref);
  live_clear (&snapshot);
  config.model = model_uri;
  /* A mesh kept by keep-workers serves when nothing it was started with
   * changed; else it ends here. */
  reused = gst_pp_diffuse_mesh_reusable (self, key, model_uri, inputs);
  if (reused) {
    gst_pp_diffuse_progress_start (self);
    goto mesh_up;
  }
  gst_pp_diffuse_stop_mesh (self, FALSE);
  /* Loading and spawning take a while: report where we are. */
  gst_pp_diffuse_progress_start (self);
  backend = pp_backend_get (config.backend, &error);
  if (backend == NULL)
    g_prefix_error (&error, "rank 0 (pid %d on %s): ", (gint) getpid (),
        g_get_host_name ());
  else if (config.backend == NULL && pp_backend_auto_reason () != NULL)
    GST_ELEMENT_WARNING (self, RESOURCE, SETTINGS,
        ("No usable CUDA device: ppdiffuse computes on the CPU (%s)",
            pp_backend_device (backend)), ("backend=auto passed over CUDA: "
            "%s", pp_backend_auto_reason ()));
  if (backend != NULL) {
    GST_INFO_OBJECT (self, "backend %s: %s", pp_backend_name (backend),
        pp_backend_device (backend));
    /* The workers use the very backend rank 0 resolved. */
    config.backend = pp_backend_name (backend);
    self->model = pp_model_new (config.model, config.n_steps,
        PP_MODEL_ROLE_IMAGE, backend, &error);
  }
  if (self->model != NULL)
    self->mesh = pp_mesh_start (&config, &error);
  ok = self->mesh != NULL;

  if (!ok) {
    gst_pp_diffuse_progress_error (self, error->message);
    if (error->domain == PP_ERROR && (error->code == PP_ERROR_CONFIG
            || error->code == PP_ERROR_MODEL))
      GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS, ("%s", error->message),
          ("ranks=%u steps=%u model=%s", config.n_workers, config.n_steps,
              config.model));
    else
      GST_ELEMENT_ERROR (self, RESOURCE, OPEN_READ_WRITE,
          ("Cannot start the ppdiffuse worker mesh: %s", error->message),
          ("ranks=%u steps=%u timeout-ms=%u", config.n_workers,
              config.n_steps, config.timeout_ms));
    g_error_free (error);
    g_clear_pointer (&self->model, pp_model_free);
    pp_tensor_free (states);
    return FALSE;
  }
  self->mesh_key = g_steal_pointer (&key);
mesh_up:
  GST_INFO_OBJECT (self, "mesh up: %u workers, %u steps, %u chunks in "
      "flight at most", config.n_workers, config.n_steps, self->limit);

  g_mutex_lock (&self->lock);
  self->in_flight = self->outstanding = 0;
  self->frames_in = self->frames_out = 0;
  self->dropped_flush = self->dropped_error = 0;
  self->dropped_qos = self->dropped_leaky = 0;
  self->skipped_similar = 0;
  /* The warm-up pass is once per mesh; a reused mesh's workers start a new
   * stream state. */
  if (reused) {
    self->cache_epoch++;
  } else {
    self->warmed_up = FALSE;
    g_atomic_int_set (&self->pace_checked, 0);
  }
  self->discont_next = FALSE;
  self->qos_earliest = GST_CLOCK_TIME_NONE;
  gst_segment_init (&self->segment, GST_FORMAT_UNDEFINED);
  self->latency = self->reported_latency = 0;
  pp_latency_tracker_reset (self->latencies);
  self->have_info = FALSE;
  self->collector_stop = FALSE;
  self->mesh_failed = FALSE;
  items_reserve (self, self->limit + 1);
  g_mutex_unlock (&self->lock);
  /* The chain encodes one frame at a time, and its chunk is given back
   * once sent. */
  self->chunks = pp_chunk_pool_new (1);
  self->sample_width = self->sample_height = 0;
  g_clear_pointer (&self->unsent_uri, g_free);
  g_clear_pointer (&self->unsent_states, pp_tensor_free);
  g_mutex_lock (&self->lock);
  if (!reused) {
    g_free (self->running_uri);
    self->running_uri = g_strdup (model_uri);
    /* The workers started without the prompt's states: the first chunk
     * brings them, with the URI that names them. */
    if (states != NULL) {
      self->unsent_uri = g_strdup (model_uri);
      self->unsent_states = g_steal_pointer (&states);
    }
  } else if (g_strcmp0 (self->running_uri, model_uri) != 0) {
    /* Settings changed while stopped: the first frame brings them. */
    g_free (self->next_uri);
    self->next_uri = g_strdup (model_uri);
    g_clear_pointer (&self->next_states, pp_tensor_free);
    self->next_states = g_steal_pointer (&states);
  }
  pp_tensor_free (states);
  self->settings_stop = self->settings_dirty = FALSE;
  self->settings_thread = g_thread_new ("ppdiffuse-settings",
      gst_pp_diffuse_settings_loop, self);
  g_mutex_unlock (&self->lock);
  self->collector = g_thread_new ("ppdiffuse-collect",
      gst_pp_diffuse_collector, self);
  gst_pp_diffuse_stats_timer_start (self->stats_timer, config.n_workers);
  gst_pp_diffuse_progress_complete (self);
  return TRUE;
}

/* Stops the settings thread; a change it had accepted but the chain had
 * not applied is in the properties, for the next start. */
static void
gst_pp_diffuse_stop_settings (GstPpDiffuse * self)
{
  GThread *thread;

  g_mutex_lock (&self->lock);
  self->settings_stop = TRUE;
  g_cond_signal (&self->settings_cond);
  thread = g_steal_pointer (&self->settings_thread);
  g_mutex_unlock (&self->lock);
  if (thread != NULL)
    g_thread_join (thread);
  g_mutex_lock (&self->lock);
  g_clear_pointer (&self->next_uri, g_free);
  g_clear_pointer (&self->next_states, pp_tensor_free);
  g_mutex_unlock (&self->lock);
  /* Applied on rank 0 but not yet sent: a kept mesh's workers must get
   * the settings at the next start, whatever they are then. */
  g_mutex_lock (&self->lock);
  if (self->unsent_uri != NULL)
    g_clear_pointer (&self->running_uri, g_free);
  g_mutex_unlock (&self->lock);
  g_clear_pointer (&self->unsent_uri, g_free);
  g_clear_pointer (&self->unsent_states, pp_tensor_free);
}

/* Ends the run; the mesh and rank 0's model are kept for the next start
 * when @keep and every chunk came back from a healthy mesh, else the mesh
 * is stopped. */
static void
gst_pp_diffuse_stop_mesh (GstPpDiffuse * self, gboolean keep)
{
  GError *error = NULL;
  PpMeshStats stats;

  if (self->mesh == NULL)
    return;
  gst_pp_diffuse_stats_timer_stop (self->stats_timer);
  gst_pp_diffuse_clear_output_pool (self);
  if (keep) {
    g_mutex_lock (&self->lock);
    fifo_flush (self, &self->dropped_flush);
    g_mutex_unlock (&self->lock);
    keep = gst_pp_diffuse_mesh_drain (self);
  }
  g_mutex_lock (&self->lock);
  self->collector_stop = TRUE;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  /* None when the mesh was kept by the last stop. */
  if (self->collector != NULL)
    g_thread_join (g_steal_pointer (&self->collector));
  gst_pp_diffuse_stop_settings (self);

  /* Frames still queued are lost to the stop, or to the error that
   * stopped the mesh. */
  g_mutex_lock (&self->lock);
  fifo_flush (self, self->mesh_failed ? &self->dropped_error
      : &self->dropped_flush);
  g_mutex_unlock (&self->lock);
  if (keep) {
    GST_INFO_OBJECT (self, "workers kept for the next start");
    g_clear_pointer (&self->chunks, pp_chunk_pool_unref);
    return;
  }
  g_clear_pointer (&self->mesh_key, g_free);

  if (!pp_mesh_stop (g_steal_pointer (&self->mesh), &stats, &error)) {
    GST_WARNING_OBJECT (self, "mesh did not stop cleanly: %s",
        error->message);
    g_error_free (error);
  } else {
    GST_INFO_OBJECT (self, "mesh stopped: %" G_GUINT64_FORMAT " chunks, "
        "overlap %.3f over %.3f s", stats.chunks, stats.overlap, stats.wall_s);
  }
  g_mutex_lock (&self->lock);
  self->mesh_stats = stats;
  /* Chunks the shutdown discarded are no longer in flight. */
  self->in_flight = self->outstanding = 0;
  g_mutex_unlock (&self->lock);
  g_clear_pointer (&self->chunks, pp_chunk_pool_unref);
  g_clear_pointer (&self->model, pp_model_free);
}

static void
gst_pp_diffuse_stop (GstPpDiffuse * self)
{
  gboolean keep;

  GST_OBJECT_LOCK (self);
  keep = self->keep_workers;
  GST_OBJECT_UNLOCK (self);
  gst_pp_diffuse_stop_mesh (self, keep);
}

static GstStateChangeReturn
gst_pp_diffuse_change_state (GstElement * element, GstStateChange transition)
{
  GstPpDiffuse *self = GST_PP_DIFFUSE (element);
  GstStateChangeReturn ret;

  if (transition == GST_STATE_CHANGE_READY_TO_PAUSED
      && !gst_pp_diffuse_start (self))
    return GST_STATE_CHANGE_FAILURE;

  ret = GST_ELEMENT_CLASS (gst_pp_diffuse_parent_class)->change_state
      (element, transition);

  if (transition == GST_STATE_CHANGE_PAUSED_TO_READY
      || (transition == GST_STATE_CHANGE_READY_TO_PAUSED
          && ret == GST_STATE_CHANGE_FAILURE))
    gst_pp_diffuse_stop (self);
  return ret;
}

/* ---- properties -------------------------------------------------------- */

static GstStructure *
gst_pp_diffuse_stats (GstPpDiffuse * self)
{
  return gst_pp_diffuse_stats_structure (self);
}

static void
replace_string (gchar ** field, const GValue * value)
{
  g_free (*field);
  *field = g_value_dup_string (value);
}

static void
gst_pp_diffuse_set_property (GObject * object, guint prop_id,
    const GValue * value, GParamSpec * pspec)
{
  GstPpDiffuse *self = GST_PP_DIFFUSE (object);

  GST_OBJECT_LOCK (self);
  switch (prop_id) {
    case PROP_RANKS:
      self->ranks = g_value_get_uint (value);
      break;
    case PROP_STEPS:
      self->steps = g_value_get_uint (value);
      break;
    case PROP_MAX_IN_FLIGHT:
      self->max_in_flight = g_value_get_uint (value);
      break;
    case PROP_MODEL:
      replace_string (&self->settings.model_uri, value);
      gst_pp_diffuse_settings_changed (self);
      break;
    case PROP_BACKEND:
      self->backend = g_value_get_enum (value);
      break;
    case PROP_DTYPE:
      self->dtype = g_value_get_enum (value);
      break;
    case PROP_CUDA_GRAPHS:
      self->cuda_graphs = g_value_get_boolean (value);
      break;
    case PROP_TIMEOUT_MS:
      self->timeout_ms = g_value_get_uint (value);
      break;
    case PROP_WORKER:
      replace_string (&self->worker, value);
      break;
    case PROP_HOSTS:
      replace_string (&self->hosts, value);
      break;
    case PROP_HOSTFILE:
      replace_string (&self->hostfile, value);
      break;
    case PROP_DUMP_DIR:
      replace_string (&self->dump_dir, value);
      break;
    case PROP_PROMPT:
      replace_string (&self->settings.prompt, value);
      /* One or the other: a prompt replaces a file of states. */
      if (has_prompt (&self->settings))
        g_clear_pointer (&self->settings.prompt_embeds, g_free);
      gst_pp_diffuse_settings_changed (self);
      break;
    case PROP_PROMPT_EMBEDS:
      replace_string (&self->settings.prompt_embeds, value);
      if (self->settings.prompt_embeds != NULL
          && *self->settings.prompt_embeds != '\0')
        g_clear_pointer (&self->settings.prompt, g_free);
      gst_pp_diffuse_settings_changed (self);
      break;
    case PROP_STRENGTH:
      self->settings.strength = g_value_get_double (value);
      gst_pp_diffuse_settings_changed (self);
      break;
    case PROP_SEED:
      self->settings.seed = g_value_get_uint64 (value);
      gst_pp_diffuse_settings_changed (self);
      break;
    case PROP_T_INDEX_LIST:
      replace_string (&self->settings.t_index_list, value);
      gst_pp_diffuse_settings_changed (self);
      break;
    case PROP_WARM_UP:
      self->warm_up = g_value_get_boolean (value);
      self->warm_up_set = TRUE;
      break;
    case PROP_LEAKY:
      self->leaky = g_value_get_boolean (value);
      self->leaky_set = TRUE;
      break;
    case PROP_QOS:
      self->qos = g_value_get_boolean (value);
      break;
    case PROP_STATS_INTERVAL_MS:
      self->stats_interval_ms = g_value_get_uint (value);
      break;
    case PROP_SIMILARITY_THRESHOLD:
      self->similarity_threshold = g_value_get_double (value);
      break;
    case PROP_KEEP_WORKERS:
      self->keep_workers = g_value_get_boolean (value);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK (self);
  if (prop_id == PROP_STATS_INTERVAL_MS)
    gst_pp_diffuse_stats_timer_wake (self->stats_timer);
}

static void
gst_pp_diffuse_get_property (GObject * object, guint prop_id, GValue * value,
    GParamSpec * pspec)
{
  GstPpDiffuse *self = GST_PP_DIFFUSE (object);

  if (prop_id == PROP_STATS) {
    g_value_take_boxed (value, gst_pp_diffuse_stats (self));
    return;
  }
  GST_OBJECT_LOCK (self);
  switch (prop_id) {
    case PROP_RANKS:
      g_value_set_uint (value, self->ranks);
      break;
    case PROP_STEPS:
      g_value_set_uint (value, self->steps);
      break;
    case PROP_MAX_IN_FLIGHT:
      g_value_set_uint (value, self->max_in_flight);
      break;
    case PROP_MODEL:
      g_value_set_string (value, self->settings.model_uri);
      break;
    case PROP_BACKEND:
      g_value_set_enum (value, self->backend);
      break;
    case PROP_DTYPE:
      g_value_set_enum (value, self->dtype);
      break;
    case PROP_CUDA_GRAPHS:
      g_value_set_boolean (value, self->cuda_graphs);
      break;
    case PROP_TIMEOUT_MS:
      g_value_set_uint (value, self->timeout_ms);
      break;
    case PROP_WORKER:
      g_value_set_string (value, self->worker);
      break;
    case PROP_HOSTS:
      g_value_set_string (value, self->hosts);
      break;
    case PROP_HOSTFILE:
      g_value_set_string (value, self->hostfile);
      break;
    case PROP_DUMP_DIR:
      g_value_set_string (value, self->dump_dir);
      break;
    case PROP_PROMPT:
      g_value_set_string (value, self->settings.prompt);
      break;
    case PROP_PROMPT_EMBEDS:
      g_value_set_string (value, self->settings.prompt_embeds);
      break;
    case PROP_STRENGTH:
      g_value_set_double (value, self->settings.strength);
      break;
    case PROP_SEED:
      g_value_set_uint64 (value, self->settings.seed);
      break;
    case PROP_T_INDEX_LIST:
      g_value_set_string (value, self->settings.t_index_list);
      break;
    case PROP_WARM_UP:
      g_value_set_boolean (value, self->warm_up);
      break;
    case PROP_LEAKY:
      if (self->leaky_set) {
        g_value_set_boolean (value, self->leaky);
      } else {
        /* The value in effect: upstream's liveness. */
        g_mutex_lock (&self->lock);
        g_value_set_boolean (value, self->live);
        g_mutex_unlock (&self->lock);
      }
      break;
    case PROP_QOS:
      g_value_set_boolean (value, self->qos);
      break;
    case PROP_STATS_INTERVAL_MS:
      g_value_set_uint (value, self->stats_interval_ms);
      break;
    case PROP_SIMILARITY_THRESHOLD:
      g_value_set_double (value, self->similarity_threshold);
      break;
    case PROP_KEEP_WORKERS:
      g_value_set_boolean (value, self->keep_workers);
      break;
    default:
      G_OBJECT_WARN_INVALID_PROPERTY_ID (object, prop_id, pspec);
      break;
  }
  GST_OBJECT_UNLOCK (self);
}

static void
gst_pp_diffuse_finalize (GObject * object)
{
  GstPpDiffuse *self = GST_PP_DIFFUSE (object);

  /* The end of workers kept by keep-workers. */
  gst_pp_diffuse_stop_mesh (self, FALSE);
  gst_pp_diffuse_clear_output_pool (self);
  g_free (self->mesh_key);
  items_free (&self->fifo);
  items_free (&self->spare_items);
  live_clear (&self->settings);
  live_clear (&self->accepted);
  gst_pp_diffuse_prompt_free (self->prompt_cache);
  g_free (self->running_uri);
  g_cond_clear (&self->settings_cond);
  gst_pp_diffuse_stats_timer_free (self->stats_timer);
  pp_latency_tracker_free (self->latencies);
  pp_similarity_filter_free (self->similar);
  gst_clear_buffer (&self->last_output);
  g_free (self->worker);
  g_free (self->hosts);
  g_free (self->hostfile);
  g_free (self->dump_dir);
  g_mutex_clear (&self->lock);
  g_cond_clear (&self->cond);
  G_OBJECT_CLASS (gst_pp_diffuse_parent_class)->finalize (object);
}

#define PARAM_FLAGS (G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | \
    GST_PARAM_MUTABLE_READY)
/* Live settings: see gst_pp_diffuse_check_settings. */
#define LIVE_PARAM_FLAGS (G_PARAM_READWRITE | G_PARAM_STATIC_STRINGS | \
    GST_PARAM_MUTABLE_PLAYING)

static void
gst_pp_diffuse_class_init (GstPpDiffuseClass * klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);

  gobject_class->set_property = gst_pp_diffuse_set_property;
  gobject_class->get_property = gst_pp_diffuse_get_property;
  gobject_class->finalize = gst_pp_diffuse_finalize;

  /**
   * GstPpDiffuse:ranks:
   *
   * Number of worker processes spawned through MPI; each runs a contiguous
   * slice of the denoising steps.
   */
  g_object_class_install_property (gobject_class, PROP_RANKS,
      g_param_spec_uint ("ranks", "Ranks",
          "Number of worker processes (each runs a slice of the steps); "
          "must not exceed steps", 1, PP_MESH_MAX_WORKERS, DEFAULT_RANKS,
          PARAM_FLAGS));
  /**
   * GstPpDiffuse:steps:
   *
   * Denoising steps per frame, split over the workers without dropping any.
   */
  g_object_class_install_property (gobject_class, PROP_STEPS,
      g_param_spec_uint ("steps", "Steps",
          "Denoising steps per frame; the first (steps mod ranks) workers "
          "run one extra step", 1, MAX_STEPS, DEFAULT_STEPS, PARAM_FLAGS));
  /**
   * GstPpDiffuse:max-in-flight:
   *
   * Frames allowed between submission to the mesh and their push
   * downstream; upstream blocks when that many are out.
   */
  g_object_class_install_property (gobject_class, PROP_MAX_IN_FLIGHT,
      g_param_spec_uint ("max-in-flight", "Max in flight",
          "Frames in flight at most (frames; 0 = ranks + 1)", 0,
          MAX_IN_FLIGHT_LIMIT, DEFAULT_MAX_IN_FLIGHT, PARAM_FLAGS));
  /**
   * GstPpDiffuse:model:
   *
   * The model, as a URI: builtin:stamp (proves the schedule) or
   * builtin:anisotropic (Perona–Malik diffusion), with optional
   * parameters such as builtin:stamp?step-ms=10, or a diffusers pipeline
   * directory.  While playing, a URI of the same model with other live
   * parameters (kappa, lambda, mark, step-ms) takes effect at the next
   * frame on every rank; another model needs a restart (a warning, and
   * the running one stays).
   */
  g_object_class_install_property (gobject_class, PROP_MODEL,
      g_param_spec_string ("model", "Model",
          "Model: builtin:anisotropic[?kappa=K&lambda=L], builtin:stamp"
          "[?mark=M] (step-ms=M adds M milliseconds per step), or a diffusers "
          "pipeline directory (unet/, vae/ = TAESD, scheduler/); its "
          "parameters change while playing", DEFAULT_MODEL,
          LIVE_PARAM_FLAGS));
  /**
   * GstPpDiffuse:backend:
   *
   * Where the workers compute.
   */
  g_object_class_install_property (gobject_class, PROP_BACKEND,
      g_param_spec_enum ("backend", "Backend",
          "Compute backend of the workers", GST_TYPE_PP_DIFFUSE_BACKEND,
          DEFAULT_BACKEND, PARAM_FLAGS));
  /**
   * GstPpDiffuse:dtype:
   *
   * How a diffusers pipeline's weights are stored on the backend: f32,
   * f16 or bf16; compute accumulates in f32 either way.  auto is f16 on
   * CUDA and f32 on the CPU backends; on the CPU a 16-bit dtype rounds the
   * weights to its precision, so that the CPU computes what a GPU would.
   * Every rank uses the same dtype (the handshake checks it).
   */
  g_object_class_install_property (gobject_class, PROP_DTYPE,
      g_param_spec_enum ("dtype", "Weight dtype",
          "Storage dtype of a pipeline's weights (auto: f16 on CUDA, f32 on "
          "the CPU)", GST_TYPE_PP_DIFFUSE_DTYPE, DEFAULT_DTYPE,
          PARAM_FLAGS));
  /**
   * GstPpDiffuse:cuda-graphs:
   *
   * Capture each worker's slice of steps as a CUDA graph after its first
   * run at a latent size, and launch the graph for every later chunk of
   * the same size and cache epoch (a new epoch or size captures again).
   * Only pipeline directories on the cuda backend capture; elsewhere the
   * steps run as usual (cpu-strict emulates the capture, for tests).  See
   * docs/operator/warm-up-and-cuda-graphs.md.
   */
  g_object_class_install_property (gobject_class, PROP_CUDA_GRAPHS,
      g_param_spec_boolean ("cuda-graphs", "CUDA graphs",
          "Capture each worker's steps as a CUDA graph after warm-up and "
          "launch it per chunk (default off)", DEFAULT_CUDA_GRAPHS,
          PARAM_FLAGS));
  /**
   * GstPpDiffuse:timeout-ms:
   *
   * How long a worker may be silent (no heartbeat) before it counts as
   * hung, and the deadline of the waits that do not scale with the work:
   * spawn, handshake, shutdown (MPI start-up and the spawn get at least
   * 10000 ms).  A wait on work (a chunk's send or
   * return, a worker computing one chunk) is allowed max (timeout-ms, 3 ×
   * what the mesh measured that work takes + timeout-ms / 4); before
   * anything is measured a step counts as 2 × timeout-ms.  When a
   * deadline passes the element posts an error naming the rank, the
   * times and what to change.
   */
  g_object_class_install_property (gobject_class, PROP_TIMEOUT_MS,
      g_param_spec_uint ("timeout-ms", "Timeout",
          "How long a worker may be silent, and the least deadline of any "
          "wait on the workers; waits on work get 3 x its measured time "
          "when that is longer (milliseconds)",
          MIN_TIMEOUT_MS, MAX_TIMEOUT_MS, DEFAULT_TIMEOUT_MS, PARAM_FLAGS));
  /**
   * GstPpDiffuse:worker:
   *
   * Path of the ppdiffuse-worker executable.  Unset: $PPDIFFUSE_WORKER,
   * else the installed one.
   */
  g_object_class_install_property (gobject_class, PROP_WORKER,
      g_param_spec_string ("worker", "Worker",
          "Path of ppdiffuse-worker (default: $PPDIFFUSE_WORKER, else the "
          "installed one)", NULL, PARAM_FLAGS));
  /**
   * GstPpDiffuse:hosts:
   *
   * Comma-separated hosts to run the workers on (MPI_Info "host").
   */
  g_object_class_install_property (gobject_class, PROP_HOSTS,
      g_param_spec_string ("hosts", "Hosts",
          "Comma-separated hosts for the workers, passed to MPI_Comm_spawn "
          "as \"host\" (default: none, this machine)", NULL, PARAM_FLAGS));
  /**
   * GstPpDiffuse:hostfile:
   *
   * Open MPI hostfile for the workers (MPI_Info "hostfile").
   */
  g_object_class_install_property (gobject_class, PROP_HOSTFILE,
      g_param_spec_string ("hostfile", "Hostfile",
          "Open MPI hostfile for the workers, passed to MPI_Comm_spawn as "
          "\"hostfile\" (default: none)", NULL, PARAM_FLAGS));
  /**
   * GstPpDiffuse:dump-dir:
   *
   * Folder for the flight recorders: when the mesh fails, every rank that
   * can writes its last events (chunk sends, receives, computes, missed
   * heartbeats) to ppdiffuse-rank<R>-pid<P>.txt there, as well as to the
   * log.
   */
  g_object_class_install_property (gobject_class, PROP_DUMP_DIR,
      g_param_spec_string ("dump-dir", "Dump folder",
          "Folder where each rank writes its flight recorder when the mesh "
          "fails (default: none, the log only)", NULL, PARAM_FLAGS));
  /**
   * GstPpDiffuse:prompt:
   *
   * A text prompt for a diffusers pipeline directory with tokenizer/ and
   * text_encoder/, or a weighted blend of prompts: "a watercolor city:0.7|
   * neon night:0.3" (weights normalised to sum 1, the prompts' hidden
   * states mixed with them; a part without ":WEIGHT" weighs 1).  Rank 0
   * encodes it off the streaming thread; while playing the new prompt takes
   * effect at the next frame on every rank at once, like any live setting.
   * Setting a prompt clears #GstPpDiffuse:prompt-embeds, and setting that
   * clears this.  A prompt over 77 tokens is cut, with a warning.
   */
  g_object_class_install_property (gobject_class, PROP_PROMPT,
      g_param_spec_string ("prompt", "Prompt",
          "Text prompt or blend 'text:weight|text:weight' for a pipeline "
          "with tokenizer/ and text_encoder/ (default: none; clears "
          "prompt-embeds)", NULL, LIVE_PARAM_FLAGS));
  /**
   * GstPpDiffuse:prompt-embeds:
   *
   * Text-encoder hidden states for a pipeline-directory model.
   */
  g_object_class_install_property (gobject_class, PROP_PROMPT_EMBEDS,
      g_param_spec_string ("prompt-embeds", "Prompt embeddings",
          "File (.npy or .safetensors) of encoder hidden states [1, L, D] "
          "for a diffusers pipeline model (default: none)", NULL,
          LIVE_PARAM_FLAGS));
  /**
   * GstPpDiffuse:strength:
   *
   * img2img strength: how far along the noise schedule each frame starts.
   */
  g_object_class_install_property (gobject_class, PROP_STRENGTH,
      g_param_spec_double ("strength", "Strength",
          "img2img strength of a pipeline model, 0 < strength <= 1 "
          "(fraction of the schedule; default 0.5)", 1e-6, 1.0,
          DEFAULT_STRENGTH, LIVE_PARAM_FLAGS));
  /**
   * GstPpDiffuse:seed:
   *
   * Seed of the noise; the same noise serves every frame.
   */
  g_object_class_install_property (gobject_class, PROP_SEED,
      g_param_spec_uint64 ("seed", "Seed",
          "Noise seed of a pipeline model (default 0)", 0, G_MAXUINT64,
          DEFAULT_SEED, LIVE_PARAM_FLAGS));
  /**
   * GstPpDiffuse:t-index-list:
   *
   * StreamDiffusion-style LCM timestep indices (t = 999 − 20·idx).
   */
  g_object_class_install_property (gobject_class, PROP_T_INDEX_LIST,
      g_param_spec_string ("t-index-list", "Timestep index list",
          "Comma-separated LCM timestep indices, t = 999 - 20*idx; as many "
          "as steps (default: none, the scheduler's own timesteps)", NULL,
          LIVE_PARAM_FLAGS));
  /**
   * GstPpDiffuse:warm-up:
   *
   * Before the first frame of a mesh, send a copy of it round the mesh and
   * wait for it to come back (in lockstep): every worker's first run of
   * its steps (allocations, caches, and on GPUs kernel selection) happens
   * before the stream starts.  The pass is flagged in its envelope and left
   * out of the output and of every statistic but "warm-up-passes".
   *
   * Unset, the backend decides: on a GPU (backend cuda) two passes run,
   * the first paying the set-up, the second measuring a steady frame (the
   * first frame of the stream then costs what a steady one does, and the
   * pace warning judges a steady frame); on the CPU backends none.  Set to
   * true: at least one pass on any backend; false: none.
   */
  g_object_class_install_property (gobject_class, PROP_WARM_UP,
      g_param_spec_boolean ("warm-up", "Warm-up pass",
          "Run warm-up passes round the mesh before the first frame "
          "(default: unset, two on a GPU backend, none on the CPU)", FALSE,
          PARAM_FLAGS));
  /**
   * GstPpDiffuse:leaky:
   *
   * What to do with a frame that arrives while max-in-flight frames are
   * in the mesh: block upstream until one leaves (off, for files and
   * other sources that can wait), or drop the new frame (on, for live
   * sources that cannot).  A dropped frame is counted as dropped-leaky
   * and announced with a QoS message; the next frame out is DISCONT.
   *
   * Until it is set, it follows upstream: on when the last LATENCY query
   * that went through the element found a live source upstream, off
   * otherwise (a pipeline queries latency before it goes to PLAYING, so a
   * live one is leaky from its first frame).  Setting it, to either value,
   * overrides that for the element's lifetime.  Reading it gives the
   * value in effect.
   */
  g_object_class_install_property (gobject_class, PROP_LEAKY,
      g_param_spec_boolean ("leaky", "Leaky",
          "Drop a new frame instead of blocking upstream while the mesh is "
          "full (default: unset, on when upstream is live, else off)", FALSE,
          PARAM_FLAGS));
  /**
   * GstPpDiffuse:qos:
   *
   * Handle downstream's QoS events (as GstBaseTransform's qos): on, a
   * frame that the last QoS event says would be late is dropped before
   * any work is spent on it (dropped-qos, a QOS message); off, every
   * frame goes through the mesh however late.  The events go upstream
   * either way.
   */
  g_object_class_install_property (gobject_class, PROP_QOS,
      g_param_spec_boolean ("qos", "QoS",
          "Drop frames that downstream's QoS events say would be late "
          "(default: on)", DEFAULT_QOS, G_PARAM_READWRITE |
          G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING));
  /**
   * GstPpDiffuse:stats-interval-ms:
   *
   * Every this many milliseconds while the mesh runs (PAUSED and PLAYING),
   * the element posts an element message whose structure, named
   * "ppdiffuse-stats", is what the stats property gives then: counters
   * since start and the figures of the interval just closed (frame rate,
   * latency percentiles, each worker's busy fraction).  0 posts none.
   * Posted from a thread of its own, whether frames flow or not.
   */
  g_object_class_install_property (gobject_class, PROP_STATS_INTERVAL_MS,
      g_param_spec_uint ("stats-interval-ms", "Statistics interval",
          "Period of the ppdiffuse-stats element message (milliseconds; "
          "0 = none; default 1000)", 0, MAX_STATS_INTERVAL_MS,
          DEFAULT_STATS_INTERVAL_MS, G_PARAM_READWRITE |
          G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING));
  /**
   * GstPpDiffuse:similarity-threshold:
   *
   * StreamDiffusion's stochastic similarity filter: each frame is compared
   * with the last frame sent to the mesh, by the cosine similarity of
   * 32×32 thumbnails (the mean R, G, B of each cell, mapped to [-1, 1]).
   * Above the threshold the frame is skipped with probability
   * max(0, 1 − (1 − similarity) / (1 − threshold)) (a draw seeded by
   * #GstPpDiffuse:seed), and the last output goes out again in its place,
   * with the skipped frame's timestamps and flags (counted in frames-out
   * and skipped-similar).  The first frame after a start, a flush, a caps
   * change or turning the filter on is always sent.  0 turns it off; a
   * change applies from the next frame, also while PLAYING.
   */
  g_object_class_install_property (gobject_class, PROP_SIMILARITY_THRESHOLD,
      g_param_spec_double ("similarity-threshold", "Similarity threshold",
          "Cosine similarity to the last frame sent above which a frame may "
          "be skipped and the last output repeated, 0..1 (default 0, off)",
          0.0, 1.0, DEFAULT_SIMILARITY_THRESHOLD, G_PARAM_READWRITE
          | G_PARAM_STATIC_STRINGS | GST_PARAM_MUTABLE_PLAYING));
  /**
   * GstPpDiffuse:keep-workers:
   *
   * Keep the worker mesh (and rank 0's model) up across stops: a stop
   * (PAUSED→READY, and so also →NULL) waits, up to timeout-ms, for every
   * chunk in flight to come back, discards it, and leaves the workers idle
   * (their heartbeats go on, so an idle mesh never times out); the next
   * start uses them again when ranks, steps, model and its start-only
   * parameters (prompt-embeds, strength, seed, t-index-list), backend,
   * dtype, cuda-graphs, timeout-ms, max-in-flight, worker, hosts,
   * hostfile and dump-dir are unchanged, with a new stream state (cache
   * epoch) and without a second warm-up pass.  The workers end when the
   * element is freed, when a start finds a setting changed (they are
   * spawned anew), and on any mesh error (a failed, idle-dead or
   * undrainable mesh is stopped as without this setting).  Off, every stop
   * ends the workers and every start spawns them.  While workers are kept,
   * mesh-chunks, mesh-wall-s and overlap-score in the stats stay those of
   * the last mesh that stopped.
   */
  g_object_class_install_property (gobject_class, PROP_KEEP_WORKERS,
      g_param_spec_boolean ("keep-workers", "Keep workers",
          "Keep the worker processes across stop and start while the "
          "settings they were spawned with are unchanged; they end when the "
          "element is freed (default: off, a stop ends them)", FALSE,
          PARAM_FLAGS));
  /**
   * GstPpDiffuse:stats:
   *
   * A "ppdiffuse-stats" structure: counters since start, percentiles of
   * the submit→return latency since start, the figures of the last
   * completed stats interval, and the figures of the last mesh stopped
   * (docs/element.md lists every field).
   */
  g_object_class_install_property (gobject_class, PROP_STATS,
      g_param_spec_boxed ("stats", "Statistics",
          "frames-in, frames-out, fps, latency percentiles (ns) of the "
          "interval and since start, in-flight, worker-busy, kv-cache-builds, "
          "overlap-score, "
          "the drop counters, cache-epoch, and mesh-chunks, mesh-wall-s of "
          "the last run",
          GST_TYPE_STRUCTURE, G_PARAM_READABLE | G_PARAM_STATIC_STRINGS));

  gst_element_class_add_static_pad_template (element_class, &sink_template);
  gst_element_class_add_static_pad_template (element_class, &src_template);
  gst_element_class_set_static_metadata (element_class,
      "Pipeline-parallel diffusion", "Filter/Effect/Video",
      "Restyles video with a diffusion model whose steps run "
      "pipeline-parallel over an MPI worker mesh",
      "ppdiffuse developers");
  element_class->change_state = gst_pp_diffuse_change_state;

  gst_type_mark_as_plugin_api (GST_TYPE_PP_DIFFUSE_BACKEND, 0);
  GST_DEBUG_CATEGORY_INIT (gst_pp_diffuse_debug, "ppdiffuse", 0,
      "pipeline-parallel diffusion");
  mesh_log_follow_threshold ();
}

static void
gst_pp_diffuse_init (GstPpDiffuse * self)
{
  self->sinkpad = gst_pad_new_from_static_template (&sink_template, "sink");
  gst_pad_set_chain_function (self->sinkpad, gst_pp_diffuse_chain);
  gst_pad_set_event_function (self->sinkpad, gst_pp_diffuse_sink_event);
  gst_pad_set_query_function (self->sinkpad, gst_pp_diffuse_sink_query);
  gst_pad_set_activatemode_function (self->sinkpad,
      gst_pp_diffuse_sink_activate_mode);
  GST_PAD_SET_PROXY_CAPS (self->sinkpad);
  gst_element_add_pad (GST_ELEMENT (self), self->sinkpad);

  self->srcpad = gst_pad_new_from_static_template (&src_template, "src");
  gst_pad_set_query_function (self->srcpad, gst_pp_diffuse_src_query);
  gst_pad_set_event_function (self->srcpad, gst_pp_diffuse_src_event);
  gst_pad_set_activatemode_function (self->srcpad,
      gst_pp_diffuse_src_activate_mode);
  GST_PAD_SET_PROXY_CAPS (self->srcpad);
  gst_element_add_pad (GST_ELEMENT (self), self->srcpad);

  g_mutex_init (&self->lock);
  g_cond_init (&self->cond);
  g_queue_init (&self->fifo);
  g_queue_init (&self->spare_items);
  self->ranks = DEFAULT_RANKS;
  self->steps = DEFAULT_STEPS;
  self->max_in_flight = DEFAULT_MAX_IN_FLIGHT;
  self->settings.model_uri = g_strdup (DEFAULT_MODEL);
  self->prompt_cache = gst_pp_diffuse_prompt_new ();
  g_cond_init (&self->settings_cond);
  self->backend = DEFAULT_BACKEND;
  self->dtype = DEFAULT_DTYPE;
  self->cuda_graphs = DEFAULT_CUDA_GRAPHS;
  self->timeout_ms = DEFAULT_TIMEOUT_MS;
  self->settings.strength = DEFAULT_STRENGTH;
  self->settings.seed = DEFAULT_SEED;
  self->similarity_threshold = DEFAULT_SIMILARITY_THRESHOLD;
  self->similar = pp_similarity_filter_new (DEFAULT_SEED);
  self->srcresult = GST_FLOW_FLUSHING;
  self->flushing = TRUE;
  self->qos = DEFAULT_QOS;
  self->stats_interval_ms = DEFAULT_STATS_INTERVAL_MS;
  self->latencies = pp_latency_tracker_new ();
  self->stats_timer = gst_pp_diffuse_stats_timer_new (self);
}
