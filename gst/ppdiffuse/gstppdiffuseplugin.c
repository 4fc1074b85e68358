/* GStreamer ppdiffuse plugin.
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */
#include "gstppdiffuse.h"

static gboolean
plugin_init (GstPlugin * plugin)
{
  return GST_ELEMENT_REGISTER (ppdiffuse, plugin);
}

GST_PLUGIN_DEFINE (GST_VERSION_MAJOR, GST_VERSION_MINOR, ppdiffuse,
    "Live video diffusion, pipeline-parallel over an MPI worker mesh",
    plugin_init, VERSION, "LGPL", PACKAGE, PACKAGE_ORIGIN)
