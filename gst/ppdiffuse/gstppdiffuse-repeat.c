/* GStreamer ppdiffuse — the similarity filter's repeats: a frame alike
 * the last one sent is skipped, and the last output goes out again in its
 * place, in order.
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstppdiffuse-repeat.h"
#include "gstppdiffuse-pool.h"

GST_DEBUG_CATEGORY_EXTERN (gst_pp_diffuse_debug);
#define GST_CAT_DEFAULT gst_pp_diffuse_debug

/* The similarity filter: TRUE when @buf is to be skipped, alike the last
 * frame sent to the mesh (gstppdiffuse-similarity.h has the rule).  A
 * frame let through becomes the reference.  Chain thread only. */
gboolean
gst_pp_diffuse_similar_to_last_sent (GstPpDiffuse * self, GstBuffer * buf,
    const GstVideoInfo * info, gdouble threshold)
{
  PpImage image;
  gdouble similarity;
  gboolean skip;

  if (threshold <= 0) {
    pp_similarity_filter_forget (self->similar);
    return FALSE;
  }
  /* An unreadable frame goes on: the encode reports it. */
  if (!gst_pp_diffuse_rgb_read (self->rgb_in, info, buf, &image, NULL))
    return FALSE;
  skip = pp_similarity_filter_skip (self->similar, &image, threshold,
      &similarity);
  gst_pp_diffuse_rgb_end (self->rgb_in, FALSE);
  GST_LOG_OBJECT (self, "frame %" GST_TIME_FORMAT ": similarity %.5f to the "
      "last frame sent, %s", GST_TIME_ARGS (GST_BUFFER_PTS (buf)), similarity,
      skip ? "skipped" : "sent");
  return skip;
}

/* Files a frame the similarity filter skipped: a repeat item takes its
 * place in the FIFO, so that the last output goes out again in its stead,
 * in order.  Takes @buf and @item. */
GstFlowReturn
gst_pp_diffuse_queue_repeat (GstPpDiffuse * self, GstPpDiffuseItem * item, GstBuffer * buf)
{
  g_mutex_lock (&self->lock);
  self->frames_in++;
  if (self->flushing) {
    self->dropped_flush++;
    gst_pp_diffuse_item_recycle (&self->spare_items, item);
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

/* A frame the similarity filter skipped: the pixels (and video meta) of
 * the last output, with the skipped frame's timestamps, offsets and flags,
 * DISCONT when frames were dropped just before it. */
GstFlowReturn
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
