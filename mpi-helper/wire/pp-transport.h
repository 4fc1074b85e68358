/* ppdiffuse — MPI point-to-point under deadlines: bytes and whole chunks.
 *
 * Nothing here blocks inside MPI: requests are started non-blocking and
 * polled with MPI_Test (matched probes for receives) until they complete,
 * the deadline passes, or the liveness check says the peer is gone. */
#pragma once

#include <mpi.h>

#include "pp-data-plane.h"
#include "pp-envelope.h"
#include "pp-protocol.h"
#include "pp-wait.h"

G_BEGIN_DECLS

/* One direction of chunk traffic with one peer, kept from chunk to chunk
 * so that a warm chunk is sent or received without allocating: the
 * envelope codec (the head buffer, the last manifest) and the pool the
 * chunks are received into.  Any thread may use it, one transfer at a
 * time. */
typedef struct _PpChunkLink PpChunkLink;

/* @reserve: the most chunks received through it that its users hold at
 * once, made up front (pp_chunk_pool_new); 0 for a link that only sends. */
PpChunkLink *pp_chunk_link_new  (guint reserve);
/* The same receiving into chunks whose payloads live in @backend's device
 * memory (pp_chunk_pool_new_on): a link whose data plane is NCCL. */
PpChunkLink *pp_chunk_link_new_on (guint reserve, struct _PpBackend * backend);
/* Logs (info) how many chunks @link carried on its lane and how many of
 * their payloads went over MPI, once; nothing for a link without a lane.
 * A worker reports its links before it says farewell: its output after
 * that may never reach rank 0's log, which stops when the mesh has. */
void      pp_chunk_link_report    (PpChunkLink * link);
/* Reports @link if it was not (pp_chunk_link_report).  Chunks received
 * through @link may outlive it (their pool stays until they are given
 * back). */
void      pp_chunk_link_free      (PpChunkLink * link);
/* Chunks the link's pool has made: the most held at once. */
guint     pp_chunk_link_pool_size (PpChunkLink * link);
/* The plane the link's payloads travel on (pp-data-plane.h); a new link
 * uses pp_data_plane_mpi.  @plane is borrowed: it must outlive the
 * link's transfers.  Both ends of a link must use the same plane. */
void      pp_chunk_link_set_data_plane (PpChunkLink * link,
                                   PpDataPlane * plane);

gboolean  pp_transport_send_bytes (const PpWait * w, gint tag,
                                   GBytes * bytes, const gchar * what,
                                   GError ** error);
/* The same, done only once the peer has taken the message (a synchronous
 * send): for a process about to exit, whose last message would otherwise
 * be in flight when the peer sees it gone. */
gboolean  pp_transport_send_bytes_taken (const PpWait * w, gint tag,
                                   GBytes * bytes, const gchar * what,
                                   GError ** error);
GBytes   *pp_transport_recv_bytes (const PpWait * w, gint tag,
                                   gsize max_len, const gchar * what,
                                   GError ** error);
/* Sends head then payloads through @link; takes @chunk (pp_chunk_free
 * once sent; when the send does not complete, the buffers MPI may still
 * read are left to it, never freed). */
gboolean  pp_transport_send_chunk (const PpWait * w, PpChunkLink * link,
                                   PpChunk * chunk, GError ** error);
gboolean  pp_transport_send_chunk_as (const PpWait * w, PpChunkLink * link,
                                   PpChunk * chunk, PpSendDefect defect,
                                   GError ** error);
/* A message of @tag from any rank of @comm if one has arrived (*@source set),
 * else NULL without error; never waits for one to come. */
GBytes   *pp_transport_try_recv_bytes (MPI_Comm comm, gint tag,
                                   gsize max_len, gint * source,
                                   GError ** error);
/* The same into *@buf (@size bytes, *@len set): TRUE when a message came.
 * When its receive does not complete, *@buf is left to MPI, which may
 * still write it, and set to NULL. */
gboolean  pp_transport_try_recv_into (MPI_Comm comm, gint tag,
                                   guint8 ** buf, gsize size, gsize * len,
                                   gint * source, GError ** error);
/* Waits for a head (under w->deadline_us), then for its payloads (under
 * @payload_timeout_ms from the head), into a chunk of @link's pool. */
PpChunk  *pp_transport_recv_chunk (const PpWait * w, PpChunkLink * link,
                                   guint payload_timeout_ms,
                                   GError ** error);

G_END_DECLS
