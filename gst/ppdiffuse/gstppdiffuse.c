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
#include "gstppdiffuse-props.h"
#include "gstppdiffuse-qos.h"
#include "gstppdiffuse-repeat.h"

GST_DEBUG_CATEGORY (gst_pp_diffuse_debug);
#define GST_CAT_DEFAULT gst_pp_diffuse_debug

/* Growth of the measured latency (the p95 of submit→return since start)
 * over the last reported one that makes us ask the pipeline to recompute
 * latency (a LATENCY message). */
#define LATENCY_REPORT_GROWTH 1.25
/* The chunk id of a frame in the FIFO until the mesh has assigned one. */
#define CHUNK_ID_UNSENT G_MAXUINT64

#define VIDEO_CAPS GST_VIDEO_CAPS_MAKE (GST_PP_DIFFUSE_FORMATS)

static GstStaticPadTemplate sink_template = GST_STATIC_PAD_TEMPLATE ("sink",
    GST_PAD_SINK, GST_PAD_ALWAYS, GST_STATIC_CAPS (VIDEO_CAPS));
static GstStaticPadTemplate src_template = GST_STATIC_PAD_TEMPLATE ("src",
    GST_PAD_SRC, GST_PAD_ALWAYS, GST_STATIC_CAPS (VIDEO_CAPS));

G_DEFINE_TYPE (GstPpDiffuse, gst_pp_diffuse, GST_TYPE_ELEMENT);
GST_ELEMENT_REGISTER_DEFINE (ppdiffuse, "ppdiffuse", GST_RANK_NONE,
    GST_TYPE_PP_DIFFUSE);

/* Clears @item and gives it back to the spare items or the heap. */
static void
item_recycle (GstPpDiffuse * self, GstPpDiffuseItem * item)
{
  gst_pp_diffuse_item_clear (item);
  g_mutex_lock (&self->lock);
  gst_pp_diffuse_item_recycle (&self->spare_items, item);
  g_mutex_unlock (&self->lock);
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
    gst_pp_diffuse_item_recycle (&self->spare_items, item);
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

/* ---- the engine's calls: frames back, errors, settings ---------------- */

/* Collector thread: a frame came back.  It belongs to the first frame of
 * the FIFO still waiting, or to a frame flushed while it was in the mesh
 * (a smaller chunk id): the engine keeps the order. */
static void
stream_returned (PpStreamFrame * result, gpointer data)
{
  GstPpDiffuse *self = data;
  GstPpDiffuseItem *item;
  const guint64 id = pp_stream_frame_id (result);
  GstClockTime took;
  gboolean grew;

  g_mutex_lock (&self->lock);
  item = fifo_first_pending (self);
  /* A frame whose id is not yet known (CHUNK_ID_UNSENT) cannot own a chunk
   * that is back: the mesh tells its id before the chunk goes out. */
  if (item == NULL || id < item->chunk_id) {
    GST_DEBUG_OBJECT (self, "discarding chunk %" G_GUINT64_FORMAT
        " of a flushed frame", id);
    self->in_flight--;
    g_cond_broadcast (&self->cond);
    g_mutex_unlock (&self->lock);
    pp_stream_frame_free (result);
    return;
  }
  g_assert (item->chunk_id == id);
  took = (g_get_monotonic_time () - pp_stream_frame_submit_us (result))
      * GST_USECOND;
  pp_latency_tracker_record (self->latencies, took);
  self->latency = pp_latency_histogram_percentile (&self->latencies->total,
      95);
  GST_DEBUG_OBJECT (self, "chunk %" G_GUINT64_FORMAT " back after %"
      GST_TIME_FORMAT, id, GST_TIME_ARGS (took));
  item->result = result;
  grew = self->latency > self->reported_latency * LATENCY_REPORT_GROWTH;
  /* Asked once per growth: the query answer updates reported_latency. */
  if (grew)
    self->reported_latency = self->latency;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
  if (grew) {
    GST_DEBUG_OBJECT (self, "latency grew to %" GST_TIME_FORMAT,
        GST_TIME_ARGS (self->latency));
    gst_element_post_message (GST_ELEMENT (self),
        gst_message_new_latency (GST_OBJECT (self)));
  }
}

static void
stream_failed (const GError * error, guint outstanding, gpointer data)
{
  GstPpDiffuse *self = data;

  /* Posted before the chain learns of it: the chain's flow error makes
   * upstream post its own ("Internal data stream error"), and the bus's
   * first error is the one an application shows. */
  GST_ELEMENT_ERROR (self, RESOURCE, READ,
      ("The ppdiffuse worker mesh stopped returning frames: %s",
          error->message), ("collecting a chunk failed; %u frames were in "
          "flight", outstanding));
  g_mutex_lock (&self->lock);
  self->srcresult = GST_FLOW_ERROR;
  self->mesh_failed = TRUE;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);
}

/* The mesh's first measure of the work: say early when the stream is too
 * fast for it. */
static void
stream_measured (gpointer data)
{
  GstPpDiffuse *self = data;
  GstVideoInfo info;

  g_mutex_lock (&self->lock);
  info = self->in_info;
  g_mutex_unlock (&self->lock);
  gst_pp_diffuse_pace_check (self, &info);
}

static void
stream_warning (const gchar * message, const gchar * details, gpointer data)
{
  GstPpDiffuse *self = data;

  GST_ELEMENT_WARNING (self, RESOURCE, SETTINGS, ("%s", message), ("%s",
          details));
}

/* ---- chain: frames into the mesh -------------------------------------- */

/* The frame of @buf, encoded; NULL with the error posted. */
static PpStreamFrame *
gst_pp_diffuse_encode (GstPpDiffuse * self, GstBuffer * buf,
    const GstVideoInfo * info)
{
  GError *error = NULL;
  PpImage image;
  PpStreamFrame *encoded;

  if (!gst_pp_diffuse_rgb_read (self->rgb_in, info, buf, &image, &error)) {
    GST_ELEMENT_ERROR (self, STREAM, FORMAT, ("Cannot read an input frame: "
            "%s", error->message), (NULL));
    g_error_free (error);
    return NULL;
  }
  encoded = pp_stream_encode (self->stream, &image, GST_BUFFER_PTS (buf),
      &error);
  gst_pp_diffuse_rgb_end (self->rgb_in, FALSE);
  if (encoded == NULL) {
    GST_ELEMENT_ERROR (self, STREAM, ENCODE, ("Cannot encode an input "
            "frame: %s", error->message), (NULL));
    g_error_free (error);
  }
  return encoded;
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

/* The warm-up passes, on the first frame of a mesh: copies of @frame go
 * round the mesh before it. */
static gboolean
gst_pp_diffuse_warm_up (GstPpDiffuse * self, const PpStreamFrame * frame)
{
  GError *error = NULL;

  if (pp_stream_warm_up (self->stream, frame, &error))
    return TRUE;
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

static GstFlowReturn
gst_pp_diffuse_chain (GstPad * pad, GstObject * parent, GstBuffer * buf)
{
  GstPpDiffuse *self = GST_PP_DIFFUSE (parent);
  GstPpDiffuseItem *item;
  GError *error = NULL;
  PpStreamFrame *chunk;
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
  if (qos && gst_pp_diffuse_frame_is_late (self, buf)) {
    gst_pp_diffuse_drop_frame (self, buf, &self->dropped_qos, "too late for downstream");
    g_mutex_unlock (&self->lock);
    return GST_FLOW_OK;
  }
  if (leaky && self->srcresult == GST_FLOW_OK && !self->flushing
      && self->in_flight >= self->limit) {
    gst_pp_diffuse_drop_frame (self, buf, &self->dropped_leaky, "the mesh is full");
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
  item = gst_pp_diffuse_item_take_frame (&self->spare_items,
      &self->n_spare_items);
  item->info = self->in_info;
  item->discont = self->discont_next;
  self->discont_next = FALSE;
  g_mutex_unlock (&self->lock);

  /* New settings must show even in a still scene: the frame they start
   * with is sent, whatever the similarity filter would say. */
  if (pp_stream_take_settings (self->stream))
    pp_similarity_filter_forget (self->similar);
  GST_OBJECT_LOCK (self);
  threshold = self->similarity_threshold;
  GST_OBJECT_UNLOCK (self);
  if (gst_pp_diffuse_similar_to_last_sent (self, buf, &item->info, threshold))
    return gst_pp_diffuse_queue_repeat (self, item, buf);
  item->keep_output = threshold > 0;

  chunk = gst_pp_diffuse_encode (self, buf, &item->info);
  if (chunk == NULL) {
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
    pp_stream_frame_free (chunk);
    item_recycle (self, item);
    return GST_FLOW_ERROR;
  }

  if (!gst_pp_diffuse_warm_up (self, chunk)) {
    pp_stream_frame_free (chunk);
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
    gst_pp_diffuse_item_recycle (&self->spare_items, item);
    g_mutex_unlock (&self->lock);
    pp_stream_frame_free (chunk);
    gst_buffer_unref (out);
    return GST_FLOW_FLUSHING;
  }
  item->buffer = out;
  item->chunk_id = CHUNK_ID_UNSENT;
  self->submitting = item;
  g_queue_push_tail_link (&self->fifo, &item->link);
  self->in_flight++;
  self->frames_in++;
  g_cond_broadcast (&self->cond);
  g_mutex_unlock (&self->lock);

  /* The item may be flushed from here on: only the callback touches it. */
  if (!pp_stream_submit (self->stream, chunk, gst_pp_diffuse_chunk_assigned,
          self, &error)) {
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
  return GST_FLOW_OK;
}

/* ---- src task: frames and events out, in order ------------------------ */

static GstFlowReturn
gst_pp_diffuse_push_frame (GstPpDiffuse * self, GstPpDiffuseItem * item)
{
  GstBuffer *out = gst_buffer_make_writable (g_steal_pointer (&item->buffer));
  GError *error = NULL;
  PpImage image;
  gboolean ok;

  if (!gst_pp_diffuse_rgb_write (self->rgb_out, &item->info, out, &image,
          &error)) {
    gst_buffer_unref (out);
    GST_ELEMENT_ERROR (self, STREAM, FAILED, (NULL),
        ("cannot write an output frame: %s", error->message));
    g_clear_error (&error);
    return GST_FLOW_ERROR;
  }
  ok = pp_stream_decode (self->stream, item->result, &image, &error);
  gst_pp_diffuse_rgb_end (self->rgb_out, ok);
  if (!ok) {
    GST_ELEMENT_ERROR (self, STREAM, DECODE,
        ("Cannot decode chunk %" G_GUINT64_FORMAT ": %s", item->chunk_id,
            error->message), (NULL));
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
  item = gst_pp_diffuse_item_new_event (event);
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
      g_mutex_unlock (&self->lock);
      /* Chunks of the new segment start a new stream state. */
      pp_stream_new_epoch (self->stream);
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
        pp_stream_new_epoch (self->stream);
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

  if (GST_EVENT_TYPE (event) == GST_EVENT_QOS)
    gst_pp_diffuse_qos_update (self, event);
  return gst_pad_event_default (pad, parent, event);
}

static gboolean
gst_pp_diffuse_src_query (GstPad * pad, GstObject * parent, GstQuery * query)
{
  GstPpDiffuse *self = GST_PP_DIFFUSE (parent);

  switch (GST_QUERY_TYPE (query)) {
    case GST_QUERY_LATENCY:
      return gst_pp_diffuse_answer_latency (self, query);
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

/* stream-batch or frame-batch with nothing to batch: a warning that says
 * what to change.  The longest slice has ceil (steps / ranks) steps; a
 * stream batch needs two steps on a worker, and either batch needs two
 * frames in flight (full batches want about steps + ranks, or (ranks + 1)
 * × frame-batch: docs/element.md). */
static void
batch_check (GstPpDiffuse * self, gboolean stream_batch, guint frame_batch,
    guint ranks, guint steps, guint limit)
{
  const guint longest = (steps + ranks - 1) / ranks;

  if (frame_batch > 1 && limit < 2)
    GST_ELEMENT_WARNING (self, RESOURCE, SETTINGS, ("frame-batch has "
            "nothing to batch: max-in-flight lets one frame in flight "
            "(about %u fill every worker's batch)", (ranks + 1)
            * frame_batch), ("ranks=%u frame-batch=%u max-in-flight=%u",
            ranks, frame_batch, limit));
  if (!stream_batch || (frame_batch > 1 && limit < 2))
    return;
  if (longest < 2)
    GST_ELEMENT_WARNING (self, RESOURCE, SETTINGS, ("stream-batch has "
            "nothing to batch: each of the %u workers runs one of the %u "
            "steps (use fewer ranks or more steps)", ranks, steps),
        ("ranks=%u steps=%u", ranks, steps));
  else if (limit < 2)
    GST_ELEMENT_WARNING (self, RESOURCE, SETTINGS, ("stream-batch has "
            "nothing to batch: max-in-flight lets one frame in flight "
            "(about %u fill every worker's batch)", steps + ranks),
        ("ranks=%u steps=%u max-in-flight=%u", ranks, steps, limit));
}

static gboolean
gst_pp_diffuse_start (GstPpDiffuse * self)
{
  g_autofree gchar *worker = NULL, *hosts = NULL, *hostfile = NULL,
      *dump_dir = NULL, *vae = NULL, *lora = NULL, *backend = NULL;
  PpSettings snapshot = { 0 };
  PpStreamConfig config = { 0 };
  GError *error = NULL;
  gboolean ok, reused = FALSE;

  GST_OBJECT_LOCK (self);
  pp_settings_copy (&snapshot, &self->settings);
  pp_settings_copy (&self->accepted, &self->settings);
  config.n_workers = self->ranks;
  config.n_steps = self->steps;
  /* auto: $PPDIFFUSE_BACKEND when set, else the best this build has; a
   * GPU named asks for cuda on it. */
  config.backend = self->backend == GST_PP_DIFFUSE_BACKEND_AUTO ? NULL
      : g_enum_get_value (g_type_class_peek (GST_TYPE_PP_DIFFUSE_BACKEND),
      self->backend)->value_nick;
  if (self->cuda_device_id >= 0) {
    if (self->backend == GST_PP_DIFFUSE_BACKEND_AUTO
        || self->backend == GST_PP_DIFFUSE_BACKEND_CUDA)
      config.backend = backend = g_strdup_printf ("cuda:%d",
          self->cuda_device_id);
    else
      error = g_error_new (PP_ERROR, PP_ERROR_CONFIG, "cuda-device-id=%d "
          "names a GPU of the cuda backend, and backend is %s: set "
          "backend=cuda (or auto), or leave cuda-device-id unset (-1)",
          self->cuda_device_id, config.backend);
  }
  config.dtype = self->dtype == GST_PP_DIFFUSE_DTYPE_AUTO ? NULL
      : g_enum_get_value (g_type_class_peek (GST_TYPE_PP_DIFFUSE_DTYPE),
      self->dtype)->value_nick;
  config.cuda_graphs = !self->cuda_graphs_set ? -1 : self->cuda_graphs;
  config.stream_batch = self->stream_batch;
  config.frame_batch = self->frame_batch;
  /* Copies: the mesh starts after the object lock is released. */
  config.vae = vae = g_strdup (self->vae);
  config.lora = lora = g_strdup (self->lora);
  config.worker_path = worker = g_strdup (self->worker);
  config.hosts = hosts = g_strdup (self->hosts);
  config.hostfile = hostfile = g_strdup (self->hostfile);
  config.dump_dir = dump_dir = g_strdup (self->dump_dir);
  config.timeout_ms = self->timeout_ms;
  config.warm_up = !self->warm_up_set ? -1 : self->warm_up ? 1 : 0;
  /* The same seed, the same skips for the same frames. */
  pp_similarity_filter_reseed (self->similar, self->settings.seed);
  self->limit = self->max_in_flight ? self->max_in_flight
      : (self->ranks + 1) * self->frame_batch;
  /* A frame's chunk is freed after its push, which already made room for
   * the next frame: one more chunk than frames may be held. */
  config.max_in_flight = self->limit + 1;
  gst_pp_diffuse_log_follow_threshold ();
  GST_OBJECT_UNLOCK (self);

  /* Loading and spawning take a while: report where we are. */
  gst_pp_diffuse_progress_start (self);
  ok = error == NULL
      && pp_stream_start (self->stream, &config, &snapshot, &reused, &error);
  if (!ok) {
    gst_pp_diffuse_progress_error (self, error->message);
    if (error->domain == PP_ERROR && (error->code == PP_ERROR_CONFIG
            || error->code == PP_ERROR_MODEL))
      GST_ELEMENT_ERROR (self, RESOURCE, SETTINGS, ("%s", error->message),
          ("ranks=%u steps=%u model=%s prompt=%s", config.n_workers,
              config.n_steps, snapshot.model, snapshot.prompt));
    else
      GST_ELEMENT_ERROR (self, RESOURCE, OPEN_READ_WRITE,
          ("Cannot start the ppdiffuse worker mesh: %s", error->message),
          ("ranks=%u steps=%u timeout-ms=%u", config.n_workers,
              config.n_steps, config.timeout_ms));
    g_error_free (error);
    pp_settings_clear (&snapshot);
    return FALSE;
  }
  pp_settings_clear (&snapshot);
  GST_INFO_OBJECT (self, "mesh %s: %u workers, %u steps, %u chunks in "
      "flight at most", reused ? "reused" : "up", config.n_workers,
      config.n_steps, self->limit);
  batch_check (self, config.stream_batch, config.frame_batch,
      config.n_workers, config.n_steps, self->limit);

  g_mutex_lock (&self->lock);
  self->in_flight = 0;
  self->frames_in = self->frames_out = 0;
  self->dropped_flush = self->dropped_error = 0;
  self->dropped_qos = self->dropped_leaky = 0;
  self->skipped_similar = 0;
  self->discont_next = FALSE;
  self->qos_earliest = GST_CLOCK_TIME_NONE;
  gst_segment_init (&self->segment, GST_FORMAT_UNDEFINED);
  self->latency = self->reported_latency = 0;
  pp_latency_tracker_reset (self->latencies);
  self->have_info = FALSE;
  self->mesh_failed = FALSE;
  gst_pp_diffuse_items_reserve (&self->spare_items, &self->n_spare_items,
      self->limit + 1);
  g_mutex_unlock (&self->lock);
  gst_pp_diffuse_stats_timer_start (self->stats_timer, config.n_workers);
  gst_pp_diffuse_progress_complete (self);
  return TRUE;
}

/* Ends the run; the mesh and rank 0's model are kept for the next start
 * when @keep and every chunk came back from a healthy mesh, else the mesh
 * is stopped. */
static void
gst_pp_diffuse_stop_mesh (GstPpDiffuse * self, gboolean keep)
{
  if (!pp_stream_running (self->stream))
    return;
  gst_pp_diffuse_stats_timer_stop (self->stats_timer);
  gst_pp_diffuse_clear_output_pool (self);
  /* The frames still in the mesh come back to a flushed FIFO and are
   * discarded. */
  if (keep) {
    g_mutex_lock (&self->lock);
    fifo_flush (self, &self->dropped_flush);
    g_mutex_unlock (&self->lock);
  }
  keep = pp_stream_halt (self->stream, keep);
  /* Frames still queued are lost to the stop, or to the error that
   * stopped the mesh. */
  g_mutex_lock (&self->lock);
  fifo_flush (self, self->mesh_failed ? &self->dropped_error
      : &self->dropped_flush);
  g_mutex_unlock (&self->lock);
  if (keep)
    return;
  pp_stream_release (self->stream);
  g_mutex_lock (&self->lock);
  /* Chunks the shutdown discarded are no longer in flight. */
  self->in_flight = 0;
  g_mutex_unlock (&self->lock);
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

/* ---- the object -------------------------------------------------------- */

static void
gst_pp_diffuse_finalize (GObject * object)
{
  GstPpDiffuse *self = GST_PP_DIFFUSE (object);

  /* The end of workers kept by keep-workers. */
  gst_pp_diffuse_stop_mesh (self, FALSE);
  pp_stream_free (self->stream);
  gst_pp_diffuse_clear_output_pool (self);
  gst_pp_diffuse_items_free (&self->fifo);
  gst_pp_diffuse_items_free (&self->spare_items);
  pp_settings_clear (&self->settings);
  pp_settings_clear (&self->accepted);

  gst_pp_diffuse_stats_timer_free (self->stats_timer);
  pp_latency_tracker_free (self->latencies);
  pp_similarity_filter_free (self->similar);
  gst_pp_diffuse_rgb_free (self->rgb_in);
  gst_pp_diffuse_rgb_free (self->rgb_out);
  gst_clear_buffer (&self->last_output);
  g_free (self->worker);
  g_free (self->hosts);
  g_free (self->hostfile);
  g_free (self->vae);
  g_free (self->lora);
  g_free (self->dump_dir);
  g_mutex_clear (&self->lock);
  g_cond_clear (&self->cond);
  G_OBJECT_CLASS (gst_pp_diffuse_parent_class)->finalize (object);
}

static void
gst_pp_diffuse_class_init (GstPpDiffuseClass * klass)
{
  GObjectClass *gobject_class = G_OBJECT_CLASS (klass);
  GstElementClass *element_class = GST_ELEMENT_CLASS (klass);

  gobject_class->finalize = gst_pp_diffuse_finalize;
  gst_pp_diffuse_install_properties (gobject_class);

  gst_element_class_add_static_pad_template (element_class, &sink_template);
  gst_element_class_add_static_pad_template (element_class, &src_template);
  gst_element_class_set_static_metadata (element_class,
      "Pipeline-parallel diffusion", "Filter/Effect/Video",
      "Restyles video with a diffusion model whose steps run "
      "pipeline-parallel over an MPI worker mesh",
      "ppdiffuse developers");
  element_class->change_state = gst_pp_diffuse_change_state;

  GST_DEBUG_CATEGORY_INIT (gst_pp_diffuse_debug, "ppdiffuse", 0,
      "pipeline-parallel diffusion");
  gst_pp_diffuse_log_follow_threshold ();
}

static const PpStreamCallbacks stream_callbacks = {
  .progress = gst_pp_diffuse_mesh_progress,
  .returned = stream_returned,
  .failed = stream_failed,
  .measured = stream_measured,
  .snapshot = gst_pp_diffuse_props_snapshot,
  .accepted = gst_pp_diffuse_props_accepted,
  .refused = gst_pp_diffuse_props_refused,
  .warning = stream_warning,
};

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
  gst_pp_diffuse_props_init (self);
  self->similar = pp_similarity_filter_new (self->settings.seed);
  self->rgb_in = gst_pp_diffuse_rgb_new ();
  self->rgb_out = gst_pp_diffuse_rgb_new ();
  self->srcresult = GST_FLOW_FLUSHING;
  self->flushing = TRUE;
  self->latencies = pp_latency_tracker_new ();
  self->stats_timer = gst_pp_diffuse_stats_timer_new (self);
  self->stream = pp_stream_new (&stream_callbacks, self);
}
