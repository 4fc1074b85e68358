/* GStreamer ppdiffuse — the similarity filter's repeats.
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */
#pragma once

#include "gstppdiffuse.h"

G_BEGIN_DECLS

/* TRUE when @buf is to be skipped, alike the last frame sent to the mesh
 * (gstppdiffuse-similarity.h has the rule); a frame let through becomes
 * the reference.  Chain thread only. */
gboolean      gst_pp_diffuse_similar_to_last_sent (GstPpDiffuse * self,
                                                   GstBuffer * buf,
                                                   const GstVideoInfo * info,
                                                   gdouble threshold);
/* Files a skipped frame: a repeat item takes its place in the FIFO.
 * Takes @buf and @item. */
GstFlowReturn gst_pp_diffuse_queue_repeat (GstPpDiffuse * self,
                                           GstPpDiffuseItem * item,
                                           GstBuffer * buf);
/* Src task: pushes the last output again with @item's timestamps and
 * flags. */
GstFlowReturn gst_pp_diffuse_push_repeat  (GstPpDiffuse * self,
                                           GstPpDiffuseItem * item);

G_END_DECLS
