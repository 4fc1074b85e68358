/* ppdiffuse — which way the CUDA attention runs, and how its GEMM ways
 * cut their work so that the scores of one chunk (query rows × heads ×
 * keys, float32) fit a bounded scratch.
 *
 * A chunk is a range of query rows of a range of heads of one sample; the
 * chunks of a sample cover every (row, head) pair exactly once.  Plain C,
 * no CUDA: the host tests check the coverage and the bound. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* The scores scratch of the CUDA attention: big enough for a 4096-query
 * block of several heads of an SD UNet at 512², small next to its
 * weights. */
#define PP_CUDA_ATTENTION_SCRATCH_BYTES ((gsize) 64 << 20)
/* Fewer query rows per GEMM than this leave tensor cores idle: heads are
 * split before rows go below it. */
#define PP_CUDA_ATTENTION_MIN_ROWS 64

/* The ways (pp-cuda-attention.c), as PPDIFFUSE_CUDA_ATTENTION names
 * them. */
typedef enum
{
  PP_CUDA_ATTENTION_FUSED,      /* "fused": cuDNN's flash attention, else
                                 * 16-bit GEMMs */
  PP_CUDA_ATTENTION_GEMM,       /* "gemm": 16-bit GEMMs and a softmax */
  PP_CUDA_ATTENTION_F32,        /* "f32": float32 GEMMs whatever the dtype */
} PpCudaAttention;

/* PPDIFFUSE_CUDA_ATTENTION's @value (NULL or empty: fused) as a way; FALSE
 * with a PP_ERROR_CONFIG error naming the variable and the choices. */
gboolean pp_cuda_attention_parse (const gchar * value,
                                  PpCudaAttention * way, GError ** error);
/* @way's name, as PPDIFFUSE_CUDA_ATTENTION names it. */
const gchar *pp_cuda_attention_name (PpCudaAttention way);

typedef struct
{
  int lq, heads;
  int rows;                     /* query rows per chunk (the last: fewer) */
  int chunk_heads;              /* heads per chunk (the last: fewer) */
  int row_chunks, head_chunks;
  gsize scratch_bytes;          /* scores of the largest chunk */
} PpCudaAttentionPlan;

typedef struct
{
  int row0, rows, head0, heads;
} PpCudaAttentionChunk;

/* Plans @lq queries × @lk keys × @heads heads with at most @bound bytes of
 * scores; FALSE when not even one row of one head fits (lk·4 > bound). */
gboolean pp_cuda_attention_plan  (int lq, int lk, int heads, gsize bound,
                                  PpCudaAttentionPlan * plan);
int      pp_cuda_attention_n_chunks (const PpCudaAttentionPlan * plan);
/* Chunk @index (0 ≤ index < n_chunks) of one sample. */
PpCudaAttentionChunk pp_cuda_attention_chunk (const PpCudaAttentionPlan * plan,
                                  int index);

G_END_DECLS
