/* ppdiffuse — attention on the device without all heads' scores at once:
 * per chunk of query rows and heads (pp-cuda-attention-plan.c), scores
 * S = q·kᵀ/√head_dim by a strided-batched GEMM (one batch entry per head)
 * into a bounded scratch, a row softmax, then out = S·v by a second one.
 * Heads are column ranges of q, k, v and out (row stride heads·head_dim),
 * so nothing is copied or transposed.  Everything is float32 (q, k, v are
 * activations), exact unless TF32 was asked for.  Causal attention runs the
 * same way with a softmax that zeroes the keys after each query. */
#include "pp-cuda-attention-plan.h"
#include "pp-cuda-private.h"
#include "pp-error.h"

#include <math.h>

/* y_h [m,n] (ld ldy) = alpha · a_h [m,k] · op(b_h) for @batch heads h,
 * row-major (see pp-cuda-gemm.c for the column-major mapping), a_h at
 * a + h·stride_a and so on. */
static void
gemm_heads (PpCudaBackend * cu, gboolean trans_b, int m, int n, int k,
    float alpha, const float *a, int lda, long long stride_a,
    const float *b, int ldb, long long stride_b, float *y, int ldy,
    long long stride_y, int batch)
{
  const float beta = 0.0f;

  PP_CUBLAS_OP_TRY (cu, cublasGemmStridedBatchedEx (cu->cublas,
          trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha,
          b, CUDA_R_32F, ldb, stride_b, a, CUDA_R_32F, lda, stride_a, &beta,
          y, CUDA_R_32F, ldy, stride_y, batch,
          cu->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F,
          CUBLAS_GEMM_DEFAULT));
}

static void
attention (PpCudaBackend * cu, const float *q, const float *k,
    const float *v, int n, int lq, int lk, int heads, int head_dim,
    gboolean causal, float *out)
{
  const int width = heads * head_dim;   /* row stride of q, k, v, out */
  PpCudaAttentionPlan plan;
  float *scores;

  g_return_if_fail (n > 0 && lq > 0 && lk > 0 && heads > 0 && head_dim > 0);

  if (!pp_cuda_attention_plan (lq, lk, heads,
          PP_CUDA_ATTENTION_SCRATCH_BYTES, &plan))
    pp_cuda_fatal (cu, g_error_new (PP_ERROR, PP_ERROR_DEVICE,
            "attention over %d keys: one row of scores exceeds the %"
            G_GSIZE_FORMAT " MiB scratch", lk,
            PP_CUDA_ATTENTION_SCRATCH_BYTES >> 20));
  scores = pp_cuda_scratch (cu, PP_CUDA_SCRATCH_SCORES, plan.scratch_bytes);

  for (int s = 0; s < n; s++) {
    const gsize q_off = (gsize) s * lq * width, kv_off = (gsize) s * lk
        * width;

    for (int i = 0; i < pp_cuda_attention_n_chunks (&plan); i++) {
      const PpCudaAttentionChunk c = pp_cuda_attention_chunk (&plan, i);
      const gsize first = (gsize) c.row0 * width + (gsize) c.head0
          * head_dim;
      const long long per_head = (long long) c.rows * lk;

      /* S_h [rows,lk] = q_h [rows,head_dim] · k_hᵀ / √head_dim. */
      gemm_heads (cu, TRUE, c.rows, lk, head_dim,
          1.0f / sqrtf ((float) head_dim), q + q_off + first, width,
          head_dim, k + kv_off + (gsize) c.head0 * head_dim, width,
          head_dim, scores, lk, per_head, c.heads);
      if (causal)
        PP_CUDA_OP_TRY (cu, pp_cuda_softmax_rows_causal (scores,
                (gsize) c.heads * c.rows, lk, c.rows, c.row0, cu->stream));
      else
        PP_CUDA_OP_TRY (cu, pp_cuda_softmax_rows (scores,
                (gsize) c.heads * c.rows, lk, cu->stream));
      /* out_h [rows,head_dim] = P_h [rows,lk] · v_h [lk,head_dim]. */
      gemm_heads (cu, FALSE, c.rows, head_dim, lk, 1.0f, scores, lk,
          per_head, v + kv_off + (gsize) c.head0 * head_dim, width,
          head_dim, out + q_off + first, width, head_dim, c.heads);
    }
  }
}

void
pp_cuda_op_attention (PpCudaBackend * cu, const float *q, const float *k,
    const float *v, int n, int lq, int lk, int heads, int head_dim,
    float *out)
{
  attention (cu, q, k, v, n, lq, lk, heads, head_dim, FALSE, out);
}

void
pp_cuda_op_attention_causal (PpCudaBackend * cu, const float *q,
    const float *k, const float *v, int n, int l, int heads, int head_dim,
    float *out)
{
  attention (cu, q, k, v, n, l, l, heads, head_dim, TRUE, out);
}
