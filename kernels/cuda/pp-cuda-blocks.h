/* ppdiffuse — device memory blocks a CUDA backend keeps for reuse rather
 * than freeing them.  cudaFree waits for every kernel of the device, an
 * NCCL transfer's included, whose peer may itself be waiting in a free:
 * so while a pipeline streams, a freed buffer (a chunk re-fitted to a new
 * frame size, a scratch buffer that grew) is kept here and handed to the
 * next request it fits, and the memory goes back to the device only when
 * nothing is in use or an allocation found the device full.  Plain C, no
 * CUDA: the host tests check it. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* What a block is allocated in: requests round up to it, so that nearby
 * sizes share blocks (cudaMalloc aligns so already). */
#define PP_CUDA_BLOCK_ALIGN 256

typedef struct _PpCudaBlocks PpCudaBlocks;

PpCudaBlocks *pp_cuda_blocks_new (void);

/* @bytes rounded up to PP_CUDA_BLOCK_ALIGN (at least one; a size within
 * one alignment of G_MAXSIZE as it is). */
gsize    pp_cuda_blocks_round  (gsize bytes);

/* The smallest kept block that @bytes fit and that is at most twice
 * their rounded size (a small request never holds a large block), taken
 * out of the set with its size in *@block_bytes; NULL when none fits. */
gpointer pp_cuda_blocks_take   (PpCudaBlocks * blocks, gsize bytes,
                                gsize * block_bytes);

/* Keeps @mem, a block of @block_bytes, for a later take. */
void     pp_cuda_blocks_keep   (PpCudaBlocks * blocks, gpointer mem,
                                gsize block_bytes);

/* Hands every kept block to @release, smallest first, and forgets them;
 * returns the bytes released. */
gsize    pp_cuda_blocks_drain  (PpCudaBlocks * blocks,
                                void (*release) (gpointer mem,
                                    gpointer data), gpointer data);

guint    pp_cuda_blocks_count  (const PpCudaBlocks * blocks);
gsize    pp_cuda_blocks_bytes  (const PpCudaBlocks * blocks);

/* Frees the set, which must have been drained. */
void     pp_cuda_blocks_free   (PpCudaBlocks * blocks);

G_END_DECLS
