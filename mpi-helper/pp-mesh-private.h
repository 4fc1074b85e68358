/* ppdiffuse — rank 0's mesh, shared by the files that each do one of its
 * jobs (pp-mesh.c lists them).  Not for the element: it uses pp-mesh.h. */
#pragma once

#include <mpi.h>

#include "pp-nccl-links.h"
#include "pp-handshake.h"
#include "pp-liveness.h"
#include "pp-mesh.h"
#include "pp-transport.h"

G_BEGIN_DECLS

struct _PpMesh
{
  PpPlan *plan;
  guint timeout_ms;
  MPI_Comm inter;
  MPI_Comm world;
  PpWorkerInfo *workers;        /* n_workers, index = world rank - 1 */
  gchar *dump_dir;
  gboolean watchdog;            /* FALSE only under the test-only switch */
  PpLiveness *liveness;         /* from the end of the handshake */
  PpBackend *backend;           /* rank 0's, the plan's */
  /* The NCCL planes of rank 0's two links when the plan's data plane is
   * NCCL (made before liveness starts, connected after it), else NULL. */
  PpNcclLinks *planes;

  /* Chunk traffic (pp-chunk-io.c). */
  PpChunkLink *to_first;        /* rank 0 → the first worker */
  PpChunkLink *from_last;       /* the last worker → rank 0 */
  guint64 next_send_id;         /* chain thread only */
  guint64 next_recv_id;         /* collector only */
  gint64 first_submit_us;       /* chain thread only */
  gint64 last_return_us;        /* collector only */
  guint32 last_epoch;           /* chain thread: of the last chunk sent */
  guint64 warm_ups;             /* chain thread only */

  /* What the mesh measured (pp-mesh-measures.c), under lock. */
  gint64 pace_round_us;         /* a chunk round the mesh, from the warm-up
                                 * pass and the chunks back
                                 * (pp_allowance_update_round_us) */
  guint64 pace_warm_ups;        /* warm_ups, for other threads */

  /* The mesh's first failure (pp-mesh-blame.c). */
  gint failed;                  /* atomic: the mesh cannot be shut down cleanly */
  GMutex lock;                  /* guards fault and pace_* */
  GError *fault;                /* the first failure seen, for every waiter */
};

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

/* pp-mesh-blame.c: the first failure, and the worker to blame for it. */
void     pp_mesh_fail         (PpMesh * mesh, const GError * error);
gboolean pp_mesh_fault        (PpMesh * mesh, GError ** error);
gboolean pp_mesh_has_failed   (PpMesh * mesh, GError ** error);
gchar   *pp_mesh_worker_name  (PpMesh * mesh, guint index);
/* Rank 0's heartbeats with every worker, feeding the above. */
PpLiveness *pp_mesh_liveness_new (PpMesh * mesh);
/* A PpAliveFunc over @mesh for waits on the workers. */
gboolean pp_mesh_workers_alive (gpointer mesh, GError ** error);
/* After a failed wait of rank 0 on worker @peer for chunk @awaited. */
void     pp_mesh_wait_failed  (PpMesh * mesh, guint peer, guint64 awaited,
                               const gchar * symptom, GError ** error);

/* pp-mesh-measures.c: what worker @index's slice is expected to take (its
 * last heartbeat @hb, or NULL for the one liveness holds), and how long
 * it may take (pp-allowance.h); *@source as pp_allowance_expected_slice_us says. */
gint64   pp_mesh_expected_slice_us  (PpMesh * mesh, guint index,
                                     const PpHeartbeat * hb,
                                     const gchar ** source);
gint64   pp_mesh_slice_allowance_us (PpMesh * mesh, guint index,
                                     const PpHeartbeat * hb);
/* The warm-up pass took @elapsed_us; chain thread. */
void     pp_mesh_pace_warmed_up     (PpMesh * mesh, gint64 elapsed_us);
/* A stream chunk came back @latency_us after it was submitted;
 * collector. */
void     pp_mesh_pace_returned      (PpMesh * mesh, gint64 latency_us);
/* "expected 9800 ms (measured compute), allowed 31900 ms: max (timeout-ms
 * 10000, 3 × expected + 2500 ms)" */
gchar   *pp_mesh_describe_allowance (PpMesh * mesh, gint64 expected_us,
                                     const gchar * source);

/* pp-chunk-io.c */
/* Assigns @chunk the next chunk_id, tells @assigned (may be NULL), and
 * sends it to the first worker under @deadline_us; takes @chunk. */
gboolean pp_mesh_send_next    (PpMesh * mesh, PpChunk * chunk,
                               gint64 deadline_us,
                               PpMeshAssignedFunc assigned,
                               gpointer user_data, GError ** error);
/* Receives the next chunk from the last worker and checks it; a shutdown
 * marker is accepted only when @shutdown. */
PpChunk *pp_mesh_receive_next (PpMesh * mesh, gboolean shutdown,
                               GError ** error);

/* pp-shutdown.c */
void     pp_mesh_kill_workers (PpMesh * mesh);
void     pp_mesh_free         (PpMesh * mesh);

G_END_DECLS
