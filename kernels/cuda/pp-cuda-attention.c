/* ppdiffuse — attention on the device, in one of three ways
 * (PpCudaAttention, chosen per backend by PPDIFFUSE_CUDA_ATTENTION):
 *
 * fused (the default): when the weights that made q, k and v are 16-bit
 *   (the op's dtype), q, k and v are narrowed to it (or taken as they are
 *   when they are activations of it) and cuDNN's fused flash attention
 *   (pp-cuda-sdpa.c) computes the output in one graph, float32 softmax
 *   and accumulation, never storing the scores; the output is widened
 *   back (or written as it is to a 16-bit activation).  A shape cuDNN has no engine for takes the
 *   16-bit GEMMs below (said once per shape in the log).
 * gemm: per chunk of query rows and heads (pp-cuda-attention-plan.c),
 *   scores S = q·kᵀ/√head_dim by a strided-batched GEMM (one batch entry
 *   per head) of 16-bit q and k on tensor cores into a bounded float32
 *   scratch, a row softmax writing 16-bit probabilities, then out = P·v by
 *   a second one, of 16-bit P and v, straight into the float32 output.
 * float32 (the op's dtype is F32, or PPDIFFUSE_CUDA_ATTENTION=f32): the
 *   same chunks in float32 throughout, exact unless TF32 was asked for.
 *
 * Heads are column ranges of q, k, v and out (row strides ld_q, ld_kv and
 * heads·head_dim), so nothing is transposed.  The fused and 16-bit ways
 * take q, k and v packed: strided ones (a fused QKV's column ranges) are
 * packed as they are narrowed, or copied when already 16-bit.  Causal
 * attention (a text encoder's) runs the same ways with a softmax, or a
 * cuDNN mask, that drops the keys after each query. */
#include "pp-cuda-attention-plan.h"
#include "pp-cuda-backend.h"
#include "pp-cuda-convert.h"
#include "pp-cuda-private.h"
#include "pp-error.h"

#ifdef PP_HAVE_CUDNN
#include "pp-cuda-graph-api.h"
#include "pp-cuda-sdpa.h"
#endif

#include <math.h>

/* q, k and v narrowed side by side in one scratch buffer: each part starts
 * on a multiple of this many elements (128 bytes), the alignment cuDNN and
 * the tensor cores want. */
#define PART_ALIGN 64

static gsize
part_size (gsize count)
{
  return (count + PART_ALIGN - 1) / PART_ALIGN * PART_ALIGN;
}

/* Whether 16-bit data at @p starts where a part would. */
static gboolean
part_aligned (gconstpointer p)
{
  return (guintptr) p % (PART_ALIGN * sizeof (guint16)) == 0;
}

/* y_h [m,n] (ld ldy, float32) = alpha · a_h [m,k] · op(b_h) for @batch
 * heads h, row-major (see pp-cuda-gemm.c for the column-major mapping),
 * a_h at a + h·stride_a and so on, a and b of type @t (float32 or 16-bit,
 * accumulating in float32). */
static void
gemm_heads (PpCudaBackend * cu, PpCudaType t, gboolean trans_b, int m,
    int n, int k, float alpha, gconstpointer a, int lda, long long stride_a,
    gconstpointer b, int ldb, long long stride_b, float *y, int ldy,
    long long stride_y, int batch)
{
  const float beta = 0.0f;
  const cublasComputeType_t compute = t == PP_CUDA_F32 && cu->tf32
      ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const cudaDataType_t type = pp_cuda_data_type (t);

  PP_CUBLAS_OP_RUN (cu, cublasGemmStridedBatchedEx (cu->cublas,
          trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &alpha,
          b, type, ldb, stride_b, a, type, lda, stride_a, &beta, y,
          CUDA_R_32F, ldy, stride_y, batch, compute, CUBLAS_GEMM_DEFAULT));
}

/* The chunked GEMM attention, q, k, v of type @t (float32: the op's own
 * buffers, rows @ld_q and @ld_kv apart; 16-bit: packed copies). */
static void
attention_gemm (PpCudaBackend * cu, PpCudaType t, gconstpointer q,
    gconstpointer k, gconstpointer v, int n, int lq, int lk, int heads,
    int head_dim, int ld_q, int ld_kv, gboolean causal, float *out)
{
  const int width = heads * head_dim;   /* row stride of out */
  const gsize size = pp_cuda_type_size (t);
  PpCudaAttentionPlan plan;
  gpointer probs = NULL;
  float *scores;

  if (!pp_cuda_attention_plan (lq, lk, heads,
          PP_CUDA_ATTENTION_SCRATCH_BYTES, &plan))
    pp_cuda_fatal (cu, g_error_new (PP_ERROR, PP_ERROR_DEVICE,
            "attention over %d keys: one row of scores exceeds the %"
            G_GSIZE_FORMAT " MiB scratch", lk,
            PP_CUDA_ATTENTION_SCRATCH_BYTES >> 20));
  scores = pp_cuda_scratch (cu, PP_CUDA_SCRATCH_SCORES, plan.scratch_bytes);
  if (t != PP_CUDA_F32)
    probs = pp_cuda_scratch (cu, PP_CUDA_SCRATCH_PROBS,
        plan.scratch_bytes / sizeof (float) * sizeof (guint16));

  for (int s = 0; s < n; s++) {
    const gsize q_off = (gsize) s * lq * ld_q, kv_off = (gsize) s * lk
        * ld_kv, out_off = (gsize) s * lq * width;

    for (int i = 0; i < pp_cuda_attention_n_chunks (&plan); i++) {
      const PpCudaAttentionChunk c = pp_cuda_attention_chunk (&plan, i);
      const gsize col = (gsize) c.head0 * head_dim;
      const gsize q_first = (gsize) c.row0 * ld_q + col;
      const gsize out_first = (gsize) c.row0 * width + col;
      const long long per_head = (long long) c.rows * lk;
      const gsize rows = (gsize) c.heads * c.rows;

      /* S_h [rows,lk] = q_h [rows,head_dim] · k_hᵀ / √head_dim. */
      gemm_heads (cu, t, TRUE, c.rows, lk, head_dim,
          1.0f / sqrtf ((float) head_dim),
          (const guint8 *) q + (q_off + q_first) * size, ld_q, head_dim,
          (const guint8 *) k + (kv_off + col) * size, ld_kv, head_dim,
          scores, lk, per_head, c.heads);
      if (t != PP_CUDA_F32)
        PP_CUDA_OP_RUN (cu, pp_cuda_softmax_rows_narrow (scores, rows, lk,
                causal, c.rows, c.row0, probs, t, cu->stream));
      else if (causal)
        PP_CUDA_OP_RUN (cu, pp_cuda_softmax_rows_causal (scores, rows, lk,
                c.rows, c.row0, cu->stream));
      else
        PP_CUDA_OP_RUN (cu, pp_cuda_softmax_rows (scores, rows, lk,
                cu->stream));
      /* out_h [rows,head_dim] = P_h [rows,lk] · v_h [lk,head_dim]. */
      gemm_heads (cu, t, FALSE, c.rows, head_dim, lk, 1.0f,
          t != PP_CUDA_F32 ? probs : (gpointer) scores, lk, per_head,
          (const guint8 *) v + (kv_off + col) * size, ld_kv, head_dim,
          out + out_off + out_first, width, head_dim, c.heads);
    }
  }
}

#ifdef PP_HAVE_CUDNN
/* cuDNN's flash attention on the 16-bit q, k, v (rows @ld_q and @ld_kv
 * apart) into @out (float32, or of their type @t); FALSE when cuDNN has no
 * engine for the shape (the GEMMs then compute all of it).
 * The plan is one sample's, run for each sample in turn: a plan can cost
 * cuDNN a kernel compilation, which a stream batch's every new size would
 * otherwise pay again in the middle of a stream. */
static gboolean
attention_fused (PpCudaBackend * cu, PpCudaType t, gconstpointer q16,
    gconstpointer k16, gconstpointer v16, int n, int lq, int lk, int heads,
    int head_dim, int ld_q, int ld_kv, gboolean causal, gpointer out,
    PpCudaType out_type)
{
  const gsize width = (gsize) heads * head_dim;
  const gsize count = (gsize) n * lq * width;
  g_autoptr (GError) error = NULL;
  gsize bytes = 0;
  guint16 *out16;
  gpointer workspace;

  /* A shape first met inside a graph capture: its plan may compile
   * kernels and load them, which is no work for a capture.  The capture
   * fails, and the work reruns without a graph, which makes the plan. */
  if (pp_cuda_capturing_here (cu) && !pp_cuda_sdpa_known (cu->sdpa_plans, t,
          1, lq, lk, heads, head_dim, causal, ld_q, ld_kv)) {
    if (cu->capture_error == NULL)
      g_set_error (&cu->capture_error, PP_ERROR, PP_ERROR_DEVICE, "%s: "
          "attention of %d queries, %d keys, %d heads of %d first met while "
          "a CUDA graph was captured (its fused plan is made outside "
          "captures)", cu->be.device ? cu->be.device : "?", lq, lk, heads,
          head_dim);
    return FALSE;
  }
  /* An unsupported shape: the log said so when its plan was tried. */
  if (!pp_cuda_sdpa_prepare (cu->cudnn, cu->sdpa_plans, t, 1, lq, lk, heads,
          head_dim, causal, ld_q, ld_kv, &bytes, &error))
    return FALSE;
  workspace = bytes > 0 ? pp_cuda_scratch (cu, PP_CUDA_SCRATCH_WORKSPACE,
      bytes) : NULL;
  out16 = out_type == t && part_aligned (out) ? out
      : pp_cuda_scratch (cu, PP_CUDA_SCRATCH_PROBS,
      count * sizeof (guint16));
  /* Halted: no work, and no refusal to remember. */
  if (pp_cuda_halted (cu))
    return TRUE;
  for (int s = 0; s < n; s++) {
    const gsize qs = (gsize) s * lq * ld_q, ks = (gsize) s * lk * ld_kv;
    const gsize os = (gsize) s * lq * width;

    if (pp_cuda_sdpa_run (cu->cudnn, cu->sdpa_plans, t,
            (const guint16 *) q16 + qs, (const guint16 *) k16 + ks,
            (const guint16 *) v16 + ks, out16 + os, 1, lq, lk, heads,
            head_dim, causal, ld_q, ld_kv, workspace, bytes, &error))
      continue;
    if (pp_cuda_capturing_here (cu)) {
      /* Perhaps only the capture it cannot run in: the capture fails,
       * and the work runs without a graph, fused. */
      pp_cuda_op_error (cu, g_steal_pointer (&error));
      return FALSE;
    }
    /* A plan cuDNN made but cannot run: the shape takes the GEMMs from
     * now on, said loudly (a fused kernel that fails is news); a CUDA
     * error under cuDNN's refusal is not the GEMMs'. */
    pp_cuda_forget_error ();
    g_warning ("cuda attention: %d queries, %d keys, %d heads of %d%s: "
        "cuDNN's fused attention failed (%s); 16-bit GEMMs from now on",
        lq, lk, heads, head_dim, causal ? ", causal" : "", error->message);
    pp_cuda_sdpa_refuse (cu->sdpa_plans, t, 1, lq, lk, heads, head_dim,
        causal, ld_q, ld_kv, error->message);
    return FALSE;
  }
  if (out16 == out)
    return TRUE;
  if (out_type == t)
    PP_CUDA_OP_RUN (cu, cudaMemcpyAsync (out, out16, count
            * sizeof (guint16), cudaMemcpyDeviceToDevice, cu->stream));
  else if (t == PP_CUDA_BF16)
    PP_CUDA_OP_RUN (cu, pp_cuda_bf16_to_f32 (out16, out, count,
            cu->stream));
  else
    PP_CUDA_OP_RUN (cu, pp_cuda_f16_to_f32 (out16, out, count, cu->stream));
  return TRUE;
}

/* Whether activation @v, rows @ld apart, is of @t and where cuDNN reads
 * it as it is: on the graphs' alignment, its rows a multiple of 8 values
 * apart (pp-cuda-sdpa.h). */
static gboolean
strided_usable (PpCudaBackend * cu, const char *op, PpView v, int ld,
    PpCudaType t)
{
  return pp_cuda_act_type (cu, op, "activation", v.dtype) == t
      && ld % 8 == 0 && pp_cudnn_graph_aligned (v.data);
}
#endif

static PpCudaType
compute_type (PpCudaBackend * cu, PpDType dtype)
{
  if (cu->attention == PP_CUDA_ATTENTION_F32)
    return PP_CUDA_F32;
  return dtype == PP_DTYPE_F16 ? PP_CUDA_F16 : dtype == PP_DTYPE_BF16
      ? PP_CUDA_BF16 : PP_CUDA_F32;
}

/* Whether activation @v, rows @ld apart of @width used, is of @t, packed
 * and where a part would start: used as it is. */
static gboolean
usable (PpCudaBackend * cu, const char *op, PpView v, int ld, int width,
    PpCudaType t)
{
  return pp_cuda_act_type (cu, op, "activation", v.dtype) == t
      && ld == width && part_aligned (v.data);
}

/* Activation @v (@rows rows @ld apart, @width used; float32 or of @t) as
 * @t, packed: itself when usable, else narrowed or copied into @part. */
static gconstpointer
as_compute_type (PpCudaBackend * cu, const char *op, const char *param,
    PpView v, PpCudaType t, gsize rows, int ld, int width, guint16 * part)
{
  if (usable (cu, op, v, ld, width, t))
    return v.data;
  if (pp_cuda_act_type (cu, op, param, v.dtype) == t) {
    PP_CUDA_OP_RUN (cu, cudaMemcpy2DAsync (part, width * sizeof (guint16),
            v.data, ld * sizeof (guint16), width * sizeof (guint16), rows,
            cudaMemcpyDeviceToDevice, cu->stream));
  } else {
    PP_CUDA_OP_RUN (cu, pp_cuda_narrow_2d (v.data, rows, width, ld, part, t,
            cu->stream));
  }
  return part;
}

/* Whether activation @dtype is float32 or of compute type @t. */
static gboolean
float_or (PpCudaBackend * cu, const char *op, PpDType dtype, PpCudaType t)
{
  const PpCudaType a = pp_cuda_act_type (cu, op, "activation", dtype);

  return a == PP_CUDA_F32 || a == t;
}

static void
attention (PpCudaBackend * cu, const char *op, PpView q_view,
    PpView k_view, PpView v_view, int n, int lq, int lk, int heads,
    int head_dim, int ld_q, int ld_kv, PpDType dtype, gboolean causal,
    PpOut out_view)
{
  const PpCudaType t = compute_type (cu, dtype);
  const int width = heads * head_dim;
  /* Packed elements of q (and of out), and of k and of v. */
  const gsize nq = (gsize) n * lq * width, nk = (gsize) n * lk * width;
  PpCudaType out_type;
  gconstpointer q16, k16, v16;
  guint16 *parts;
  gpointer out;

  g_return_if_fail (n > 0 && lq > 0 && lk > 0 && heads > 0 && head_dim > 0
      && ld_q >= width && ld_kv >= width);

  /* float32 attention, or activations of another 16-bit type than the
   * product's: float32 activations (16-bit ones through float32 scratch). */
  if (t == PP_CUDA_F32 || !float_or (cu, op, q_view.dtype, t)
      || !float_or (cu, op, k_view.dtype, t)
      || !float_or (cu, op, v_view.dtype, t)
      || !float_or (cu, op, out_view.dtype, t)) {
    const float *q = pp_cuda_in (cu, op, "q", q_view);
    const float *k = pp_cuda_in (cu, op, "k", k_view);
    const float *v = pp_cuda_in (cu, op, "v", v_view);

    /* Every row of every head is written: nothing of out is read. */
    out = pp_cuda_out_whole (cu, op, "out", out_view);
    if (t == PP_CUDA_F32) {
      attention_gemm (cu, t, q, k, v, n, lq, lk, heads, head_dim, ld_q,
          ld_kv, causal, out);
      return;
    }
    q_view = pp_view_f32 (q, q_view.numel);
    k_view = pp_view_f32 (k, k_view.numel);
    v_view = pp_view_f32 (v, v_view.numel);
    out_view = pp_out_f32 (out, nq);
  }
#ifdef PP_HAVE_CUDNN
  /* Column ranges of a wider product (a stacked q, k, v) already of the
   * 16-bit type: cuDNN reads them in place, through their row strides,
   * where it takes the shape; else they are copied packed below. */
  if (cu->attention == PP_CUDA_ATTENTION_FUSED
      && (ld_q != width || ld_kv != width)
      && strided_usable (cu, op, q_view, ld_q, t)
      && strided_usable (cu, op, k_view, ld_kv, t)
      && strided_usable (cu, op, v_view, ld_kv, t)
      && attention_fused (cu, t, q_view.data, k_view.data, v_view.data, n,
          lq, lk, heads, head_dim, ld_q, ld_kv, causal, out_view.data,
          pp_cuda_act_type (cu, op, "out", out_view.dtype)))
    return;
#endif
  /* q, k and v in the product's 16-bit type: as they are, or narrowed
   * (the scratch only when one is: a graph capture cannot grow it). */
  parts = usable (cu, op, q_view, ld_q, width, t)
      && usable (cu, op, k_view, ld_kv, width, t)
      && usable (cu, op, v_view, ld_kv, width, t) ? NULL
      : pp_cuda_scratch (cu, PP_CUDA_SCRATCH_QKV, (part_size (nq)
          + 2 * part_size (nk)) * sizeof (guint16));
  q16 = as_compute_type (cu, op, "q", q_view, t, (gsize) n * lq, ld_q, width,
      parts);
  k16 = as_compute_type (cu, op, "k", k_view, t, (gsize) n * lk, ld_kv,
      width, parts ? parts + part_size (nq) : NULL);
  v16 = as_compute_type (cu, op, "v", v_view, t, (gsize) n * lk, ld_kv,
      width, parts ? parts + part_size (nq) + part_size (nk) : NULL);
  out = out_view.data;
  out_type = pp_cuda_act_type (cu, op, "out", out_view.dtype);
#ifdef PP_HAVE_CUDNN
  if (cu->attention == PP_CUDA_ATTENTION_FUSED
      && attention_fused (cu, t, q16, k16, v16, n, lq, lk, heads, head_dim,
          width, width, causal, out, out_type))
    return;
#endif
  /* The GEMMs write float32. */
  if (out_type != PP_CUDA_F32)
    out = pp_cuda_out_whole (cu, op, "out", out_view);
  attention_gemm (cu, t, q16, k16, v16, n, lq, lk, heads, head_dim, width,
      width, causal, out);
}

void
pp_cuda_op_attention (PpCudaBackend * cu, PpView q_view, PpView k_view,
    PpView v_view, int n, int lq, int lk, int heads, int head_dim, int ld_q,
    int ld_kv, PpDType dtype, PpOut out_view)
{
  attention (cu, "attention", q_view, k_view, v_view, n, lq, lk, heads,
      head_dim, ld_q, ld_kv, dtype, FALSE, out_view);
}

void
pp_cuda_op_attention_causal (PpCudaBackend * cu, PpView q_view,
    PpView k_view, PpView v_view, int n, int l, int heads, int head_dim,
    PpDType dtype, PpOut out_view)
{
  attention (cu, "attention_causal", q_view, k_view, v_view, n, l, l, heads,
      head_dim, heads * head_dim, heads * head_dim, dtype, TRUE, out_view);
}
