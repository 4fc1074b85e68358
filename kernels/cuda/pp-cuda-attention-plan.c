/* ppdiffuse — the CUDA attention's way, and the chunking of its
 * scores. */
#include "pp-cuda-attention-plan.h"
#include "pp-cuda-backend.h"
#include "pp-cuda-choice.h"

#include <string.h>

gboolean
pp_cuda_attention_plan (int lq, int lk, int heads, gsize bound,
    PpCudaAttentionPlan * plan)
{
  const gsize row_bytes = (gsize) lk * sizeof (float);
  gsize rows_fit, heads_fit;
  int min_rows;

  g_return_val_if_fail (lq > 0 && lk > 0 && heads > 0, FALSE);
  memset (plan, 0, sizeof *plan);
  if (row_bytes > bound)
    return FALSE;
  /* (row, head) score rows that fit at once. */
  rows_fit = bound / row_bytes;
  min_rows = MIN (lq, PP_CUDA_ATTENTION_MIN_ROWS);
  /* All heads at once while that leaves min_rows query rows per chunk;
   * fewer heads otherwise (at least one). */
  heads_fit = rows_fit / (gsize) min_rows;
  plan->chunk_heads = (int) CLAMP (heads_fit, 1, (gsize) heads);
  plan->rows = (int) MIN (rows_fit / (gsize) plan->chunk_heads, (gsize) lq);
  plan->lq = lq;
  plan->heads = heads;
  plan->row_chunks = (lq + plan->rows - 1) / plan->rows;
  plan->head_chunks = (heads + plan->chunk_heads - 1) / plan->chunk_heads;
  plan->scratch_bytes = (gsize) plan->rows * plan->chunk_heads * row_bytes;
  return TRUE;
}

int
pp_cuda_attention_n_chunks (const PpCudaAttentionPlan * plan)
{
  return plan->row_chunks * plan->head_chunks;
}

PpCudaAttentionChunk
pp_cuda_attention_chunk (const PpCudaAttentionPlan * plan, int index)
{
  PpCudaAttentionChunk c;
  const int r = index % plan->row_chunks, h = index / plan->row_chunks;

  c.row0 = r * plan->rows;
  c.rows = MIN (plan->rows, plan->lq - c.row0);
  c.head0 = h * plan->chunk_heads;
  c.heads = MIN (plan->chunk_heads, plan->heads - c.head0);
  return c;
}

/* PPDIFFUSE_CUDA_ATTENTION's values, in the order of PpCudaAttention. */
static const gchar *const attention_names[] = { "fused", "gemm", "f32",
  NULL
};

const gchar *
pp_cuda_attention_name (PpCudaAttention way)
{
  return attention_names[way];
}

gboolean
pp_cuda_attention_parse (const gchar * value, PpCudaAttention * way,
    GError ** error)
{
  guint index;

  if (!pp_cuda_choice_parse (PP_CUDA_ATTENTION_ENV, value, attention_names,
          &index, error))
    return FALSE;
  *way = (PpCudaAttention) index;
  return TRUE;
}
