/* GStreamer ppdiffuse — QoS and latency.
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */
#pragma once

#include "gstppdiffuse.h"

G_BEGIN_DECLS

/* Counts a frame dropped before it reached the mesh in *@counter, posts a
 * QoS message, and marks the next frame out DISCONT.  Called with the
 * lock held (released while posting); takes @buf. */
void     gst_pp_diffuse_drop_frame     (GstPpDiffuse * self, GstBuffer * buf,
                                        guint64 * counter, const gchar * why);
/* TRUE when downstream's last QoS event says @buf would be late.  Called
 * with the lock held. */
gboolean gst_pp_diffuse_frame_is_late  (GstPpDiffuse * self, GstBuffer * buf);
/* A QoS event from downstream. */
void     gst_pp_diffuse_qos_update     (GstPpDiffuse * self, GstEvent * event);
/* Answers a LATENCY query: upstream's, plus the measured submit→return
 * latency (min) and max-in-flight frame intervals (max). */
gboolean gst_pp_diffuse_answer_latency (GstPpDiffuse * self,
                                        GstQuery * query);

G_END_DECLS
