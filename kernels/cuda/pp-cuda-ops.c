/* ppdiffuse — the CUDA backend's ops that are one kernel each (the
 * kernels of pp-cuda-{elementwise,norm,layout}.cu): preconditions, the
 * views' storage types, the launch and its check. */
#include "pp-cuda-private.h"

void
pp_cuda_op_group_norm (PpCudaBackend * cu, const float *x, int n, int c,
    int hw, int groups, float eps, PpView gamma, PpView beta, gboolean silu,
    float *y)
{
  int splits;
  float *partials;

  g_return_if_fail (n > 0 && c > 0 && hw > 0 && groups > 0);
  g_return_if_fail (c % groups == 0);

  splits = pp_cuda_group_norm_splits (n, c, hw, groups);
  partials = !cu->group_norm_split || splits == 0 ? NULL
      : pp_cuda_scratch (cu, PP_CUDA_SCRATCH_STATS, 2 * sizeof (float)
      * (gsize) n * groups * splits);

  PP_CUDA_OP_TRY (cu, pp_cuda_group_norm (x, n, c, hw, groups, eps,
          gamma.data, pp_cuda_view_type (cu, "group_norm", "gamma", gamma),
          beta.data, pp_cuda_view_type (cu, "group_norm", "beta", beta),
          silu ? 1 : 0, partials, y, cu->stream));
}

void
pp_cuda_op_layer_norm (PpCudaBackend * cu, const float *x, int rows,
    int dim, float eps, PpView gamma, PpView beta, float *y)
{
  g_return_if_fail (rows > 0 && dim > 0);

  PP_CUDA_OP_TRY (cu, pp_cuda_layer_norm (x, rows, dim, eps, gamma.data,
          pp_cuda_view_type (cu, "layer_norm", "gamma", gamma), beta.data,
          pp_cuda_view_type (cu, "layer_norm", "beta", beta), y,
          cu->stream));
}

void
pp_cuda_op_silu (PpCudaBackend * cu, float *x, size_t n)
{
  PP_CUDA_OP_TRY (cu, pp_cuda_unary (PP_CUDA_SILU, x, n, cu->stream));
}

void
pp_cuda_op_relu (PpCudaBackend * cu, float *x, size_t n)
{
  PP_CUDA_OP_TRY (cu, pp_cuda_unary (PP_CUDA_RELU, x, n, cu->stream));
}

void
pp_cuda_op_tanh (PpCudaBackend * cu, float *x, size_t n)
{
  PP_CUDA_OP_TRY (cu, pp_cuda_unary (PP_CUDA_TANH, x, n, cu->stream));
}

void
pp_cuda_op_gelu (PpCudaBackend * cu, float *x, size_t n)
{
  PP_CUDA_OP_TRY (cu, pp_cuda_unary (PP_CUDA_GELU, x, n, cu->stream));
}

void
pp_cuda_op_quick_gelu (PpCudaBackend * cu, float *x, size_t n)
{
  PP_CUDA_OP_TRY (cu, pp_cuda_unary (PP_CUDA_QUICK_GELU, x, n, cu->stream));
}

void
pp_cuda_op_geglu (PpCudaBackend * cu, const float *x, int rows, int d,
    float *y)
{
  g_return_if_fail (rows > 0 && d > 0);

  PP_CUDA_OP_TRY (cu, pp_cuda_geglu (x, rows, d, y, cu->stream));
}

void
pp_cuda_op_upsample_nearest (PpCudaBackend * cu, const float *x, int n,
    int c, int h, int w, int factor, float *y)
{
  g_return_if_fail (n > 0 && c > 0 && h > 0 && w > 0 && factor > 0);

  PP_CUDA_OP_TRY (cu, pp_cuda_upsample_nearest (x, n, c, h, w, factor, y,
          cu->stream));
}

void
pp_cuda_op_resize_bilinear (PpCudaBackend * cu, const float *x, int c,
    int h, int w, float *y, int ho, int wo)
{
  g_return_if_fail (c > 0 && h > 0 && w > 0 && ho > 0 && wo > 0);

  PP_CUDA_OP_TRY (cu, pp_cuda_resize_bilinear (x, c, h, w, y, ho, wo,
          cu->stream));
}

void
pp_cuda_op_concat_channels (PpCudaBackend * cu, const float *a, int ca,
    const float *b, int cb, int n, int hw, float *y)
{
  g_return_if_fail (ca >= 0 && cb >= 0 && n > 0 && hw > 0);

  PP_CUDA_OP_TRY (cu, pp_cuda_concat_channels (a, ca, b, cb, n, hw, y,
          cu->stream));
}

void
pp_cuda_op_add (PpCudaBackend * cu, float *y, PpView x, size_t n)
{
  PP_CUDA_OP_TRY (cu, pp_cuda_add (y, x.data, pp_cuda_view_type (cu, "add",
              "x", x), n, cu->stream));
}

void
pp_cuda_op_bytes_to_floats (PpCudaBackend * cu, const guint8 * x, size_t n,
    float *y)
{
  PP_CUDA_OP_TRY (cu, pp_cuda_bytes_to_floats (x, n, y, cu->stream));
}

void
pp_cuda_op_floats_to_bytes (PpCudaBackend * cu, const float *x, size_t n,
    guint8 * y)
{
  PP_CUDA_OP_TRY (cu, pp_cuda_floats_to_bytes (x, n, y, cu->stream));
}

void
pp_cuda_op_scale (PpCudaBackend * cu, float *x, size_t n, float s)
{
  PP_CUDA_OP_TRY (cu, pp_cuda_scale (x, n, s, cu->stream));
}

void
pp_cuda_op_affine (PpCudaBackend * cu, float *x, size_t n, float mul,
    float add)
{
  PP_CUDA_OP_TRY (cu, pp_cuda_affine (x, n, mul, add, cu->stream));
}

void
pp_cuda_op_axpby (PpCudaBackend * cu, float *y, float a, const float *x,
    float b, size_t n)
{
  PP_CUDA_OP_TRY (cu, pp_cuda_axpby (y, a, x, b, n, cu->stream));
}

void
pp_cuda_op_lcm_step (PpCudaBackend * cu, float *x, const float *eps,
    const float *noise, size_t n, const PpLcmCoeffs * coeffs)
{
  PpLcmCoeffs c = *coeffs;

  /* The kernel gets the scalars by value: @coeffs is host memory. */
  g_return_if_fail (c.last || noise != NULL);

  PP_CUDA_OP_TRY (cu, pp_cuda_lcm_step (x, eps, noise, n, c, cu->stream));
}

void
pp_cuda_op_timestep_embedding (PpCudaBackend * cu, float t, int dim,
    gboolean flip_sin_to_cos, float freq_shift, float *y)
{
  const int half = dim / 2;

  g_return_if_fail (dim > 0);
  g_return_if_fail (half == 0 || (float) half != freq_shift);

  PP_CUDA_OP_TRY (cu, pp_cuda_timestep_embedding (t, dim, flip_sin_to_cos,
          freq_shift, y, cu->stream));
}

void
pp_cuda_op_nchw_to_nlc (PpCudaBackend * cu, const float *x, int n, int c,
    int hw, float *y)
{
  g_return_if_fail (n > 0 && c > 0 && hw > 0);

  PP_CUDA_OP_TRY (cu, pp_cuda_transpose (x, n, c, hw, y, cu->stream));
}

void
pp_cuda_op_nlc_to_nchw (PpCudaBackend * cu, const float *x, int n, int c,
    int hw, float *y)
{
  g_return_if_fail (n > 0 && c > 0 && hw > 0);

  PP_CUDA_OP_TRY (cu, pp_cuda_transpose (x, n, hw, c, y, cu->stream));
}

void
pp_cuda_op_add_channel (PpCudaBackend * cu, float *x, int n, int c, int hw,
    PpView v)
{
  g_return_if_fail (n > 0 && c > 0 && hw > 0);

  PP_CUDA_OP_TRY (cu, pp_cuda_add_channel (x, n, c, hw, v.data,
          pp_cuda_view_type (cu, "add_channel", "v", v), cu->stream));
}
