/* ppdiffuse — the NCCL links of one rank: a plane per pipeline link when
 * the plan's data plane is NCCL.
 *
 * Rank 0 chooses the data plane (pp-data-plane-choice.h) and puts it in
 * the plan.  When it is NCCL (real, or emulated over MPI for tests), every
 * pipeline link gets a communicator and a plane of its own, one
 * direction each: link k carries chunks from rank k to rank k + 1
 * (k = 0 … W - 1), the return link from rank W to rank 0.  Every rank
 * makes its links after the handshake in that one global order (the
 * lower rank of a link sends its unique id over MPI), so that no two
 * ranks wait on each other's set-up in a cycle.  Rank 0 joins only its
 * two links.
 *
 * A link's plane wraps its NCCL plane: it makes the backend's device
 * current for the calling thread, and before a send it waits for the
 * backend's compute stream, which produced the payloads (the plane has a
 * stream of its own, so that a receive waiting for its peer never holds
 * up compute or the other direction).
 *
 * Faults: pp_nccl_links_abort (the rank's first failure: watchdog, dead
 * peer, deadline) aborts every plane, and any made later; waits under
 * way end with the cause.  pp_nccl_links_close (finalize, destroy) runs
 * only on the clean stop. */
#pragma once

#include "pp-backend.h"
#include "pp-nccl-plane.h"
#include "pp-plan.h"

G_BEGIN_DECLS

typedef struct _PpNcclLinks PpNcclLinks;

/* No planes yet, but abortable: an abort before or during the set-up
 * aborts each plane as it is made. */
PpNcclLinks *pp_nccl_links_new  (void);
/* Makes this rank's links of @plan (NCCL) in the global order, each under
 * @w (deadline, liveness check). */
gboolean  pp_nccl_links_connect  (PpNcclLinks * planes, const PpPlan * plan,
                                   MPI_Comm world, gint rank,
                                   PpBackend * backend, const PpWait * w,
                                   GError ** error);
/* The data planes of the link to the next rank and from the previous
 * one (for pp_chunk_link_set_data_plane); NULL before connect. */
PpDataPlane *pp_nccl_links_to_next   (PpNcclLinks * planes);
PpDataPlane *pp_nccl_links_from_prev (PpNcclLinks * planes);
/* Aborts every plane (once) for @reason; may be called from any thread,
 * with transfers in flight. */
void      pp_nccl_links_abort    (PpNcclLinks * planes,
                                   const GError * reason);
/* The clean end, nothing in flight: finalize and destroy each plane in the
 * global order, under @w.  A plane that fails to is aborted. */
gboolean  pp_nccl_links_close    (PpNcclLinks * planes, const PpWait * w,
                                   GError ** error);
/* Frees what is left: planes neither closed nor aborted are aborted. */
void      pp_nccl_links_free     (PpNcclLinks * planes);

G_END_DECLS
