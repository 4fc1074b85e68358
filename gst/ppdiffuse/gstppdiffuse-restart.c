/* GStreamer ppdiffuse — keeping the worker mesh across stop and start.
 *
 * With keep-workers, a stop leaves the mesh and rank 0's model up once
 * every chunk in flight came back, and the next start whose settings are
 * the same uses them again: no spawn, no handshake, and none of the
 * per-spawn state Open MPI keeps in the process for good.  The workers
 * wait idle meanwhile; heartbeats go on both ways, so an idle mesh never
 * times out, and a worker that dies meanwhile fails the mesh, which the
 * next start sees (the mesh is then stopped and spawned anew).
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstppdiffuse-restart.h"

GST_DEBUG_CATEGORY_EXTERN (gst_pp_diffuse_debug);
#define GST_CAT_DEFAULT gst_pp_diffuse_debug

static const gchar *
or_none (const gchar * s)
{
  return s != NULL ? s : "";
}

gchar *
gst_pp_diffuse_mesh_key (const PpMeshConfig * config)
{
  /* The model is not in the key: the running one checks a new URI itself
   * (its live settings may differ, see gst_pp_diffuse_mesh_reusable). */
  return g_strdup_printf ("ranks=%u steps=%u backend=%s worker=%s "
      "hosts=%s hostfile=%s timeout-ms=%u dump-dir=%s in-flight=%u",
      config->n_workers, config->n_steps, or_none (config->backend), or_none (config->worker_path),
      or_none (config->hosts), or_none (config->hostfile),
      config->timeout_ms, or_none (config->dump_dir), config->max_in_flight);
}

gboolean
gst_pp_diffuse_mesh_drain (GstPpDiffuse * self)
{
  GError *error = NULL;
  gint64 deadline;
  gboolean drained;

  GST_OBJECT_LOCK (self);
  deadline = g_get_monotonic_time ()
      + self->timeout_ms * G_TIME_SPAN_MILLISECOND;
  GST_OBJECT_UNLOCK (self);
  g_mutex_lock (&self->lock);
  while (self->outstanding > 0 && !self->mesh_failed)
    if (!g_cond_wait_until (&self->cond, &self->lock, deadline))
      break;
  drained = self->outstanding == 0 && !self->mesh_failed;
  if (!drained)
    GST_WARNING_OBJECT (self, "%u chunks did not come back from the mesh "
        "at stop%s: the workers are stopped", self->outstanding,
        self->mesh_failed ? " (it failed)" : " within timeout-ms");
  g_mutex_unlock (&self->lock);
  if (drained && !pp_mesh_is_healthy (self->mesh, &error)) {
    GST_WARNING_OBJECT (self, "the mesh failed: %s", error->message);
    g_error_free (error);
    drained = FALSE;
  }
  return drained;
}

gboolean
gst_pp_diffuse_mesh_reusable (GstPpDiffuse * self, const gchar * key,
    const gchar * model_uri, GPtrArray * inputs)
{
  GError *error = NULL;

  if (self->mesh == NULL)
    return FALSE;
  if (g_strcmp0 (self->mesh_key, key) != 0) {
    GST_INFO_OBJECT (self, "settings changed: the workers are spawned anew "
        "(was %s, now %s)", self->mesh_key, key);
    return FALSE;
  }
  /* The same model with the same start-only parameters: its live settings
   * go to every rank with the first frame. */
  if (!pp_model_check_update (self->model, model_uri, inputs, &error)) {
    GST_INFO_OBJECT (self, "the model changed: the workers are spawned "
        "anew (%s)", error->message);
    g_error_free (error);
    return FALSE;
  }
  if (!pp_mesh_is_healthy (self->mesh, &error)) {
    GST_WARNING_OBJECT (self, "the kept worker mesh failed while idle, "
        "spawning it anew: %s", error->message);
    g_error_free (error);
    return FALSE;
  }
  GST_INFO_OBJECT (self, "reusing the worker mesh (%s)", key);
  return TRUE;
}
