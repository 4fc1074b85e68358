/* ppdiffuse — the worker mesh as rank 0 sees it.  This is the one header
 * the GStreamer element uses; it carries no MPI types.  It brings the model
 * interface along for the image phases rank 0 runs itself.
 *
 * Thread use: pp_mesh_submit from one thread (the chain) and
 * pp_mesh_collect from another (the src task) may run at the same time;
 * start and stop run alone. */
#pragma once

#include "pp-envelope.h"
#include "pp-error.h"
#include "pp-model.h"
#include "pp-plan.h"

G_BEGIN_DECLS

typedef struct _PpMesh PpMesh;

#define PP_WORKER_ENV "PPDIFFUSE_WORKER"
#define PP_MESH_MAX_WORKERS 256
/* The shutdown chunk carries each worker's busy time back in this tensor. */
#define PP_MESH_BUSY_TENSOR "busy_s"

typedef struct
{
  guint n_workers;
  guint n_steps;
  const gchar *model;
  const gchar *backend;         /* compute backend name; NULL: auto */
  const gchar *worker_path;     /* NULL: $PPDIFFUSE_WORKER, then installed */
  const gchar *hosts;           /* MPI_Info "host", NULL for none */
  const gchar *hostfile;        /* MPI_Info "hostfile", NULL for none */
  guint timeout_ms;
  const gchar *dump_dir;        /* flight recorder files, NULL for none */
} PpMeshConfig;

/* Test-only: set to 1, rank 0 neither declares silent workers dead nor
 * puts deadlines on waits for chunks: what the hang test would do
 * without its watchdog. */
#define PP_MESH_NO_WATCHDOG_ENV "PPDIFFUSE_TEST_NO_WATCHDOG"

typedef struct
{
  guint n_workers;
  gdouble busy_s[PP_MESH_MAX_WORKERS];  /* per worker, seconds computing */
  gdouble wall_s;               /* first submit to last return */
  gdouble overlap;              /* Σ busy / (W × wall); 1.0 is perfect */
  guint64 chunks;               /* frames that went round the mesh */
  guint64 warm_ups;             /* warm-up passes, not in the above */
} PpMeshStats;

const gchar *pp_mesh_installed_worker (void);
/* Initialises MPI if needed, spawns the workers and runs the handshake
 * (with the parity check), all within timeout_ms; then keeps heartbeats
 * with the workers until pp_mesh_stop. */
PpMesh       *pp_mesh_start   (const PpMeshConfig * config, GError ** error);
const PpPlan *pp_mesh_plan    (PpMesh * mesh);
/* Stamps chunk_id, plan_id and the schedule on @chunk and sends it to the
 * first worker; takes ownership of @chunk. */
gboolean      pp_mesh_submit  (PpMesh * mesh, PpChunk * chunk,
                               guint64 * chunk_id, GError ** error);
/* The warm-up pass: sends @chunk (taken) flagged PP_CHUNK_FLAG_WARMUP
 * round the mesh and waits for it to come back, in lockstep, before any
 * frame is in flight (chain thread, nothing outstanding).  Left out of
 * every statistic. */
gboolean      pp_mesh_warm_up (PpMesh * mesh, PpChunk * chunk,
                               GError ** error);
/* Waits up to timeout_ms for the next chunk back from the last worker and
 * validates it. */
PpChunk      *pp_mesh_collect (PpMesh * mesh, GError ** error);
/* The chunk_id the next pp_mesh_submit will stamp (chain thread only). */
guint64       pp_mesh_next_chunk_id (PpMesh * mesh);
/* Shuts the workers down (after an error: kills them) and frees the mesh.
 * Chunks still in flight are discarded.  @stats may be NULL. */
gboolean      pp_mesh_stop    (PpMesh * mesh, PpMeshStats * stats,
                               GError ** error);

G_END_DECLS
