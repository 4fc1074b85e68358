/* ppdiffuse — the types of rank 0's mesh interface (pp-mesh.h, which
 * includes this header; the element includes pp-mesh.h alone).  Apart so
 * that the rooms the façade puts together (start/, liveness/) can take
 * the configuration and fill the statistics without reaching up to it. */
#pragma once

#include "pp-envelope.h"
#include "pp-error.h"
#include "pp-plan.h"

G_BEGIN_DECLS

typedef struct _PpMesh PpMesh;

#define PP_MESH_MAX_WORKERS 256
/* MPI start-up and the spawn get at least this long, whatever timeout-ms
 * says: Open MPI's start-up alone takes a few hundred ms on a quiet
 * machine and seconds on a loaded one.  Workers that die at start are
 * found out long before it (pp-spawn.c). */
#define PP_MESH_START_FLOOR_MS 10000

/* Where pp_mesh_start is, for a caller that shows progress. */
typedef enum
{
  PP_MESH_PROGRESS_SPAWNING,    /* spawning the n_workers workers */
  PP_MESH_PROGRESS_WAITING,     /* waiting for worker @rank's handshake */
  PP_MESH_PROGRESS_LOADING,     /* worker @rank has read @loaded_bytes of
                                 * its model */
  PP_MESH_PROGRESS_RANK_READY,  /* worker @rank accepted the plan */
} PpMeshProgress;

/* Called by pp_mesh_start in the starting thread; @rank is 0 for
 * PP_MESH_PROGRESS_SPAWNING, else a worker's world rank, 1..@n_workers;
 * @loaded_bytes is 0 but for PP_MESH_PROGRESS_LOADING. */
typedef void (*PpMeshProgressFunc) (PpMeshProgress stage, guint rank,
                                    guint n_workers, guint64 loaded_bytes,
                                    gpointer user_data);

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
  /* The most chunks the caller has in flight (submitted, and collected
   * but not yet freed) at once: what the mesh keeps ready to receive. */
  guint max_in_flight;
  PpMeshProgressFunc progress;  /* NULL for none */
  gpointer progress_data;
} PpMeshConfig;

typedef struct
{
  guint n_workers;
  gdouble busy_s[PP_MESH_MAX_WORKERS];  /* per worker, seconds computing */
  gdouble wall_s;               /* first submit to last return */
  gdouble overlap;              /* Σ busy / (W × wall); 1.0 is perfect */
  guint64 chunks;               /* frames that went round the mesh */
  guint64 warm_ups;             /* warm-up passes, not in the above */
} PpMeshStats;

/* What the mesh expects of one frame, from what it measured so far
 * (pp-allowance.h): the warm-up pass and the chunks back, then the workers'
 * busy time. */
typedef struct
{
  gint64 round_us;              /* a chunk round the workers: its latency */
  gint64 stage_us;              /* the slowest worker's slice: the least
                                 * time between two frames out */
  guint slowest;                /* that worker, index = world rank - 1 */
  const gchar *source;          /* what it comes from: "measured compute"
                                 * (the workers' busy time), "measured
                                 * round trip" (the warm-up pass, the
                                 * chunks back), or nothing measured yet
                                 * (2 × timeout-ms per step) */
  /* How long each may take before it is an error (pp-allowance.h):
   * max (timeout-ms, 3 × expected + one heartbeat period). */
  gint64 round_allowance_us;
  gint64 stage_allowance_us;
  const gchar *advice;          /* what a person can change when the work
                                 * is too slow for the stream, for this
                                 * mesh's ranks and steps */
} PpMeshPace;

G_END_DECLS
