/* GStreamer ppdiffuse — whether the mesh keeps up with the stream.
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */
#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstppdiffuse-pace.h"

GST_DEBUG_CATEGORY_EXTERN (gst_pp_diffuse_debug);
#define GST_CAT_DEFAULT gst_pp_diffuse_debug

gboolean
gst_pp_diffuse_pace_check (GstPpDiffuse * self, const GstVideoInfo * info)
{
  PpStreamPace pace;
  gint64 interval_us;
  guint timeout_ms;

  pp_stream_pace (self->stream, &pace);
  GST_INFO_OBJECT (self, "expected per frame (%s): %" G_GINT64_FORMAT
      " ms round the mesh, %" G_GINT64_FORMAT " ms on the slowest worker "
      "(rank %u); allowed %" G_GINT64_FORMAT " ms and %" G_GINT64_FORMAT
      " ms", pace.source, pace.round_us / 1000, pace.stage_us / 1000,
      pace.slowest + 1, pace.round_allowance_us / 1000,
      pace.stage_allowance_us / 1000);
  if (GST_VIDEO_INFO_FPS_N (info) <= 0 || GST_VIDEO_INFO_FPS_D (info) <= 0)
    return FALSE;
  interval_us = gst_util_uint64_scale_int (G_USEC_PER_SEC,
      GST_VIDEO_INFO_FPS_D (info), GST_VIDEO_INFO_FPS_N (info));
  /* Workers overlap: the mesh takes a frame every slowest slice. */
  if (pace.stage_us <= interval_us)
    return FALSE;
  GST_OBJECT_LOCK (self);
  timeout_ms = self->timeout_ms;
  GST_OBJECT_UNLOCK (self);
  /* The details tell this warning from the settings' (same domain and
   * code) and carry its figures for an application. */
  GST_ELEMENT_WARNING_WITH_DETAILS (self, RESOURCE, SETTINGS,
      ("ppdiffuse is too slow for this stream: one frame takes about %"
          G_GINT64_FORMAT " ms on the slowest worker (rank %u, steps [%u,%u))"
          " and %" G_GINT64_FORMAT " ms round the mesh (%s), but a frame "
          "comes every %.1f ms (%d/%d fps), %.1f× faster than the mesh "
          "can take them: frames will be dropped or the stream will slow "
          "down.  To keep up, %s.", pace.stage_us / 1000, pace.slowest + 1,
          pace.slice_first, pace.slice_end, pace.round_us / 1000,
          pace.source, interval_us / 1000.0, GST_VIDEO_INFO_FPS_N (info),
          GST_VIDEO_INFO_FPS_D (info), (gdouble) pace.stage_us / interval_us,
          pace.advice),
      ("%ux%u frames, ranks=%u, steps=%u; deadlines follow the measured "
          "time: a worker may compute one frame for up to %" G_GINT64_FORMAT
          " ms and a frame may take %" G_GINT64_FORMAT " ms round the mesh "
          "(timeout-ms %u is the least)",
          GST_VIDEO_INFO_WIDTH (info), GST_VIDEO_INFO_HEIGHT (info),
          pace.n_workers, pace.n_steps, pace.stage_allowance_us / 1000,
          pace.round_allowance_us / 1000, timeout_ms),
      ("ppdiffuse-warning", G_TYPE_STRING, "pace",
          "stage-ms", G_TYPE_DOUBLE, pace.stage_us / 1000.0,
          "round-ms", G_TYPE_DOUBLE, pace.round_us / 1000.0,
          "interval-ms", G_TYPE_DOUBLE, interval_us / 1000.0,
          "slowest-rank", G_TYPE_UINT, pace.slowest + 1, NULL));
  return TRUE;
}
