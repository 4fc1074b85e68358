/* GStreamer ppdiffuse — QoS and latency: the frames too late for
 * downstream, and what the element adds to the pipeline's latency.
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstppdiffuse-qos.h"

GST_DEBUG_CATEGORY_EXTERN (gst_pp_diffuse_debug);
#define GST_CAT_DEFAULT gst_pp_diffuse_debug

/* Counts a frame dropped before it reached the mesh, tells the
 * application with a QoS message, and marks the next frame out DISCONT.
 * Called with the lock held; takes @buf. */
void
gst_pp_diffuse_drop_frame (GstPpDiffuse * self, GstBuffer * buf, guint64 * counter,
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
gboolean
gst_pp_diffuse_frame_is_late (GstPpDiffuse * self, GstBuffer * buf)
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

/* Remembers the earliest running time a frame can still be useful at (as
 * video decoders do). */
void
gst_pp_diffuse_qos_update (GstPpDiffuse * self, GstEvent * event)
{
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

gboolean
gst_pp_diffuse_answer_latency (GstPpDiffuse * self, GstQuery * query)
{
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
