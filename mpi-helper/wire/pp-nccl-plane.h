/* ppdiffuse — the NCCL data plane: a chunk's payloads as ncclSend /
 * ncclRecv of device buffers on a non-blocking communicator over a list of
 * world ranks, every wait under a deadline (crash > hang).
 *
 * - Set-up: the lowest rank of the list makes the unique id and sends it
 *   over MPI (the control plane, PP_TAG_NCCL_ID) to the others; each rank
 *   starts the non-blocking init and polls it under the wait's deadline
 *   and liveness check.
 * - A transfer is one group (a send or receive per non-empty tensor), then
 *   an event recorded on the plane's stream, polled with event_query and
 *   comm_get_async_error: never a stream synchronize.
 * - At most one transfer per peer and direction is in flight; another is a
 *   programming error (g_critical).
 * - A deadline, a peer's death (w->alive) or an NCCL error aborts the
 *   communicator, once; from then on every call fails at once with that
 *   first cause and touches NCCL no more.  Finalize and destroy happen
 *   only on the clean close path.
 *
 * Calls are made on the caller's current CUDA device, which must be the
 * one the communicator was made on.  NCCL calls on the communicator are
 * serialised by the plane; the waits of transfers to different peers run
 * concurrently.  The operator manual is docs/operator/nccl.md. */
#pragma once

#include "pp-nccl-api.h"
#include "pp-data-plane.h"

G_BEGIN_DECLS

typedef struct _PpNcclPlane PpNcclPlane;

/* The message that carries the unique id: magic, rank count, the ranks
 * (so that a rank joining another list than the sender's fails naming
 * both), then the id. */
#define PP_NCCL_ID_MAGIC 0x4943434eu    /* "NCCI" read little-endian */
#define PP_NCCL_MAX_RANKS 64
GBytes   *pp_nccl_id_message_encode (const gint * ranks, guint n_ranks,
                                     const PpNcclUniqueId * id);
gboolean  pp_nccl_id_message_decode (GBytes * message, const gint * ranks,
                                     guint n_ranks, PpNcclUniqueId * id,
                                     GError ** error);

/* Joins the communicator over world ranks @ranks (ascending, @rank among
 * them) whose unique id is @id, through @api; the init is polled under
 * @w (w->peer is ignored).  The test hook: tests pass a fake @api.
 * NULL with @error (naming @rank and NCCL's status) when the init fails
 * or does not finish in time: the communicator is then aborted. */
PpNcclPlane *pp_nccl_plane_new_with_api (const PpNcclApi * api,
                                         const PpNcclUniqueId * id,
                                         const gint * ranks, guint n_ranks,
                                         gint rank, PpCudaStream stream,
                                         const PpWait * w, GError ** error);
/* The same after the id has gone from the lowest rank to the others over
 * @world, under @w (w->comm and w->peer are ignored).  @api is
 * pp_nccl_api_get's in production. */
PpNcclPlane *pp_nccl_plane_new           (const PpNcclApi * api,
                                          MPI_Comm world,
                                          const gint * ranks, guint n_ranks,
                                          PpCudaStream stream,
                                          const PpWait * w, GError ** error);

/* The plane as a chunk link's data plane (pp_chunk_link_set_data_plane):
 * tensors' data are device pointers on the communicator's device. */
PpDataPlane *pp_nccl_plane_data_plane (PpNcclPlane * plane);

/* Payloads of @chunk to or from world rank w->peer. */
PpDataPlaneResult pp_nccl_plane_send (PpNcclPlane * plane, const PpWait * w,
                                    const PpChunk * chunk, GError ** error);
PpDataPlaneResult pp_nccl_plane_recv (PpNcclPlane * plane, const PpWait * w,
                                    PpChunk * chunk, GError ** error);
/* The checks that run before anything is posted: the plane not aborted,
 * w->peer in it, each payload's byte count that of its dtype and shape
 * and a whole number of NCCL elements. */
gboolean  pp_nccl_plane_check_payloads (PpNcclPlane * plane,
                                        const PpWait * w,
                                        const PpChunk * chunk,
                                        GError ** error);

/* Aborts the communicator (once) for @reason, e.g. on the mesh's first
 * failure from another thread: waits under way fail with it. */
void      pp_nccl_plane_abort  (PpNcclPlane * plane, const GError * reason);
/* Aborts @n planes at once, a thread each, and returns when every abort
 * has: ncclCommAbort returns once its communicator's kernels have stopped
 * and its device memory is freed, and a free waits for every kernel of
 * the device, so an abort made after another would wait for the kernels
 * of a plane not yet aborted (a receive whose peer is gone). */
void      pp_nccl_planes_abort (PpNcclPlane * const * planes, guint n,
                                const GError * reason);
/* TRUE once aborted, with a copy of the first cause in @cause if set. */
gboolean  pp_nccl_plane_aborted (PpNcclPlane * plane, GError ** cause);
/* The clean end: finalize, poll it under @w, destroy.  Refused while a
 * transfer is in flight; after an abort it only reports the cause.  When
 * the finalize fails or does not finish in time the communicator is
 * aborted instead (never destroyed with a peer that may be dead). */
gboolean  pp_nccl_plane_close  (PpNcclPlane * plane, const PpWait * w,
                                GError ** error);
/* Frees the plane, with no transfer in flight; one neither closed nor
 * aborted is aborted first. */
void      pp_nccl_plane_free   (PpNcclPlane * plane);

/* "ncclRemoteError", …: the enumerator's name, or "NCCL result N". */
const gchar *pp_nccl_result_name (int result);

G_END_DECLS
