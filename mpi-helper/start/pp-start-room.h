/* ppdiffuse — the start room: from nothing to a mesh whose ranks agree
 * on a plan.
 *
 * It owns MPI's start-up on rank 0 (pp-mpi-start.c: MPI_THREAD_MULTIPLE
 * under a deadline, or the application's own), the worker executable and
 * its spawn into one world (pp-spawn.c), Open MPI's launcher and what it
 * says when it fails (pp-launcher.h), and the handshake both sides run:
 * hello, reply, parity, load progress (pp-handshake.h).  The plan itself
 * travels on the wire (wire/pp-plan.h).
 *
 * Calls go down only: into wire/ and the shared small things; rank 0's
 * façade (pp-mesh-start.c) and the worker call into it. */
#pragma once

#include "pp-handshake.h"
#include "pp-launcher.h"
#include "pp-mesh-private.h"

G_BEGIN_DECLS

/* pp-mpi-start.c: initialises MPI with MPI_THREAD_MULTIPLE, or checks
 * the initialisation the application made, within @timeout_ms (at least
 * the start-up floor).  @remote_hosts: this mesh places workers on other
 * hosts (Open MPI's recovery is then turned on, if MPI starts here). */
gboolean pp_mpi_start (guint timeout_ms, gboolean remote_hosts,
                       GError ** error);
/* What MPI start-up and the spawn get: timeout-ms, at least the floor
 * (PP_MESH_START_FLOOR_MS). */
guint    pp_mpi_start_timeout_ms (guint timeout_ms);

/* pp-spawn.c */
const gchar *pp_spawn_installed_worker (void);
/* The worker executable: @configured, else $PPDIFFUSE_WORKER, else the
 * installed one; NULL with @error when it is not an executable file. */
gchar   *pp_spawn_resolve_worker (const gchar * configured, GError ** error);
/* Runs "@worker --ppdiffuse-probe" on this host within @timeout_ms: FALSE
 * with the exit status and what it printed when it is no worker that runs
 * here. */
gboolean pp_spawn_probe_worker (const gchar * worker, guint timeout_ms,
                                GError ** error);
/* Checks the hostfile and the worker, then spawns the workers and merges
 * them with rank 0 into mesh->world, within the start budget
 * (pp_mpi_start_timeout_ms); a worker of this host that exits early, or an
 * error from Open MPI's launcher, ends it at once, with that cause. */
gboolean pp_spawn_workers (PpMesh * mesh, const PpMeshConfig * config,
                           const gchar * worker, GError ** error);

G_END_DECLS
