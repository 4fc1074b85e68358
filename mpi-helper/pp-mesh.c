/* ppdiffuse — the worker mesh, rank 0 side: the façade the element calls
 * (pp-mesh.h).  Rank 0's files behind it, each one job:
 *
 *   pp-mesh-start.c   pp_mesh_start: puts the rooms together
 *   pp-chunk-io.c     chunk ids, submit, collect, the warm-up pass
 *   pp-shutdown.c     pp_mesh_stop: the clean path and the fault path
 *   pp-mesh.c         what the mesh tells while it runs (this file)
 *
 * and in the rooms: start/pp-mpi-start.c, start/pp-spawn.c (MPI, the
 * workers), liveness/pp-mesh-blame.c (the first failure and whom to
 * blame), liveness/pp-mesh-measures.c (what the work is expected to
 * take).  They share PpMesh (pp-mesh-private.h). */
#include "pp-mesh.h"
#include "pp-mesh-private.h"
#include "pp-liveness-room.h"
#include "pp-start-room.h"
#include "pp-error.h"
#include "pp-log.h"

#include <string.h>

const gchar *
pp_mesh_installed_worker (void)
{
  return pp_spawn_installed_worker ();
}

guint
pp_mesh_warm_ups_wanted (PpMesh * mesh)
{
  return pp_backend_stream (mesh->backend) != NULL ? PP_MESH_DEVICE_WARM_UPS
      : 0;
}

const PpPlan *
pp_mesh_plan (PpMesh * mesh)
{
  return mesh->plan;
}

gchar **
pp_mesh_worker_devices (PpMesh * mesh)
{
  const guint n_workers = mesh->plan->n_workers;
  gchar **devices = g_new0 (gchar *, n_workers + 1);

  /* Set by the handshake, read only since. */
  for (guint i = 0; i < n_workers; i++) {
    const gchar *d = mesh->workers[i].parity != NULL
        ? g_hash_table_lookup (mesh->workers[i].parity, PP_PARITY_DEVICE)
        : NULL;

    devices[i] = g_strdup_printf ("%s on %s", d != NULL ? d : "unknown",
        mesh->workers[i].host != NULL ? mesh->workers[i].host : "?");
  }
  return devices;
}

struct _PpBackend *
pp_mesh_data_plane_backend (PpMesh * mesh)
{
  return mesh->planes != NULL ? mesh->backend : NULL;
}

/* Worker @i's last heartbeat and how long ago it came; FALSE (@beat
 * zeroed) before the heartbeats run. */
static gboolean
worker_beat (PpMesh * mesh, guint i, PpHeartbeat * beat, gint64 * silent_us)
{
  memset (beat, 0, sizeof *beat);
  *silent_us = 0;
  if (mesh->liveness == NULL)
    return FALSE;
  pp_liveness_peer (mesh->liveness, i, beat, silent_us);
  return TRUE;
}

guint
pp_mesh_worker_busy (PpMesh * mesh, gdouble * busy_s, guint n)
{
  const guint n_workers = mesh->plan->n_workers;

  for (guint i = 0; i < MIN (n, n_workers); i++) {
    PpHeartbeat beat;
    gint64 silent_us;
    guint64 busy_us;

    worker_beat (mesh, i, &beat, &silent_us);
    busy_us = beat.busy_us;
    /* A compute in progress counts up to now. */
    if (beat.state == PP_WORK_COMPUTING)
      busy_us += beat.state_us + (guint64) MAX (silent_us, 0);
    busy_s[i] = busy_us / 1e6;
  }
  return n_workers;
}

guint
pp_mesh_worker_counts (PpMesh * mesh, PpWorkerCounts * counts, guint n)
{
  const guint n_workers = mesh->plan->n_workers;

  for (guint i = 0; i < MIN (n, n_workers); i++) {
    PpHeartbeat beat;
    gint64 silent_us;

    worker_beat (mesh, i, &beat, &silent_us);
    counts[i].cache_builds = beat.cache_builds;
    counts[i].stream_bytes = beat.stream_bytes;
    counts[i].batched_steps = beat.batched_steps;
    counts[i].cpu_us = beat.cpu_us;
    counts[i].seq = beat.seq;
    counts[i].heard_us = g_get_monotonic_time () - silent_us;
  }
  return n_workers;
}

gboolean
pp_mesh_is_healthy (PpMesh * mesh, GError ** error)
{
  return !pp_mesh_has_failed (mesh, error);
}
