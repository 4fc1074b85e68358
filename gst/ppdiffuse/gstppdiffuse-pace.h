/* GStreamer ppdiffuse — whether the mesh keeps up with the stream.
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */
#pragma once

#include "gstppdiffuse.h"

G_BEGIN_DECLS

/* After the warm-up pass: logs what the mesh expects of one frame and
 * posts a GST_ELEMENT_WARNING when that is longer than the frame
 * interval of @info's framerate (the mesh cannot keep up: frames will be
 * dropped or the stream will slow down), with the numbers and what to
 * change.  Returns TRUE when it warned.  Chain thread. */
gboolean gst_pp_diffuse_pace_check (GstPpDiffuse * self,
    const GstVideoInfo * info);

G_END_DECLS
