/* ppdiffuse — the mesh's data plane: which one the plan names, and the
 * NCCL planes of one rank when it is NCCL.
 *
 * Rank 0 chooses the data plane (pp_data_plane_choose) and puts it in the
 * plan.  When it is NCCL (real, or emulated over MPI for tests), every
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
 * Faults: pp_data_planes_abort (the rank's first failure: watchdog, dead
 * peer, deadline) aborts every plane, and any made later; waits under
 * way end with the cause.  pp_data_planes_close (finalize, destroy) runs
 * only on the clean stop. */
#pragma once

#include "pp-nccl-plane.h"
#include "pp-plan.h"
#include "pp-backend.h"

G_BEGIN_DECLS

typedef struct _PpDataPlanes PpDataPlanes;

/* The data plane rank 0 puts in the plan for @backend and a mesh of
 * @n_ranks ranks (rank 0 included); @local: every rank runs on this host.
 * $PPDIFFUSE_DATA_PLANE decides when set (PP_DATA_PLANE_ENV); "auto" or
 * unset: "nccl" when the backend is cuda, this build has NCCL and (on one
 * host) every rank has a GPU of its own (NCCL refuses two ranks of a
 * communicator on one device), else "mpi".  NULL with @error when the
 * variable asks for what cannot be had. */
const gchar *pp_data_plane_choose (PpBackend * backend, guint n_ranks,
                                   gboolean local, GError ** error);

/* The NCCL table of @data_plane: the real one, or the emulated one over
 * @world; NULL with @error when this build has no NCCL. */
const PpNcclApi *pp_data_plane_api (const gchar * data_plane, MPI_Comm world,
                                    GError ** error);

/* No planes yet, but abortable: an abort before or during the set-up
 * aborts each plane as it is made. */
PpDataPlanes *pp_data_planes_new  (void);
/* Makes this rank's links of @plan (NCCL) in the global order, each under
 * @w (deadline, liveness check). */
gboolean  pp_data_planes_connect  (PpDataPlanes * planes, const PpPlan * plan,
                                   MPI_Comm world, gint rank,
                                   PpBackend * backend, const PpWait * w,
                                   GError ** error);
/* The payload planes of the link to the next rank and from the previous
 * one (for pp_chunk_link_set_payload_plane); NULL before connect. */
PpPayloadPlane *pp_data_planes_to_next   (PpDataPlanes * planes);
PpPayloadPlane *pp_data_planes_from_prev (PpDataPlanes * planes);
/* Aborts every plane (once) for @reason; may be called from any thread,
 * with transfers in flight. */
void      pp_data_planes_abort    (PpDataPlanes * planes,
                                   const GError * reason);
/* The clean end, nothing in flight: finalize and destroy each plane in the
 * global order, under @w.  A plane that fails to is aborted. */
gboolean  pp_data_planes_close    (PpDataPlanes * planes, const PpWait * w,
                                   GError ** error);
/* Frees what is left: planes neither closed nor aborted are aborted. */
void      pp_data_planes_free     (PpDataPlanes * planes);

G_END_DECLS
