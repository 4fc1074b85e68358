/* GStreamer ppdiffuse — keeping the worker mesh across stop and start.
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */
#pragma once

#include "gstppdiffuse.h"

G_BEGIN_DECLS

/* What a mesh was started with, as one string: two starts can share a
 * mesh exactly when their keys are equal.  Every setting that reaches
 * pp_mesh_start or the model's URI is in it. */
gchar *gst_pp_diffuse_mesh_key (const PpMeshConfig * config);

/* At a stop that keeps the mesh, after the FIFO was flushed: waits, up to
 * timeout-ms, until the collector has taken back (and discarded) every
 * chunk still in the mesh.  FALSE when the mesh failed, did not give
 * every chunk back in time, or is no longer healthy: it must then be
 * stopped.  Called without the lock, with the chain stopped. */
gboolean gst_pp_diffuse_mesh_drain (GstPpDiffuse * self);

/* At a start: TRUE when the mesh kept from the last run serves the start
 * whose key is @key and whose model URI is @model_uri (equal key, a URI
 * the running model takes as a live update with @inputs, still
 * healthy).  A kept mesh
 * that does not is left for the caller to stop. */
gboolean gst_pp_diffuse_mesh_reusable (GstPpDiffuse * self,
    const gchar * key, const gchar * model_uri, GPtrArray * inputs);

G_END_DECLS
