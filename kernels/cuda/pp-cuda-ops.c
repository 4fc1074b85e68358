/* ppdiffuse — the CUDA backend's ops that are one kernel each (the
 * kernels of pp-cuda-{elementwise,norm,layout}.cu): preconditions, the
 * views' storage types, the launch and its check.  The kernels that take
 * an activation's storage type get 16-bit activations as they are (an op
 * whose inputs and outputs are of one type, or in place); the others, and
 * a mix of types, go through float32 scratch (pp_cuda_in, pp_cuda_out):
 * the same bits either way. */
#include "pp-cuda-private.h"

/* Input @x and output @y of an op whose kernel takes one storage type for
 * both: as they are when their dtypes agree, else through float32 scratch
 * (@y written whole).  Returns the type the kernel gets. */
static PpCudaType
one_type (PpCudaBackend * cu, const char *op, PpView x, PpOut y,
    const void **x_data, void **y_data)
{
  if (x.dtype == y.dtype) {
    *x_data = x.data;
    *y_data = y.data;
    return pp_cuda_act_type (cu, op, "y", y.dtype);
  }
  *x_data = pp_cuda_in (cu, op, "x", x);
  *y_data = pp_cuda_out_whole (cu, op, "y", y);
  return PP_CUDA_F32;
}

void
pp_cuda_op_group_norm (PpCudaBackend * cu, PpView x_view, PpView shift_view,
    int n, int c, int hw, int groups, float eps, PpView gamma, PpView beta,
    gboolean silu, PpOut y_view)
{
  g_return_if_fail (n > 0 && c > 0 && hw > 0 && groups > 0);
  g_return_if_fail (c % groups == 0);

  const int splits = pp_cuda_group_norm_splits (n, c, hw, groups);
  const gboolean split_way = cu->group_norm_way != PP_CUDA_GROUP_NORM_WHOLE;
  const gboolean split = split_way && splits > 0;
  /* Both channels last, and the split way with a shape its channels-last
   * kernels take (which read tiles of whole pixels): as they are;
   * otherwise channels first for the kernels (a channels-last one is
   * copied). */
  const gboolean nhwc = split_way
      && pp_cuda_group_norm_tiles (n, c, hw, groups) > 0
      && x_view.layout == PP_LAYOUT_NHWC && y_view.layout == PP_LAYOUT_NHWC;

  if (!nhwc) {
    x_view = pp_cuda_nchw_in (cu, "group_norm", "x", x_view, n, c, hw);
    y_view = pp_cuda_nchw_out_whole (cu, "group_norm", "y", y_view, n, c, hw);
  }
  /* The shift's n · c values, read in their dtype by the kernels. */
  const void *shift = pp_view_is_none (shift_view) ? NULL
      : shift_view.data;
  const PpCudaType shift_type = shift == NULL ? PP_CUDA_F32
      : pp_cuda_view_type (cu, "group_norm", "shift", shift_view);
  const void *x;
  void *y;
  PpCudaType type;
  float *partials;
  unsigned *tickets;
  int layout;

  /* Channels first, the kernels write x + shift into y before the norm
   * runs there in place: in float32 (scratch for a 16-bit x or y), so the
   * sum is never rounded to y's type before the norm reads it. */
  if (shift != NULL && !nhwc) {
    x = pp_cuda_in (cu, "group_norm", "x", x_view);
    y = pp_cuda_out_whole (cu, "group_norm", "y", y_view);
    type = PP_CUDA_F32;
  } else
    type = one_type (cu, "group_norm", x_view, y_view, &x, &y);

  partials = !split && !nhwc ? NULL : pp_cuda_scratch (cu,
      PP_CUDA_SCRATCH_STATS, sizeof (float)
      * pp_cuda_group_norm_partials (n, c, hw, groups, nhwc));
  /* The kernels' layout: channels first, or channels last the way's (the
   * split way's tiles a thread a channel). */
  if (!nhwc)
    layout = PP_CUDA_GROUP_NCHW;
  else if (cu->group_norm_way == PP_CUDA_GROUP_NORM_VECTOR)
    layout = PP_CUDA_GROUP_NHWC_VECTOR;
  else if (cu->group_norm_way == PP_CUDA_GROUP_NORM_TICKET)
    layout = PP_CUDA_GROUP_NHWC_TICKET;
  else if (cu->group_norm_way == PP_CUDA_GROUP_NORM_GRID)
    layout = PP_CUDA_GROUP_NHWC_GRID;
  else
    layout = PP_CUDA_GROUP_NHWC;
  /* The ticket way's counts, one a sample (0 between ops); the grid
   * way's, each sample's followed by its generation. */
  tickets = layout == PP_CUDA_GROUP_NHWC_TICKET
      || layout == PP_CUDA_GROUP_NHWC_GRID ? pp_cuda_scratch (cu,
      PP_CUDA_SCRATCH_TICKETS, (layout == PP_CUDA_GROUP_NHWC_GRID ? 2 : 1)
      * sizeof (unsigned) * (gsize) n) : NULL;

  PP_CUDA_OP_RUN (cu, pp_cuda_group_norm (x, shift, shift_type, type, n, c,
          hw, groups, eps, gamma.data,
          pp_cuda_view_type (cu, "group_norm", "gamma", gamma),
          beta.data, pp_cuda_view_type (cu, "group_norm", "beta", beta),
          silu ? 1 : 0, layout, partials, tickets, y, cu->stream));
}

void
pp_cuda_op_layer_norm (PpCudaBackend * cu, PpView x_view, int rows,
    int dim, float eps, PpView gamma, PpView beta, PpOut y_view)
{
  const void *x;
  void *y;
  PpCudaType type;

  /* Before y is taken: a 16-bit y's scratch would be narrowed over it. */
  g_return_if_fail (rows > 0 && dim > 0);
  type = one_type (cu, "layer_norm", x_view, y_view, &x, &y);

  PP_CUDA_OP_RUN (cu, pp_cuda_layer_norm (x, type, rows, dim, eps,
          gamma.data,
          pp_cuda_view_type (cu, "layer_norm", "gamma", gamma), beta.data,
          pp_cuda_view_type (cu, "layer_norm", "beta", beta), y,
          cu->layer_norm_way, cu->stream));
}

void
pp_cuda_op_silu (PpCudaBackend * cu, PpOut x_view, size_t n)
{
  PP_CUDA_OP_RUN (cu, pp_cuda_unary (PP_CUDA_SILU, x_view.data,
          pp_cuda_act_type (cu, "silu", "x", x_view.dtype), n, cu->stream));
}

void
pp_cuda_op_relu (PpCudaBackend * cu, PpOut x_view, size_t n)
{
  PP_CUDA_OP_RUN (cu, pp_cuda_unary (PP_CUDA_RELU, x_view.data,
          pp_cuda_act_type (cu, "relu", "x", x_view.dtype), n, cu->stream));
}

void
pp_cuda_op_tanh (PpCudaBackend * cu, PpOut x_view, size_t n)
{
  PP_CUDA_OP_RUN (cu, pp_cuda_unary (PP_CUDA_TANH, x_view.data,
          pp_cuda_act_type (cu, "tanh", "x", x_view.dtype), n, cu->stream));
}

void
pp_cuda_op_gelu (PpCudaBackend * cu, PpOut x_view, size_t n)
{
  PP_CUDA_OP_RUN (cu, pp_cuda_unary (PP_CUDA_GELU, x_view.data,
          pp_cuda_act_type (cu, "gelu", "x", x_view.dtype), n, cu->stream));
}

void
pp_cuda_op_quick_gelu (PpCudaBackend * cu, PpOut x_view, size_t n)
{
  PP_CUDA_OP_RUN (cu, pp_cuda_unary (PP_CUDA_QUICK_GELU, x_view.data,
          pp_cuda_act_type (cu, "quick_gelu", "x", x_view.dtype), n,
          cu->stream));
}

void
pp_cuda_op_geglu (PpCudaBackend * cu, PpView x_view, int rows, int d,
    PpOut y_view)
{
  const void *x;
  void *y;
  PpCudaType type;

  g_return_if_fail (rows > 0 && d > 0);
  type = one_type (cu, "geglu", x_view, y_view, &x, &y);

  PP_CUDA_OP_RUN (cu, pp_cuda_geglu (x, rows, d, y, type, cu->stream));
}

void
pp_cuda_op_upsample_nearest (PpCudaBackend * cu, PpView x_view, int n,
    int c, int h, int w, int factor, PpOut y_view)
{
  /* Refused before any copy. */
  g_return_if_fail (n > 0 && c > 0 && h > 0 && w > 0 && factor > 0);

  /* Both channels last and of one type: copied as they are. */
  if (x_view.layout == PP_LAYOUT_NHWC && y_view.layout == PP_LAYOUT_NHWC
      && x_view.dtype == y_view.dtype) {
    PP_CUDA_OP_RUN (cu, pp_cuda_upsample_nearest (x_view.data,
            pp_cuda_act_type (cu, "upsample_nearest", "y", y_view.dtype), n,
            c, h, w, factor, 1, y_view.data, cu->stream));
    return;
  }
  x_view = pp_cuda_nchw_in (cu, "upsample_nearest", "x", x_view, n, c,
      h * w);
  y_view = pp_cuda_nchw_out_whole (cu, "upsample_nearest", "y", y_view, n, c,
      h * w * factor * factor);
  const void *x;
  void *y;
  const PpCudaType type = one_type (cu, "upsample_nearest", x_view, y_view, &x, &y);

  PP_CUDA_OP_RUN (cu, pp_cuda_upsample_nearest (x, type, n, c, h, w, factor,
          0, y, cu->stream));
}

void
pp_cuda_op_interleave_phases (PpCudaBackend * cu, PpView z_view, int n,
    int c, int h, int w, PpOut y_view)
{
  /* Refused before any copy. */
  g_return_if_fail (n > 0 && c > 0 && h > 0 && w > 0);

  /* Both channels last and of one type: copied as they are. */
  if (z_view.layout == PP_LAYOUT_NHWC && y_view.layout == PP_LAYOUT_NHWC
      && z_view.dtype == y_view.dtype) {
    PP_CUDA_OP_RUN (cu, pp_cuda_interleave_phases (z_view.data,
            pp_cuda_act_type (cu, "interleave_phases", "y", y_view.dtype),
            n, c, h, w, 1, y_view.data, cu->stream));
    return;
  }
  z_view = pp_cuda_nchw_in (cu, "interleave_phases", "z", z_view, n, 4 * c,
      (h + 1) * (w + 1));
  y_view = pp_cuda_nchw_out_whole (cu, "interleave_phases", "y", y_view, n,
      c, 4 * h * w);
  const void *z;
  void *y;
  const PpCudaType type = one_type (cu, "interleave_phases", z_view, y_view,
      &z, &y);

  PP_CUDA_OP_RUN (cu, pp_cuda_interleave_phases (z, type, n, c, h, w, 0, y,
          cu->stream));
}

void
pp_cuda_op_resize_bilinear (PpCudaBackend * cu, PpView x_view, int c,
    int h, int w, PpOut y_view, int ho, int wo)
{
  g_return_if_fail (c > 0 && h > 0 && w > 0 && ho > 0 && wo > 0);

  x_view = pp_cuda_nchw_in (cu, "resize_bilinear", "x", x_view, 1, c,
      h * w);
  y_view = pp_cuda_nchw_out_whole (cu, "resize_bilinear", "y", y_view, 1, c,
      ho * wo);
  const float *x = pp_cuda_in (cu, "resize_bilinear", "x", x_view);
  float *y = pp_cuda_out_whole (cu, "resize_bilinear", "y", y_view);

  PP_CUDA_OP_RUN (cu, pp_cuda_resize_bilinear (x, c, h, w, y, ho, wo,
          cu->stream));
}

void
pp_cuda_op_concat_channels (PpCudaBackend * cu, PpView a_view, int ca,
    PpView b_view, int cb, int n, int hw, PpOut y_view)
{
  g_return_if_fail (ca >= 0 && cb >= 0 && n > 0 && hw > 0);

  /* All channels last and of one type: each pixel's ca channels, then its
   * cb, two strided copies. */
  if (a_view.layout == PP_LAYOUT_NHWC && b_view.layout == PP_LAYOUT_NHWC
      && y_view.layout == PP_LAYOUT_NHWC && a_view.dtype == y_view.dtype
      && b_view.dtype == y_view.dtype) {
    const gsize size = pp_cuda_dtype_size (y_view.dtype);
    const gsize row = (gsize) (ca + cb) * size;

    if (ca > 0)
      PP_CUDA_OP_RUN (cu, cudaMemcpy2DAsync (y_view.data, row, a_view.data,
              (gsize) ca * size, (gsize) ca * size, (gsize) n * hw,
              cudaMemcpyDeviceToDevice, cu->stream));
    if (cb > 0)
      PP_CUDA_OP_RUN (cu, cudaMemcpy2DAsync ((guint8 *) y_view.data
            + (gsize) ca * size, row, b_view.data, (gsize) cb * size,
            (gsize) cb * size, (gsize) n * hw, cudaMemcpyDeviceToDevice,
            cu->stream));
    return;
  }
  a_view = pp_cuda_nchw_in (cu, "concat_channels", "a", a_view, n, ca, hw);
  b_view = pp_cuda_nchw_in (cu, "concat_channels", "b", b_view, n, cb, hw);
  y_view = pp_cuda_nchw_out_whole (cu, "concat_channels", "y", y_view, n,
      ca + cb, hw);
  const gboolean as_is = a_view.dtype == y_view.dtype
      && b_view.dtype == y_view.dtype;
  const PpCudaType type = as_is ? pp_cuda_act_type (cu, "concat_channels",
      "y", y_view.dtype) : PP_CUDA_F32;
  const void *a = as_is ? a_view.data
      : pp_cuda_in (cu, "concat_channels", "a", a_view);
  const void *b = as_is ? b_view.data
      : pp_cuda_in (cu, "concat_channels", "b", b_view);
  void *y = as_is ? y_view.data
      : pp_cuda_out_whole (cu, "concat_channels", "y", y_view);

  PP_CUDA_OP_RUN (cu, pp_cuda_concat_channels (a, ca, b, cb, n, hw, y, type,
          cu->stream));
}

void
pp_cuda_op_add (PpCudaBackend * cu, PpOut y_view, PpView x, size_t n)
{
  PP_CUDA_OP_RUN (cu, pp_cuda_add (y_view.data, pp_cuda_act_type (cu, "add",
              "y", y_view.dtype), x.data, pp_cuda_view_type (cu, "add", "x",
              x), n, cu->stream));
}

void
pp_cuda_op_bytes_to_floats (PpCudaBackend * cu, const guint8 * x, size_t n,
    PpOut y_view)
{
  float *y = pp_cuda_out_whole (cu, "bytes_to_floats", "y", y_view);

  PP_CUDA_OP_RUN (cu, pp_cuda_bytes_to_floats (x, n, y, cu->stream));
}

void
pp_cuda_op_floats_to_bytes (PpCudaBackend * cu, PpView x_view, size_t n,
    guint8 * y)
{
  const float *x = pp_cuda_in (cu, "floats_to_bytes", "x", x_view);

  PP_CUDA_OP_RUN (cu, pp_cuda_floats_to_bytes (x, n, y, cu->stream));
}

void
pp_cuda_op_scale (PpCudaBackend * cu, PpOut x_view, size_t n, float s)
{
  PP_CUDA_OP_RUN (cu, pp_cuda_scale (x_view.data, pp_cuda_act_type (cu,
              "scale", "x", x_view.dtype), n, s, cu->stream));
}

void
pp_cuda_op_affine (PpCudaBackend * cu, PpOut x_view, size_t n, float mul,
    float add)
{
  PP_CUDA_OP_RUN (cu, pp_cuda_affine (x_view.data, pp_cuda_act_type (cu,
              "affine", "x", x_view.dtype), n, mul, add, cu->stream));
}

void
pp_cuda_op_axpby (PpCudaBackend * cu, PpOut y_view, float a,
    PpView x_view, float b, size_t n)
{
  /* With b = 0 the kernel reads nothing of y. */
  float *y = b == 0.0f ? pp_cuda_out_whole (cu, "axpby", "y", y_view)
      : pp_cuda_out (cu, "axpby", "y", y_view);
  const float *x = pp_cuda_in (cu, "axpby", "x", x_view);

  PP_CUDA_OP_RUN (cu, pp_cuda_axpby (y, a, x, b, n, cu->stream));
}

void
pp_cuda_op_lcm_step (PpCudaBackend * cu, PpOut x_view, PpView eps_view,
    PpView noise_view, size_t n, const PpLcmCoeffs * coeffs)
{
  float *x = pp_cuda_out (cu, "lcm_step", "x", x_view);
  const float *eps = pp_cuda_in (cu, "lcm_step", "eps", eps_view);
  const float *noise = pp_cuda_in (cu, "lcm_step", "noise", noise_view);
  PpLcmCoeffs c = *coeffs;

  /* The kernel gets the scalars by value: @coeffs is host memory. */
  g_return_if_fail (c.last || noise != NULL);

  PP_CUDA_OP_RUN (cu, pp_cuda_lcm_step (x, eps, noise, n, c, cu->stream));
}

void
pp_cuda_op_timestep_embedding (PpCudaBackend * cu, float t, int dim,
    gboolean flip_sin_to_cos, float freq_shift, PpOut y_view)
{
  const int half = dim / 2;
  float *y;

  g_return_if_fail (dim > 0);
  g_return_if_fail (half == 0 || (float) half != freq_shift);
  y = pp_cuda_out_whole (cu, "timestep_embedding", "y", y_view);

  PP_CUDA_OP_RUN (cu, pp_cuda_timestep_embedding (t, dim, flip_sin_to_cos,
          freq_shift, y, cu->stream));
}

void
pp_cuda_op_nchw_to_nlc (PpCudaBackend * cu, PpView x_view, int n, int c,
    int hw, PpOut y_view)
{
  g_return_if_fail (n > 0 && c > 0 && hw > 0);

  x_view = pp_cuda_nchw_in (cu, "nchw_to_nlc", "x", x_view, n, c, hw);
  const PpCudaType x_type = pp_cuda_act_type (cu, "nchw_to_nlc", "x",
      x_view.dtype);
  const PpCudaType y_type = pp_cuda_act_type (cu, "nchw_to_nlc", "y",
      y_view.dtype);

  /* A change of layout, and of storage type when they differ. */
  PP_CUDA_OP_RUN (cu, pp_cuda_transpose_typed (x_view.data, x_type, n, c,
          hw, NULL, PP_CUDA_F32, 0, y_view.data, y_type, cu->stream));
}

void
pp_cuda_op_nlc_to_nchw (PpCudaBackend * cu, PpView x_view, int n, int c,
    int hw, PpOut y_view)
{
  g_return_if_fail (n > 0 && c > 0 && hw > 0);

  y_view = pp_cuda_nchw_out_whole (cu, "nlc_to_nchw", "y", y_view, n, c, hw);
  const PpCudaType x_type = pp_cuda_act_type (cu, "nlc_to_nchw", "x",
      x_view.dtype);
  const PpCudaType y_type = pp_cuda_act_type (cu, "nlc_to_nchw", "y",
      y_view.dtype);

  /* A change of layout, and of storage type when they differ. */
  PP_CUDA_OP_RUN (cu, pp_cuda_transpose_typed (x_view.data, x_type, n, hw,
          c, NULL, PP_CUDA_F32, 0, y_view.data, y_type, cu->stream));
}

void
pp_cuda_op_add_channel (PpCudaBackend * cu, PpOut x_view, int n, int c,
    int hw, PpView v)
{
  const PpCudaType x_type = pp_cuda_act_type (cu, "add_channel", "x",
      x_view.dtype);
  const PpCudaType v_type = pp_cuda_view_type (cu, "add_channel", "v", v);

  g_return_if_fail (n > 0 && c > 0 && hw > 0);
  /* Channels last: each sample's [hw, c] rows plus its v per column, the
   * same float sum rounded to x's type. */
  if (x_view.layout == PP_LAYOUT_NHWC) {
    const gsize x_size = pp_cuda_dtype_size (x_view.dtype);
    const gsize v_size = pp_cuda_dtype_size (v.dtype);

    for (int b = 0; b < n; b++) {
      guint8 *xb = (guint8 *) x_view.data + (gsize) b * c * hw * x_size;

      PP_CUDA_OP_RUN (cu, pp_cuda_channel_bias (xb, x_type, xb, x_type, hw,
              c, 1, (const guint8 *) v.data + (gsize) b * c * v_size,
              v_type, 0, cu->stream));
    }
    return;
  }

  PP_CUDA_OP_RUN (cu, pp_cuda_add_channel (x_view.data, x_type, n, c, hw,
          v.data, v_type, cu->stream));
}

/* The feature bank's ops: their own rows are float32 (a bank's, its norms
 * and products), as on the CPU backends; only bank_fuse's y is an
 * activation of any dtype. */
static float *
bank_floats (PpCudaBackend * cu, const char *op, const char *param,
    gconstpointer data, PpDType dtype)
{
  if (dtype != PP_DTYPE_F32)
    pp_cuda_fatal (cu, g_error_new (PP_ERROR, PP_ERROR_DEVICE, "%s: %s is "
            "of dtype %u, and the feature bank's rows are float32 (dtype "
            "%u) only", op, param, (guint) dtype, (guint) PP_DTYPE_F32));
  return (float *) data;
}

/* View @v of the op named by the caller's @op. */
#define BANK_FLOATS(v) bank_floats (cu, op, #v, v.data, v.dtype)

void
pp_cuda_op_row_norms (PpCudaBackend * cu, PpView x, int rows, int c,
    PpOut norms)
{
  static const char op[] = "row_norms";

  PP_CUDA_OP_RUN (cu, pp_cuda_row_norms (BANK_FLOATS (x), rows, c,
          BANK_FLOATS (norms), cu->stream));
}

void
pp_cuda_op_bank_fuse (PpCudaBackend * cu, PpView sim, int rows, int m,
    int c, PpView y_norms, PpView bank_norms, PpView bank, double threshold,
    double strength, PpOut y_view, PpOut fused)
{
  static const char op[] = "bank_fuse";
  float *y = pp_cuda_out (cu, op, "y", y_view);

  PP_CUDA_OP_RUN (cu, pp_cuda_bank_fuse (BANK_FLOATS (sim), rows, m, c,
          BANK_FLOATS (y_norms), BANK_FLOATS (bank_norms), BANK_FLOATS (bank),
          threshold, strength, y, BANK_FLOATS (fused), cu->stream));
}

void
pp_cuda_op_bank_merge_dest (PpCudaBackend * cu, PpView sim, int sources,
    int first, int n, int r, PpView norms, PpOut dest)
{
  static const char op[] = "bank_merge_dest";

  g_return_if_fail (r >= 0 && 2 * (gint64) r <= n);
  PP_CUDA_OP_RUN (cu, pp_cuda_bank_merge_dest (BANK_FLOATS (sim), sources,
          first, n, r, BANK_FLOATS (norms), BANK_FLOATS (dest), cu->stream));
}

void
pp_cuda_op_bank_merge (PpCudaBackend * cu, PpView x, int n, int r, int c,
    PpView dest, PpOut y)
{
  static const char op[] = "bank_merge";

  g_return_if_fail (r >= 0 && 2 * (gint64) r <= n);
  PP_CUDA_OP_RUN (cu, pp_cuda_bank_merge (BANK_FLOATS (x), n, r, c,
          BANK_FLOATS (dest), BANK_FLOATS (y), cu->stream));
}

#undef BANK_FLOATS
