/* GStreamer ppdiffuse — buffers: what upstream is asked to allocate, and
 * the element's own pool of output buffers.
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */
#pragma once

#include "gstppdiffuse.h"

G_BEGIN_DECLS

/* Input buffers the element holds at once: the chain's frame, while it
 * waits for room in the mesh and while it is encoded.  Each is released
 * once copied into an output buffer (gst_pp_diffuse_copy_to_output). */
#define GST_PP_DIFFUSE_INPUT_FRAMES_HELD 1

/* Answers upstream's ALLOCATION query: the frames the element holds are
 * added to the pool entry's min-buffers, and GstVideoMeta is proposed. */
void gst_pp_diffuse_propose_allocation (GstPpDiffuse * self,
    GstQuery * query);

/* The output buffer of input @in (caps @info): one from the element's own
 * pool (made, or made again, for @info and @in's size) holding a copy of
 * every byte of @in, and its timestamps, flags and metas as
 * gst_buffer_copy_into copies them.  Chain thread.  NULL with @error when
 * no buffer could be had. */
GstBuffer *gst_pp_diffuse_copy_to_output (GstPpDiffuse * self,
    GstBuffer * in, const GstVideoInfo * info, GError ** error);

/* Deactivates and drops the output pool (at stop and in finalize); buffers
 * still out return to it and are freed with it. */
void gst_pp_diffuse_clear_output_pool (GstPpDiffuse * self);


G_END_DECLS
