/* ppdiffuse — a pool of chunks: a warm frame's chunk and its tensors are
 * ones an earlier frame gave back, not new allocations.
 *
 * The chunks a pool makes up front are lent in turn, the one given back
 * longest ago first: when they are at least as many as its users ever hold
 * at once (the mesh bounds that: max-in-flight on rank 0, the queue depths
 * in a worker), each has been used, and has its tensors, after that many
 * chunks, however the users' threads interleave, and the pool never makes
 * another.  Past that number it grows, and keeps what it grew.  Any thread
 * may acquire and give back.
 *
 * A chunk lent finds its way back through its owner table
 * (PpChunkOwner, pp-envelope.h): the envelope never calls the pool. */
#pragma once

#include "pp-envelope.h"

G_BEGIN_DECLS

typedef struct _PpChunkPool PpChunkPool;

/* A pool of @reserve chunks made up front (tensors come with first use). */
PpChunkPool *pp_chunk_pool_new     (guint reserve);
/* The same whose chunks' tensors live in @backend's device memory
 * (NULL: the host): the payloads of a link whose data plane is NCCL. */
PpChunkPool *pp_chunk_pool_new_on  (guint reserve,
                                    struct _PpBackend * backend);
/* The backend of the pool's tensors, NULL for the host. */
struct _PpBackend *pp_chunk_pool_backend (PpChunkPool * pool);
/* Drops the owner's reference: the pool and its chunks go once every chunk
 * it lent has been given back. */
void         pp_chunk_pool_unref   (PpChunkPool * pool);
/* A chunk with every header field cleared and, when it was used before,
 * the tensors of that use, for the caller to reuse or replace
 * (pp_chunk_fit_tensor).  pp_chunk_free gives it back. */
PpChunk     *pp_chunk_pool_acquire (PpChunkPool * pool);
/* Chunks made so far: the reserve, or the most held at once when more. */
guint        pp_chunk_pool_size    (PpChunkPool * pool);

G_END_DECLS
