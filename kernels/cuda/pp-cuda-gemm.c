/* ppdiffuse — linear and matmul on cuBLAS.
 *
 * The ops are row-major (PyTorch's layouts), cuBLAS is column-major: a
 * row-major matrix with row stride ld is, read column-major, its transpose
 * with leading dimension ld.  So y = op(a)·op(b) row-major is computed as
 * yᵀ = op(b)ᵀ·op(a)ᵀ column-major: cuBLAS gets b first and a second, each
 * with its own transpose flag, and the sizes (n, m, k).
 *
 * A weight stored in 16 bits (its view's dtype) is multiplied in that type
 * on tensor cores: the float32 operand is narrowed into a scratch buffer
 * (rounded as pp-dtype-math.h rounds), and cublasGemmEx multiplies 16-bit
 * inputs into a float32 output with float32 accumulation.  Float32
 * operands stay exact float32 unless TF32 was asked for
 * (PPDIFFUSE_CUDA_TF32). */
#include "pp-cuda-private.h"
#include "pp-error.h"

cudaDataType_t
pp_cuda_data_type (PpCudaType t)
{
  switch (t) {
    case PP_CUDA_F16:
      return CUDA_R_16F;
    case PP_CUDA_BF16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

/* The operand stored at @p as @have, a matrix of @rows × @cols (row
 * stride *@ld), in type @want: @p itself when stored so, else narrowed
 * into scratch @slot (packed: *@ld becomes @cols). */
static gconstpointer
operand (PpCudaBackend * cu, gconstpointer p, PpCudaType have,
    PpCudaType want, int rows, int cols, int *ld, PpCudaScratch slot)
{
  gpointer packed;

  if (have == want)
    return p;
  /* Only float32 operands are narrowed: one product runs in one type. */
  if (have != PP_CUDA_F32)
    pp_cuda_fatal (cu, g_error_new (PP_ERROR, PP_ERROR_DEVICE, "a product "
            "of a float16 and a bfloat16 operand: no kernel multiplies the "
            "two"));
  packed = pp_cuda_scratch (cu, slot, (gsize) rows * cols * sizeof (guint16));
  PP_CUDA_OP_TRY (cu, pp_cuda_narrow_2d (p, rows, cols, *ld, packed, want,
          cu->stream));
  *ld = cols;
  return packed;
}

void
pp_cuda_gemm (PpCudaBackend * cu, gboolean trans_a, gboolean trans_b, int m,
    int n, int k, float alpha, gconstpointer a, PpCudaType ta, int lda,
    gconstpointer b, PpCudaType tb, int ldb, float beta, float *y, int ldy)
{
  /* The 16-bit type of either operand, or float32. */
  const PpCudaType t = ta != PP_CUDA_F32 ? ta : tb;
  const cudaDataType_t type = pp_cuda_data_type (t);
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  gconstpointer pa = a, pb = b;

  if (m <= 0 || n <= 0)
    return;
  if (t != PP_CUDA_F32) {
    /* Stored shapes: a is [m,k], or [k,m] when transposed; b likewise. */
    pa = operand (cu, a, ta, t, trans_a ? k : m, trans_a ? m : k, &lda,
        PP_CUDA_SCRATCH_A);
    pb = operand (cu, b, tb, t, trans_b ? n : k, trans_b ? k : n, &ldb,
        PP_CUDA_SCRATCH_B);
  } else if (cu->tf32) {
    compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  PP_CUBLAS_OP_TRY (cu, cublasGemmEx (cu->cublas,
          trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
          trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha,
          pb, type, ldb, pa, type, lda, &beta,
          y, CUDA_R_32F, ldy, compute, CUBLAS_GEMM_DEFAULT));
}

void
pp_cuda_op_linear (PpCudaBackend * cu, PpView x_view, int rows, int in,
    PpView w, PpView b, int out, PpOut y_view)
{
  const PpCudaType wtype = pp_cuda_view_type (cu, "linear", "w", w);
  const PpCudaType xtype = pp_cuda_act_type (cu, "linear", "x",
      x_view.dtype);
  /* x as it is when the product reads it so (float32, or of the weights'
   * 16-bit type: the bits of its widened copy narrowed again); y through
   * float32 scratch when it is 16-bit (the bias is added in float32). */
  const gboolean x_as_is = xtype == PP_CUDA_F32
      || (xtype == wtype && pp_cuda_aligned (x_view.data));
  gconstpointer x = x_as_is ? x_view.data
      : pp_cuda_in (cu, "linear", "x", x_view);
  float *y = pp_cuda_out_whole (cu, "linear", "y", y_view);

  g_return_if_fail (rows > 0 && in > 0 && out > 0);

  /* y [rows,out] = x [rows,in] · wᵀ, w [out,in]. */
  pp_cuda_gemm (cu, FALSE, TRUE, rows, out, in, 1.0f, x,
      x_as_is ? xtype : PP_CUDA_F32, in, w.data, wtype, in, 0.0f, y, out);
  if (!pp_view_is_none (b))
    PP_CUDA_OP_TRY (cu, pp_cuda_add_row_bias (y, rows, out, b.data,
            pp_cuda_view_type (cu, "linear", "b", b), cu->stream));
}

void
pp_cuda_op_matmul (PpCudaBackend * cu, gboolean trans_a, gboolean trans_b,
    int m, int n, int k, PpView a, int lda, PpView b, int ldb,
    gboolean accumulate, PpOut y_view, int ldy)
{
  float *y = pp_cuda_out (cu, "matmul", "y", y_view);

  g_return_if_fail (m > 0 && n > 0 && k > 0);
  g_return_if_fail (lda >= (trans_a ? m : k) && ldb >= (trans_b ? k : n)
      && ldy >= n);

  pp_cuda_gemm (cu, trans_a, trans_b, m, n, k, 1.0f, a.data,
      pp_cuda_view_type (cu, "matmul", "a", a), lda, b.data,
      pp_cuda_view_type (cu, "matmul", "b", b), ldb,
      accumulate ? 1.0f : 0.0f, y, ldy);
}
