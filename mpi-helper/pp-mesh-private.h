/* ppdiffuse — rank 0's mesh: the state its files share (pp-mesh.c lists
 * them), here in the start and liveness rooms as well as beside the
 * façade.  Not for the element: it uses pp-mesh.h.
 *
 * It names only what lies below every room that uses it (the wire, the
 * backend); a worker's identity and the heartbeat thread are pointers to
 * types of start/ and liveness/, whose headers the files that use them
 * include. */
#pragma once

#include <mpi.h>

#include "pp-backend.h"
#include "pp-mesh-types.h"
#include "pp-nccl-links.h"
#include "pp-plan.h"
#include "pp-transport.h"

G_BEGIN_DECLS

struct _PpMesh
{
  PpPlan *plan;
  guint timeout_ms;
  MPI_Comm inter;
  MPI_Comm world;
  /* n_workers (start/pp-handshake.h), index = world rank - 1 */
  struct _PpWorkerInfo *workers;
  gchar *dump_dir;
  gboolean watchdog;            /* FALSE only under the test-only switch */
  struct _PpLiveness *liveness; /* from the end of the handshake */
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
                                 * pass and the chunks back of the current
                                 * work (pp_allowance_update_round_us) */
  guint64 pace_work;            /* the sizes of work sent so far, as a
                                 * worker's PpPace.work counts them */
  guint64 pace_work_from;       /* the first chunk of the current work */
  gint64 pace_shape[PP_TENSOR_MAX_DIMS];  /* chain thread: its sample's */

  /* The mesh's first failure (pp-mesh-blame.c). */
  gint failed;                  /* atomic: the mesh cannot be shut down cleanly */
  GMutex lock;                  /* guards fault and pace_* */
  GError *fault;                /* the first failure seen, for every waiter */
};

G_END_DECLS
