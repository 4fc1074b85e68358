/* GStreamer ppdiffuse — the element's properties: their specs, defaults,
 * and get and set.
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */
#pragma once

#include "gstppdiffuse.h"

G_BEGIN_DECLS

/* Installs every property of the element, and its set and get. */
void gst_pp_diffuse_install_properties (GObjectClass * klass);
/* Every property at its default (in init). */
void gst_pp_diffuse_props_init (GstPpDiffuse * self);

/* PpStreamCallbacks for the live properties (@data is the element): the
 * settings as set now; settings checked and accepted; settings refused
 * (the properties go back to the last accepted, unless they changed
 * again meanwhile). */
void gst_pp_diffuse_props_snapshot (PpSettings * live, gpointer data);
void gst_pp_diffuse_props_accepted (const PpSettings * live, gpointer data);
void gst_pp_diffuse_props_refused  (const PpSettings * live, gpointer data);

G_END_DECLS
