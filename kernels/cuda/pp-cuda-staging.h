/* ppdiffuse — the host side of the CUDA backend's uploads: how a host
 * array crosses through the pinned staging buffers, in chunks of whole
 * elements, converted (float32 narrowed to f16 or bf16, or copied) by the
 * host on its way in.
 *
 * Plain host code with no CUDA call, so that its element and byte
 * arithmetic, its chunking and its conversions are tested on any machine
 * (tests/kernels/cuda/test-cuda-staging.c); pp-cuda-backend.c only adds
 * the copies and the events. */
#pragma once

#include <glib.h>

#include "pp-tensor.h"

G_BEGIN_DECLS

/* Bytes of an element of @dtype (pp_dtype_size's answer: the module
 * calls none of the kernels library's functions, which a privately loaded
 * plugin does not export to it). */
static inline gsize
pp_cuda_dtype_size (PpDType dtype)
{
  switch (dtype) {
    case PP_DTYPE_F64:
      return 8;
    case PP_DTYPE_F32:
      return 4;
    case PP_DTYPE_F16:
    case PP_DTYPE_BF16:
      return 2;
    case PP_DTYPE_U8:
      return 1;
    default:
      return 0;
  }
}

/* An upload of @count elements of @src_dtype on the host into @dst_dtype
 * on the device, cut into chunks that fit a staging buffer. */
typedef struct
{
  gsize count;
  PpDType src_dtype, dst_dtype;
  gsize src_size, dst_size;     /* bytes per element */
  gsize per_chunk;              /* elements per chunk (the last: fewer) */
} PpStagingPlan;

/* One chunk: elements [first, first + n), at these byte offsets of the
 * host source and the device destination, @dst_bytes crossing the bus. */
typedef struct
{
  gsize first, n;
  gsize src_offset, dst_offset, dst_bytes;
} PpStagingChunk;

/* Plans an upload through buffers of @staging_bytes.  Supported: a copy
 * (@src_dtype = @dst_dtype, any dtype; U8 for raw bytes) and float32
 * narrowed to F16 or BF16.  FALSE with an error naming both dtypes
 * otherwise, or when one element does not fit a buffer. */
gboolean pp_staging_plan_init  (PpStagingPlan * plan, gsize count,
                                PpDType src_dtype, PpDType dst_dtype,
                                gsize staging_bytes, GError ** error);
gsize    pp_staging_n_chunks   (const PpStagingPlan * plan);
/* Chunk @index (< pp_staging_n_chunks). */
PpStagingChunk pp_staging_chunk (const PpStagingPlan * plan, gsize index);
/* Writes chunk @chunk's @chunk->n elements of @src (the whole host array)
 * converted into @dst (a staging buffer, from its start): on several
 * threads when the chunk is large. */
void     pp_staging_fill       (const PpStagingPlan * plan,
                                const PpStagingChunk * chunk, gpointer dst,
                                gconstpointer src);
/* @n elements of @src (@src_dtype) into @dst (@dst_dtype), one thread;
 * the pair must be one pp_staging_plan_init accepts. */
void     pp_staging_convert    (gpointer dst, PpDType dst_dtype,
                                gconstpointer src, PpDType src_dtype,
                                gsize n);

G_END_DECLS
