/* kernels/ops: every op on 16-bit activations (F16, BF16) on the backend
 * of $PPDIFFUSE_BACKEND, when it takes them (PpBackend.act_dtypes).
 *
 * A backend that takes a 16-bit activation computes on its values and
 * rounds what it writes to the activation's dtype (round to nearest
 * even).  So each op runs twice on the same values: once on float32
 * activations holding the 16-bit inputs widened, once on the 16-bit
 * activations themselves; every 16-bit output must equal the float32
 * run's output rounded, bit for bit (but for CUDA's linear, linear_add
 * and matmul with weights of the output's type, which round cuBLAS's own
 * sum, and its convolutions run as products (PPDIFFUSE_CUDA_CONV_GEMM):
 * one unit in the last place apart at most, rounds_own_sum, or for a sum
 * into y or a residual a partial sum's rounding, own_sum_bound).  The
 * cases cover the 16-bit side in, out and both (a model's first layer reads its float32 input, its last
 * writes float32), the in-place ops, an output that is its input (the
 * norms), and a strided matmul output whose untouched elements must come
 * back as they were.  Every op of the list has a case (the test fails for
 * one without).  The ops whose 16-bit weights decide how a backend
 * computes (conv2d, linear, matmul, and the attentions' dtype) run again
 * with weights of the activations' type (a device reads such activations
 * as they are) and of the other 16-bit type (they cannot be); add's x
 * stays float32: the ops tests hold its 16-bit paths.
 *
 * Layouts: the ops that see space (pp-view.h) read and write each spatial
 * view as its layout says.  Their cases run again with the spatial
 * activations laid out channels last (NHWC) — all of them, or all but the
 * first or the last (a model's edges: conv_in reads its NCHW input into
 * channels-last activations, conv_out the reverse) — in float32 and in
 * each 16-bit dtype: the 16-bit values must be the float32 run's of the
 * same layouts, rounded, bit for bit, and that run's values, laid back,
 * the channels-first run's: bit for bit, but for a device's group norm,
 * which sums channels last in another order (within LAYOUT_REL_BOUND).
 * And the op profile's layout copies say which views were copied channels
 * first: on a device, none for the ops that read the layout themselves. */
#include "pp-backend.h"
#include "pp-dtype-math.h"
#include "pp-ops.h"

#include <math.h>
#include <string.h>

#define MAX_ACTS 4

static PpBackend *be;
/* The weights' dtype of the run (and the attentions' dtype). */
static PpDType weights_dtype = PP_DTYPE_F32;

/* One activation of a case: its element count and role. */
typedef enum
{
  ACT_IN,                       /* read */
  ACT_OUT,                      /* written */
  ACT_INOUT,                    /* read and written (in place) */
} Role;

typedef struct
{
  gsize numel;
  Role role;
  /* A spatial tensor [n, c, hw] (n > 0), which may be laid out NHWC. */
  int n, c, hw;
} ActSpec;

/* The activations of one run, on the device. */
typedef struct
{
  gpointer data[MAX_ACTS];
  PpDType dtype[MAX_ACTS];
  gsize numel[MAX_ACTS];
  PpLayout layout[MAX_ACTS];
} Acts;

static PpView
in (const Acts * a, guint i)
{
  return pp_view_laid (pp_view (a->data[i], a->dtype[i], a->numel[i]),
      a->layout[i]);
}

static PpOut
out (const Acts * a, guint i)
{
  return pp_out_laid (pp_out (a->data[i], a->dtype[i], a->numel[i]),
      a->layout[i]);
}

typedef void (*RunFunc) (const Acts * a, gconstpointer weights);

typedef struct
{
  PpOp op;
  const char *name;
  guint n_acts;
  ActSpec acts[MAX_ACTS];
  RunFunc run;
  /* Float32 weights the case reads (uploaded once), or 0. */
  gsize weights;
  /* Starting values in [-range, range) (0: 2). */
  double range;
  /* Run also with 16-bit weights (weights_dtype). */
  gboolean typed_weights;
} Case;

static gpointer upload (const float *host, PpDType dtype, gsize n);

/* Weights: a device buffer of values in [-0.5, 0.5), stored as
 * weights_dtype. */
static gpointer
upload_weights (gsize n)
{
  g_autofree float *host = g_new (float, MAX (n, 1));
  GRand *rand = g_rand_new_with_seed (7);

  for (gsize i = 0; i < n; i++)
    host[i] = (float) g_rand_double_range (rand, -0.5, 0.5);
  g_rand_free (rand);
  return upload (host, weights_dtype, n);
}

static PpView
w (gconstpointer weights, gsize offset, gsize n)
{
  return pp_view_range (pp_view (weights, weights_dtype, offset + n), offset,
      n);
}

/* The cases.  Shapes are small and odd, so no op takes a vector path on
 * every element. */

/* 4 channels of 5×6 from 3, with a bias; with @relu, the ReLU fused
 * (rounded once, after it). */
static void
conv2d_3 (const Acts * a, gconstpointer wt, gboolean relu)
{
  pp_conv2d (be, in (a, 0), 1, 3, 5, 6, w (wt, 0, 4 * 3 * 3 * 3),
      w (wt, 108, 4), 4, 3, 3, 1, 1, pp_view_none (), relu, out (a, 1));
}

typedef enum
{
  WITH_BIAS = 1 << 0,
  WITH_RESIDUAL = 1 << 1,       /* activation 1; y is then 2 */
  WITH_RELU = 1 << 2,
} ConvWith;

/* 8 channels of @height × @width from @cin by a 3×3 filter, with what
 * @with names: the filter's weights first, the bias after them. */
static void
conv2d_to_8 (const Acts * a, gconstpointer wt, int cin, int height,
    int width, ConvWith with)
{
  const gsize filter = (gsize) 8 * cin * 3 * 3;
  const gboolean res = (with & WITH_RESIDUAL) != 0;

  pp_conv2d (be, in (a, 0), 1, cin, height, width, w (wt, 0, filter),
      with & WITH_BIAS ? w (wt, filter, 8) : pp_view_none (), 8, 3, 3, 1, 1,
      res ? in (a, 1) : pp_view_none (), (with & WITH_RELU) != 0,
      out (a, res ? 2 : 1));
}

/* Channels multiples of 8: a device with 16-bit tensor cores may run it
 * channels last (CUDA's PPDIFFUSE_CUDA_CONV_LAYOUT, auto by default), and
 * then reads and writes channels-last activations as they are.  Without
 * a bias: y's values as the convolution made them (-0 too). */
static void
conv2d_8 (const Acts * a, gconstpointer wt, ConvWith with)
{
  conv2d_to_8 (a, wt, 8, 9, 9, with);
}

/* A residual of y's shape added in the convolution's pass, then the
 * ReLU (a TAESD block's end); 3 channels and 8 (channels last on a
 * device). */
static void
run_conv2d_residual (const Acts * a, gconstpointer wt)
{
  pp_conv2d (be, in (a, 0), 1, 3, 5, 6, w (wt, 0, 4 * 3 * 3 * 3),
      w (wt, 108, 4), 4, 3, 3, 1, 1, in (a, 1), TRUE, out (a, 2));
}

static void
run_conv2d_8_residual (const Acts * a, gconstpointer wt)
{
  conv2d_8 (a, wt, WITH_BIAS | WITH_RESIDUAL);
}

/* 8 channels of 5×6 from 3, with a bias and the ReLU, and with a
 * residual too: the input's channels padded on cuda and the output's not
 * (a latent's 4 channels into a model's first 64: TAESD's decoder's first
 * convolution, then its ReLU), so that the output is written as it is
 * and cuDNN's epilogue adds all of them. */
static void
run_conv2d_3_to_8_relu (const Acts * a, gconstpointer wt)
{
  conv2d_to_8 (a, wt, 3, 5, 6, WITH_BIAS | WITH_RELU);
}

static void
run_conv2d_3_to_8_residual (const Acts * a, gconstpointer wt)
{
  conv2d_to_8 (a, wt, 3, 5, 6, WITH_BIAS | WITH_RESIDUAL | WITH_RELU);
}

/* The same without a bias or the ReLU: only the residual added after
 * cuDNN, where its epilogue does not run (PPDIFFUSE_CUDA_CONV_EPILOGUE=
 * pass), into an output written as it is. */
static void
run_conv2d_3_to_8_no_bias_residual (const Acts * a, gconstpointer wt)
{
  conv2d_to_8 (a, wt, 3, 5, 6, WITH_RESIDUAL);
}

static void
run_conv2d_8_no_bias_residual (const Acts * a, gconstpointer wt)
{
  conv2d_8 (a, wt, WITH_RESIDUAL);
}

/* Filters whose patches are not the pixels themselves though a side is
 * 1 (a device's convolutions as products, PPDIFFUSE_CUDA_CONV_GEMM, lay
 * their patches out): 1×3 and 1×1 with a stride of 2. */
static void
run_conv2d_8_1x3 (const Acts * a, gconstpointer wt)
{
  pp_conv2d (be, in (a, 0), 1, 8, 9, 9, w (wt, 0, 8 * 8 * 3),
      w (wt, 192, 8), 8, 1, 3, 1, 0, pp_view_none (), FALSE, out (a, 1));
}

static void
run_conv2d_8_1x1_stride_2 (const Acts * a, gconstpointer wt)
{
  pp_conv2d (be, in (a, 0), 1, 8, 9, 9, w (wt, 0, 8 * 8), w (wt, 64, 8), 8,
      1, 1, 2, 0, pp_view_none (), FALSE, out (a, 1));
}

static void
run_conv2d (const Acts * a, gconstpointer wt)
{
  conv2d_3 (a, wt, FALSE);
}

static void
run_conv2d_relu (const Acts * a, gconstpointer wt)
{
  conv2d_3 (a, wt, TRUE);
}

static void
run_conv2d_8 (const Acts * a, gconstpointer wt)
{
  conv2d_8 (a, wt, WITH_BIAS);
}

static void
run_conv2d_8_no_bias (const Acts * a, gconstpointer wt)
{
  conv2d_8 (a, wt, 0);
}

static void
run_conv2d_8_relu (const Acts * a, gconstpointer wt)
{
  conv2d_8 (a, wt, WITH_BIAS | WITH_RELU);
}

static void
run_conv2d_8_no_bias_relu (const Acts * a, gconstpointer wt)
{
  conv2d_8 (a, wt, WITH_RELU);
}

static void
run_group_norm (const Acts * a, gconstpointer wt)
{
  pp_group_norm (be, in (a, 0), pp_view_none (), 2, 4, 9, 2, 1e-5f,
      w (wt, 0, 4), w (wt, 4, 4), TRUE, out (a, 1));
}

/* A shift per (sample, channel), an activation too. */
static void
run_group_norm_shifted (const Acts * a, gconstpointer wt)
{
  pp_group_norm (be, in (a, 0), in (a, 1), 2, 4, 9, 2, 1e-5f, w (wt, 0, 4),
      w (wt, 4, 4), TRUE, out (a, 2));
}

static void
run_group_norm_shifted_in_place (const Acts * a, gconstpointer wt)
{
  pp_group_norm (be, in (a, 0), in (a, 1), 2, 4, 9, 2, 1e-5f,
      pp_view_none (), pp_view_none (), FALSE, out (a, 0));
}

/* 16 channels in 4 groups: a multiple of 8 channels, which a device's
 * channels-last kernels may take eight at a time (a thread's eight then
 * span two groups); shifted, and shifted in place. */
static void
run_group_norm_16 (const Acts * a, gconstpointer wt)
{
  pp_group_norm (be, in (a, 0), in (a, 1), 2, 16, 9, 4, 1e-5f,
      w (wt, 0, 16), w (wt, 16, 16), TRUE, out (a, 2));
}

static void
run_group_norm_16_in_place (const Acts * a, gconstpointer wt)
{
  pp_group_norm (be, in (a, 0), in (a, 1), 2, 16, 9, 4, 1e-5f,
      pp_view_none (), pp_view_none (), FALSE, out (a, 0));
}

/* The output is the input. */
static void
run_group_norm_in_place (const Acts * a, gconstpointer wt)
{
  pp_group_norm (be, in (a, 0), pp_view_none (), 2, 4, 9, 2, 1e-5f,
      pp_view_none (), pp_view_none (), FALSE, out (a, 0));
}

static void
run_layer_norm (const Acts * a, gconstpointer wt)
{
  pp_layer_norm (be, in (a, 0), 3, 8, 1e-5f, w (wt, 0, 8), w (wt, 8, 8),
      out (a, 1));
}

static void
run_layer_norm_in_place (const Acts * a, gconstpointer wt)
{
  pp_layer_norm (be, in (a, 0), 3, 8, 1e-5f, w (wt, 0, 8), w (wt, 8, 8),
      out (a, 0));
}

static void
run_linear (const Acts * a, gconstpointer wt)
{
  pp_linear (be, in (a, 0), 3, 5, w (wt, 0, 20), w (wt, 20, 4), 4,
      out (a, 1));
}

/* Sizes multiples of 8 and a bias on 256 bytes: a device library's
 * fused 16-bit product takes it (CUDA's cuBLASLt, the bias in its
 * epilogue), where the odd case above may take its float32 way. */
static void
run_linear_aligned (const Acts * a, gconstpointer wt)
{
  pp_linear (be, in (a, 0), 4, 16, w (wt, 0, 128), w (wt, 128, 8), 8,
      out (a, 1));
}

static void
run_linear_add (const Acts * a, gconstpointer wt)
{
  pp_linear_add (be, in (a, 0), 3, 5, w (wt, 0, 20), w (wt, 20, 4), 4,
      out (a, 1));
}

/* As linear/aligned: a device may add the product to y in its GEMM. */
static void
run_linear_add_aligned (const Acts * a, gconstpointer wt)
{
  pp_linear_add (be, in (a, 0), 4, 16, w (wt, 0, 128), w (wt, 128, 8), 8,
      out (a, 1));
}

/* A shape no linear case has: a device's plan for it is made (and, with
 * PPDIFFUSE_CUDA_GEMM_ALGO=timed, its algorithms timed) by a sum into y,
 * which the trials must leave as it is. */
static void
run_linear_add_own_shape (const Acts * a, gconstpointer wt)
{
  pp_linear_add (be, in (a, 0), 4, 24, w (wt, 0, 384), w (wt, 384, 16), 16,
      out (a, 1));
}

static void
run_attention (const Acts * a, gconstpointer wt)
{
  pp_attention (be, in (a, 0), in (a, 1), in (a, 2), 1, 3, 5, 2, 4, 8, 8,
      weights_dtype, out (a, 3));
}

/* Self-attention on a fused QKV projection's rows: q, k and v are column
 * ranges [0, 8), [8, 16) and [16, 24) of 3 rows of 24 (2 heads of 4). */
static void
run_attention_qkv (const Acts * a, gconstpointer wt)
{
  const gsize span = pp_strided_numel (3, 8, 24);

  pp_attention (be, pp_view_range (in (a, 0), 0, span),
      pp_view_range (in (a, 0), 8, span), pp_view_range (in (a, 0), 16, span),
      1, 3, 3, 2, 4, 24, 24, weights_dtype, out (a, 1));
}

static void
run_attention_causal (const Acts * a, gconstpointer wt)
{
  pp_attention_causal (be, in (a, 0), in (a, 1), in (a, 2), 1, 3, 2, 4,
      weights_dtype, out (a, 3));
}

#define UNARY_N 37
#define RUN_UNARY(name) \
  static void \
  run_##name (const Acts * a, gconstpointer wt) \
  { \
    pp_##name (be, out (a, 0), UNARY_N); \
  }
RUN_UNARY (silu)
RUN_UNARY (relu)
RUN_UNARY (tanh)
RUN_UNARY (gelu)
RUN_UNARY (quick_gelu)
#undef RUN_UNARY

static void
run_geglu (const Acts * a, gconstpointer wt)
{
  pp_geglu (be, in (a, 0), 3, 5, out (a, 1));
}

static void
run_upsample_nearest (const Acts * a, gconstpointer wt)
{
  pp_upsample_nearest (be, in (a, 0), 1, 2, 3, 3, 2, out (a, 1));
}

/* 2 channels (and 8, a device's vector path) of 2×3 from their four
 * phases of 3×4. */
static void
run_interleave_phases (const Acts * a, gconstpointer wt)
{
  pp_interleave_phases (be, in (a, 0), 1, 2, 2, 3, out (a, 1));
}

static void
run_interleave_phases_8 (const Acts * a, gconstpointer wt)
{
  pp_interleave_phases (be, in (a, 0), 1, 8, 2, 3, out (a, 1));
}

static void
run_resize_bilinear (const Acts * a, gconstpointer wt)
{
  pp_resize_bilinear (be, in (a, 0), 2, 3, 4, out (a, 1), 5, 7);
}

static void
run_concat_channels (const Acts * a, gconstpointer wt)
{
  pp_concat_channels (be, in (a, 0), 2, in (a, 1), 3, 2, 7, out (a, 2));
}

/* Bytes 0…255, from the weights' memory reinterpreted: any bytes do. */
static void
run_bytes_to_floats (const Acts * a, gconstpointer wt)
{
  pp_bytes_to_floats (be, wt, 29, out (a, 0));
}

/* The bytes come back in the second activation (as values 0…255), so the
 * comparison is the same as for any output. */
static void
run_floats_to_bytes (const Acts * a, gconstpointer wt)
{
  g_autoptr (GError) error = NULL;
  guint8 *bytes = pp_backend_alloc (be, 23, &error);

  g_assert_no_error (error);
  pp_floats_to_bytes (be, in (a, 0), 23, bytes);
  pp_bytes_to_floats (be, bytes, 23, out (a, 1));
  pp_backend_free (be, bytes);
}

static void
run_add (const Acts * a, gconstpointer wt)
{
  pp_add (be, out (a, 0), w (wt, 0, 19), 19);
}

static void
run_scale (const Acts * a, gconstpointer wt)
{
  pp_scale (be, out (a, 0), 19, -1.7f);
}

static void
run_affine (const Acts * a, gconstpointer wt)
{
  pp_affine (be, out (a, 0), 19, 0.3f, -0.25f);
}

static void
run_axpby (const Acts * a, gconstpointer wt)
{
  pp_axpby (be, out (a, 0), 0.7f, in (a, 1), -1.3f, 19);
}

/* With b = 0 and a = 1: a conversion between the two dtypes. */
static void
run_axpby_convert (const Acts * a, gconstpointer wt)
{
  pp_axpby (be, out (a, 1), 1.0f, in (a, 0), 0.0f, 19);
}

static const PpLcmCoeffs lcm = { 0.9f, 0.4f, 0.8f, 0.3f, 0.7f, 0.5f, 0 };

static void
run_lcm_step (const Acts * a, gconstpointer wt)
{
  pp_lcm_step (be, out (a, 0), in (a, 1), in (a, 2), 19, &lcm);
}

static void
run_lcm_step_last (const Acts * a, gconstpointer wt)
{
  const PpLcmCoeffs last = { 0.9f, 0.4f, 0.8f, 0.3f, 0.7f, 0.5f, 1 };

  pp_lcm_step (be, out (a, 0), in (a, 1), pp_view_none (), 19, &last);
}

static void
run_timestep_embedding (const Acts * a, gconstpointer wt)
{
  pp_timestep_embedding (be, 417.0f, 15, TRUE, 1.0f, out (a, 0));
}

static void
run_nchw_to_nlc (const Acts * a, gconstpointer wt)
{
  pp_nchw_to_nlc (be, in (a, 0), 2, 3, 5, out (a, 1));
}

static void
run_nlc_to_nchw (const Acts * a, gconstpointer wt)
{
  pp_nlc_to_nchw (be, in (a, 0), 2, 3, 5, out (a, 1));
}

static void
run_add_channel (const Acts * a, gconstpointer wt)
{
  pp_add_channel (be, out (a, 0), 2, 3, 5, w (wt, 0, 6));
}

/* y [3,4] of row stride 6 (elements 4 and 5 of each row untouched),
 * accumulated into. */
static void
run_matmul (const Acts * a, gconstpointer wt)
{
  pp_matmul (be, FALSE, TRUE, 3, 4, 5, w (wt, 0, 15), 5, w (wt, 15, 20), 5,
      TRUE, out (a, 0), 6);
}

/* A feature bank's fusion of 5 rows of 7 with a bank of 3 rows: the
 * products, the norms and the bank's rows from the weights (float32: the
 * bank's own rows are, pp-ops-list.h), the fused counts a float32 buffer
 * of the case's; only y is an activation.  At a threshold of 0.5 some of
 * the random rows fuse and some do not. */
static void
run_bank_fuse (const Acts * a, gconstpointer wt)
{
  static gpointer fused;

  if (fused == NULL) {
    static const float zeros[5];

    fused = upload (zeros, PP_DTYPE_F32, 5);
  }
  pp_bank_fuse (be, w (wt, 0, 15), 5, 3, 7, w (wt, 15, 5), w (wt, 20, 3),
      w (wt, 23, 21), 0.5, 0.8, out (a, 0), pp_out_f32 (fused, 5));
}

static const Case cases[] = {
  {PP_OP_CONV2D, "conv2d", 2, {{90, ACT_IN, 1, 3, 30},
          {120, ACT_OUT, 1, 4, 30}}, run_conv2d,
      112, 0, TRUE},
  {PP_OP_CONV2D, "conv2d/8-channels", 2, {{648, ACT_IN, 1, 8, 81},
          {648, ACT_OUT, 1, 8, 81}}, run_conv2d_8, 584, 0, TRUE},
  {PP_OP_CONV2D, "conv2d/8-channels-no-bias", 2, {{648, ACT_IN, 1, 8, 81},
          {648, ACT_OUT, 1, 8, 81}}, run_conv2d_8_no_bias, 576, 0, TRUE},
  {PP_OP_CONV2D, "conv2d+relu", 2, {{90, ACT_IN, 1, 3, 30},
          {120, ACT_OUT, 1, 4, 30}}, run_conv2d_relu, 112, 0, TRUE},
  {PP_OP_CONV2D, "conv2d/8-channels+relu", 2, {{648, ACT_IN, 1, 8, 81},
          {648, ACT_OUT, 1, 8, 81}}, run_conv2d_8_relu, 584, 0, TRUE},
  {PP_OP_CONV2D, "conv2d+residual+relu", 3, {{90, ACT_IN, 1, 3, 30},
          {120, ACT_IN, 1, 4, 30}, {120, ACT_OUT, 1, 4, 30}},
      run_conv2d_residual, 112, 0, TRUE},
  {PP_OP_CONV2D, "conv2d/8-channels+residual", 3, {{648, ACT_IN, 1, 8, 81},
          {648, ACT_IN, 1, 8, 81}, {648, ACT_OUT, 1, 8, 81}},
      run_conv2d_8_residual, 584, 0, TRUE},
  {PP_OP_CONV2D, "conv2d/8-channels-no-bias+relu", 2, {{648, ACT_IN, 1, 8,
              81}, {648, ACT_OUT, 1, 8, 81}}, run_conv2d_8_no_bias_relu, 576,
      0, TRUE},
  {PP_OP_CONV2D, "conv2d/3-to-8-channels+relu", 2, {{90, ACT_IN, 1, 3, 30},
          {240, ACT_OUT, 1, 8, 30}}, run_conv2d_3_to_8_relu, 224, 0, TRUE},
  {PP_OP_CONV2D, "conv2d/3-to-8-channels+residual+relu", 3, {{90, ACT_IN, 1,
              3, 30}, {240, ACT_IN, 1, 8, 30}, {240, ACT_OUT, 1, 8, 30}},
      run_conv2d_3_to_8_residual, 224, 0, TRUE},
  {PP_OP_CONV2D, "conv2d/3-to-8-channels-no-bias+residual", 3, {{90, ACT_IN,
              1, 3, 30}, {240, ACT_IN, 1, 8, 30}, {240, ACT_OUT, 1, 8, 30}},
      run_conv2d_3_to_8_no_bias_residual, 216, 0, TRUE},
  {PP_OP_CONV2D, "conv2d/8-channels-no-bias+residual", 3, {{648, ACT_IN, 1,
              8, 81}, {648, ACT_IN, 1, 8, 81}, {648, ACT_OUT, 1, 8, 81}},
      run_conv2d_8_no_bias_residual, 576, 0, TRUE},
  {PP_OP_CONV2D, "conv2d/8-channels-1x3", 2, {{648, ACT_IN, 1, 8, 81},
          {504, ACT_OUT, 1, 8, 63}}, run_conv2d_8_1x3, 200, 0, TRUE},
  {PP_OP_CONV2D, "conv2d/8-channels-1x1-stride-2", 2, {{648, ACT_IN, 1, 8,
              81}, {200, ACT_OUT, 1, 8, 25}}, run_conv2d_8_1x1_stride_2, 72,
      0, TRUE},
  {PP_OP_GROUP_NORM, "group_norm+silu", 2, {{72, ACT_IN, 2, 4, 9},
          {72, ACT_OUT, 2, 4, 9}},
      run_group_norm, 8},
  {PP_OP_GROUP_NORM, "group_norm/in-place", 1, {{72, ACT_INOUT, 2, 4, 9}},
      run_group_norm_in_place, 0},
  {PP_OP_GROUP_NORM, "group_norm/shifted", 3, {{72, ACT_IN, 2, 4, 9},
          {8, ACT_IN}, {72, ACT_OUT, 2, 4, 9}}, run_group_norm_shifted, 8},
  {PP_OP_GROUP_NORM, "group_norm/shifted-in-place", 2, {{72, ACT_INOUT, 2,
              4, 9}, {8, ACT_IN}}, run_group_norm_shifted_in_place, 0},
  {PP_OP_GROUP_NORM, "group_norm/16-channels", 3, {{288, ACT_IN, 2, 16, 9},
          {32, ACT_IN}, {288, ACT_OUT, 2, 16, 9}}, run_group_norm_16, 32},
  {PP_OP_GROUP_NORM, "group_norm/16-channels-in-place", 2, {{288,
              ACT_INOUT, 2, 16, 9}, {32, ACT_IN}},
      run_group_norm_16_in_place, 0},
  {PP_OP_LAYER_NORM, "layer_norm", 2, {{24, ACT_IN}, {24, ACT_OUT}},
      run_layer_norm, 16},
  {PP_OP_LAYER_NORM, "layer_norm/in-place", 1, {{24, ACT_INOUT}},
      run_layer_norm_in_place, 16},
  {PP_OP_LINEAR, "linear", 2, {{15, ACT_IN}, {12, ACT_OUT}}, run_linear, 24,
      0, TRUE},
  {PP_OP_LINEAR, "linear/aligned", 2, {{64, ACT_IN}, {32, ACT_OUT}},
      run_linear_aligned, 136, 0, TRUE},
  {PP_OP_LINEAR_ADD, "linear_add", 2, {{15, ACT_IN}, {12, ACT_INOUT}},
      run_linear_add, 24, 0, TRUE},
  {PP_OP_LINEAR_ADD, "linear_add/aligned", 2, {{64, ACT_IN},
          {32, ACT_INOUT}}, run_linear_add_aligned, 136, 0, TRUE},
  {PP_OP_LINEAR_ADD, "linear_add/own-shape", 2, {{96, ACT_IN},
          {64, ACT_INOUT}}, run_linear_add_own_shape, 400, 0, TRUE},
  {PP_OP_ATTENTION, "attention", 4, {{24, ACT_IN}, {40, ACT_IN}, {40, ACT_IN},
          {24, ACT_OUT}}, run_attention, 0, 0, TRUE},
  {PP_OP_ATTENTION, "attention/qkv", 2, {{72, ACT_IN}, {24, ACT_OUT}},
      run_attention_qkv, 0, 0, TRUE},
  {PP_OP_ATTENTION_CAUSAL, "attention_causal", 4, {{24, ACT_IN},
          {24, ACT_IN}, {24, ACT_IN}, {24, ACT_OUT}}, run_attention_causal,
      0, 0, TRUE},
  {PP_OP_SILU, "silu", 1, {{UNARY_N, ACT_INOUT}}, run_silu, 0},
  {PP_OP_RELU, "relu", 1, {{UNARY_N, ACT_INOUT}}, run_relu, 0},
  {PP_OP_TANH, "tanh", 1, {{UNARY_N, ACT_INOUT}}, run_tanh, 0},
  {PP_OP_GELU, "gelu", 1, {{UNARY_N, ACT_INOUT}}, run_gelu, 0},
  {PP_OP_QUICK_GELU, "quick_gelu", 1, {{UNARY_N, ACT_INOUT}}, run_quick_gelu,
      0},
  {PP_OP_GEGLU, "geglu", 2, {{30, ACT_IN}, {15, ACT_OUT}}, run_geglu, 0},
  {PP_OP_UPSAMPLE_NEAREST, "upsample_nearest", 2, {{18, ACT_IN, 1, 2, 9},
          {72, ACT_OUT, 1, 2, 36}}, run_upsample_nearest, 0},
  {PP_OP_INTERLEAVE_PHASES, "interleave_phases", 2, {{96, ACT_IN, 1, 8, 12},
          {48, ACT_OUT, 1, 2, 24}}, run_interleave_phases, 0},
  {PP_OP_INTERLEAVE_PHASES, "interleave_phases/8-channels", 2,
        {{384, ACT_IN, 1, 32, 12}, {192, ACT_OUT, 1, 8, 24}},
      run_interleave_phases_8, 0},
  {PP_OP_RESIZE_BILINEAR, "resize_bilinear", 2, {{24, ACT_IN, 1, 2, 12},
          {70, ACT_OUT, 1, 2, 35}}, run_resize_bilinear, 0},
  {PP_OP_CONCAT_CHANNELS, "concat_channels", 3, {{28, ACT_IN, 2, 2, 7},
          {42, ACT_IN, 2, 3, 7}, {70, ACT_OUT, 2, 5, 7}},
      run_concat_channels, 0},
  {PP_OP_BYTES_TO_FLOATS, "bytes_to_floats", 1, {{29, ACT_OUT}},
      run_bytes_to_floats, 8},
  {PP_OP_FLOATS_TO_BYTES, "floats_to_bytes", 2, {{23, ACT_IN},
          {23, ACT_OUT}}, run_floats_to_bytes, 0, 300},
  {PP_OP_ADD, "add", 1, {{19, ACT_INOUT}}, run_add, 19},
  {PP_OP_SCALE, "scale", 1, {{19, ACT_INOUT}}, run_scale, 0},
  {PP_OP_AFFINE, "affine", 1, {{19, ACT_INOUT}}, run_affine, 0},
  {PP_OP_AXPBY, "axpby", 2, {{19, ACT_INOUT}, {19, ACT_IN}}, run_axpby, 0},
  {PP_OP_AXPBY, "axpby/convert", 2, {{19, ACT_IN}, {19, ACT_OUT}},
      run_axpby_convert, 0},
  {PP_OP_LCM_STEP, "lcm_step", 3, {{19, ACT_INOUT}, {19, ACT_IN},
          {19, ACT_IN}}, run_lcm_step, 0},
  {PP_OP_LCM_STEP, "lcm_step/last", 2, {{19, ACT_INOUT}, {19, ACT_IN}},
      run_lcm_step_last, 0},
  {PP_OP_TIMESTEP_EMBEDDING, "timestep_embedding", 1, {{15, ACT_OUT}},
      run_timestep_embedding, 0},
  {PP_OP_NCHW_TO_NLC, "nchw_to_nlc", 2, {{30, ACT_IN, 2, 3, 5},
          {30, ACT_OUT}},
      run_nchw_to_nlc, 0},
  {PP_OP_NLC_TO_NCHW, "nlc_to_nchw", 2, {{30, ACT_IN},
          {30, ACT_OUT, 2, 3, 5}},
      run_nlc_to_nchw, 0},
  {PP_OP_ADD_CHANNEL, "add_channel", 1, {{30, ACT_INOUT, 2, 3, 5}},
      run_add_channel,
      6},
  {PP_OP_MATMUL, "matmul/strided", 1, {{16, ACT_INOUT}}, run_matmul, 35,
      0, TRUE},
  {PP_OP_BANK_FUSE, "bank_fuse", 1, {{35, ACT_INOUT}}, run_bank_fuse, 44},
};

/* The 16-bit side of a run: which activations are 16-bit. */
typedef enum
{
  SIDE_ALL,                     /* every activation */
  SIDE_IN,                      /* the ones read only: a model's interior
                                 * read into a float32 output */
  SIDE_OUT,                     /* the ones written: a float32 input into
                                 * the interior */
} Side;

static const char *const side_names[] = { "all", "in", "out" };

/* How the second run lays out a case's spatial activations. */
typedef enum
{
  LAID_NCHW,                    /* all channels first */
  LAID_NHWC,                    /* all channels last */
  LAID_FIRST_NCHW,              /* channels last but the first */
  LAID_LAST_NCHW,               /* channels last but the last */
} Laid;

static const char *const laid_names[] = { "nchw", "nhwc", "nhwc but the "
      "first", "nhwc but the last" };

static float
narrow_widen (PpDType dtype, float x)
{
  if (dtype == PP_DTYPE_F32)
    return x;
  return dtype == PP_DTYPE_F16 ? pp_f16_to_f32 (pp_f32_to_f16 (x))
      : pp_bf16_to_f32 (pp_f32_to_bf16 (x));
}

/* dst = src [n, a, b] with its last two dimensions swapped. */
static void
swap_last (const float *src, int n, int a, int b, float *dst)
{
  for (int s = 0; s < n; s++)
    for (int i = 0; i < a; i++)
      for (int j = 0; j < b; j++)
        dst[((gsize) s * b + j) * a + i] = src[((gsize) s * a + i) * b + j];
}

/* The spatial activations of @c, and the layout @laid gives activation
 * @i of them. */
static guint
n_spatial (const Case * c)
{
  guint k = 0;

  for (guint i = 0; i < c->n_acts; i++)
    k += c->acts[i].n > 0;
  return k;
}

static PpLayout
laid_out (const Case * c, Laid laid, guint i)
{
  guint first = MAX_ACTS, last = 0;

  if (c->acts[i].n == 0 || laid == LAID_NCHW)
    return PP_LAYOUT_NCHW;
  for (guint j = 0; j < c->n_acts; j++)
    if (c->acts[j].n > 0) {
      first = MIN (first, j);
      last = j;
    }
  if ((laid == LAID_FIRST_NCHW && i == first)
      || (laid == LAID_LAST_NCHW && i == last))
    return PP_LAYOUT_NCHW;
  return PP_LAYOUT_NHWC;
}

/* Host values of a device activation, widened to float32. */
static float *
download (gconstpointer data, PpDType dtype, gsize n)
{
  float *host = g_new (float, n);

  if (dtype == PP_DTYPE_F32)
    pp_backend_download (be, host, data, n * sizeof (float));
  else {
    g_autofree guint16 *narrow = g_new (guint16, n);

    pp_backend_download (be, narrow, data, n * sizeof (guint16));
    for (gsize i = 0; i < n; i++)
      host[i] = dtype == PP_DTYPE_F16 ? pp_f16_to_f32 (narrow[i])
          : pp_bf16_to_f32 (narrow[i]);
  }
  return host;
}

static gpointer
upload (const float *host, PpDType dtype, gsize n)
{
  g_autoptr (GError) error = NULL;
  gpointer dev = pp_backend_alloc (be, n * pp_dtype_size (dtype), &error);

  g_assert_no_error (error);
  if (dtype == PP_DTYPE_F32)
    pp_backend_upload (be, dev, host, n * sizeof (float));
  else {
    g_autofree guint16 *narrow = g_new (guint16, n);

    for (gsize i = 0; i < n; i++)
      narrow[i] = dtype == PP_DTYPE_F16 ? pp_f32_to_f16 (host[i])
          : pp_f32_to_bf16 (host[i]);
    pp_backend_upload (be, dev, narrow, n * sizeof (guint16));
  }
  return dev;
}

static gboolean
on_side (Side side, Role role)
{
  return side == SIDE_ALL || (side == SIDE_IN) == (role == ACT_IN)
      || role == ACT_INOUT;
}

/* Uploads @start into activations of @c, each of dtype @dtypes[i], laid
 * out as @laid gives it (channels last: transposed on the host). */
static void
acts_upload (const Case * c, float *const *start, const PpDType * dtypes,
    Laid laid, Acts * a)
{
  for (guint i = 0; i < c->n_acts; i++) {
    const gsize n = c->acts[i].numel;

    a->numel[i] = n;
    a->dtype[i] = dtypes[i];
    a->layout[i] = laid_out (c, laid, i);
    if (a->layout[i] == PP_LAYOUT_NHWC) {
      g_autofree float *rows = g_new (float, n);

      swap_last (start[i], c->acts[i].n, c->acts[i].c, c->acts[i].hw, rows);
      a->data[i] = upload (rows, dtypes[i], n);
    } else
      a->data[i] = upload (start[i], dtypes[i], n);
  }
}

/* Activation @i of @a on the host, widened and laid back channels first;
 * freed on the device. */
static float *
acts_take (const Case * c, Acts * a, guint i)
{
  const gsize n = c->acts[i].numel;
  float *got = download (a->data[i], a->dtype[i], n);

  pp_backend_free (be, a->data[i]);
  if (a->layout[i] == PP_LAYOUT_NHWC) {
    g_autofree float *rows = got;

    got = g_new (float, n);
    swap_last (rows, c->acts[i].n, c->acts[i].hw, c->acts[i].c, got);
  }
  return got;
}

/* Whether a device backend (CUDA) runs @op on views all channels last as
 * they are: the group norm but its whole way (PPDIFFUSE_CUDA_GROUP_NORM:
 * the ticket default, vector, split, single and fold read channels last),
 * and
 * upsample_nearest, interleave_phases and concat_channels on views of one
 * dtype. */
static gboolean
native_nhwc (PpOp op, gboolean one_dtype)
{
  const gchar *norm = g_getenv ("PPDIFFUSE_CUDA_GROUP_NORM");

  switch (op) {
    case PP_OP_GROUP_NORM:
      return g_strcmp0 (norm, "whole") != 0;
    case PP_OP_UPSAMPLE_NEAREST:
    case PP_OP_INTERLEAVE_PHASES:
    case PP_OP_CONCAT_CHANNELS:
      return one_dtype;
    default:
      return FALSE;
  }
}

/* The op's layout copies (PpOpProfile.layout_copies) of the run just
 * made: none without a channels-last view; with one, on the CPU backends,
 * which lay every channels-last view out channels first for their
 * kernels, some; on a device, none where it reads the layout itself. */
static void
check_layout_copies (const Case * c, Laid laid, const Acts * run)
{
  gboolean nhwc = FALSE, one_dtype = TRUE;
  PpOpProfile p;

  for (guint i = 0; i < c->n_acts; i++) {
    nhwc |= laid_out (c, laid, i) == PP_LAYOUT_NHWC;
    one_dtype &= run->dtype[i] == run->dtype[0];
  }
  pp_ops_get_profile (c->op, &p);
  if (!nhwc)
    g_assert_cmpuint (p.layout_copies, ==, 0);
  else if (g_str_has_prefix (pp_backend_name (be), "cpu"))
    g_assert_cmpuint (p.layout_copies, >, 0);
  else if (laid == LAID_NHWC && native_nhwc (c->op, one_dtype))
    g_assert_cmpuint (p.layout_copies, ==, 0);
  if (p.layout_copies > 0)
    g_test_message ("%s on %s laid out %s: %" G_GUINT64_FORMAT " view(s) "
        "copied channels first", c->name, pp_backend_name (be),
        laid_names[laid], p.layout_copies);
}

/* A device's channels-last group norm sums in another order than its
 * channels-first one: this close, relative to the largest value.  Every
 * other op, and every op of the CPU backends, gives the same bits. */
#define LAYOUT_REL_BOUND 1e-5

/* Whether the op of @c writes its 16-bit outputs as a device's library
 * rounds its own float32 sum, not as the float32 kernel's output rounded:
 * CUDA's linear and linear_add with weights of the output's type
 * (cuBLASLt, the bias in its epilogue, y its C) and its matmul with a and b of it (a 16-bit C), unless
 * PPDIFFUSE_CUDA_GEMM_OUT=f32.  One unit in the last place apart at
 * most. */
static gboolean
rounds_own_sum (const Case * c, PpDType dtype)
{
  const gchar *conv_gemm = g_getenv ("PPDIFFUSE_CUDA_CONV_GEMM");

  if (!g_str_equal (pp_backend_name (be), "cuda") || weights_dtype != dtype)
    return FALSE;
  /* A convolution as a product: the patches' sum in cuBLASLt's order. */
  if (c->op == PP_OP_CONV2D)
    return conv_gemm != NULL && *conv_gemm != '\0'
        && g_strcmp0 (conv_gemm, "0") != 0;
  return (c->op == PP_OP_LINEAR || c->op == PP_OP_LINEAR_ADD
          || c->op == PP_OP_MATMUL)
      && g_strcmp0 (g_getenv ("PPDIFFUSE_CUDA_GEMM_OUT"), "f32") != 0;
}

/* The weights' largest magnitude (upload_weights). */
#define WEIGHT_MAX 0.5f

/* One unit in the last place of 16-bit @dtype at magnitude @v. */
static float
ulp_at (PpDType dtype, float v)
{
  const int mantissa = dtype == PP_DTYPE_F16 ? 10 : 7;
  int e;

  frexpf (MAX (v, 1e-30f), &e);
  /* v is m·2^e with m in [0.5, 1): its leading bit is 2^(e − 1).  Below
   * float16's normals, its subnormals' step. */
  return MAX (ldexpf (1.0f, e - 1 - mantissa),
      dtype == PP_DTYPE_F16 ? ldexpf (1.0f, -24) : 0.0f);
}

/* How far a 16-bit sum into y that a device's library rounds itself
 * (rounds_own_sum, y read as its C) may be from the float32 run's value
 * @e rounded, y having started at @y0: cuBLASLt may round the product, or
 * the product with C or with the bias, to y's type before adding the rest
 * (on an H200, a linear_add of 16 values gave −0.03515625 where the sum
 * rounded once is −0.0350037: a partial sum rounded first, as PyTorch's
 * own product and add would round).  Such a partial sum is at most
 * |e| + 2·|y0| + 2·WEIGHT_MAX (the product is e − y0 − bias), rounded to
 * half a unit of its magnitude, and the result to half a unit of its own:
 * one unit at the partial sum's largest magnitude. */
static float
own_sum_bound (PpDType dtype, float e, float y0)
{
  return ulp_at (dtype, fabsf (e) + 2.0f * fabsf (y0) + 2.0f * WEIGHT_MAX);
}

/* The 16-bit values @a and @b (floats holding them) are neighbours or
 * equal: their bit patterns, as sign and magnitude, one apart at most. */
static gboolean
one_ulp_apart (PpDType dtype, float a, float b)
{
  const guint16 ha = dtype == PP_DTYPE_F16 ? pp_f32_to_f16 (a)
      : pp_f32_to_bf16 (a);
  const guint16 hb = dtype == PP_DTYPE_F16 ? pp_f32_to_f16 (b)
      : pp_f32_to_bf16 (b);
  /* Sign and magnitude onto one line: -x below +x, ±0 together. */
  const gint ia = ha & 0x8000 ? -(gint) (ha & 0x7fff) : (gint) ha;
  const gint ib = hb & 0x8000 ? -(gint) (hb & 0x7fff) : (gint) hb;

  return ABS (ia - ib) <= 1;
}

static void
check_case (const Case * c, PpDType dtype, Side side, Laid laid)
{
  GRand *rand = g_rand_new_with_seed (c->op * 31 + side);
  const double range = c->range > 0 ? c->range : 2.0;
  gpointer weights = c->weights ? upload_weights (c->weights) : NULL;
  const gboolean exact = g_str_has_prefix (pp_backend_name (be), "cpu")
      || c->op != PP_OP_GROUP_NORM;
  const gboolean own_sum = rounds_own_sum (c, dtype);
  float *start[MAX_ACTS];
  PpDType f32[MAX_ACTS], narrow_dtypes[MAX_ACTS];
  Acts ref = { 0 }, wide = { 0 }, narrow = { 0 };

  /* Starting values (outputs too: a strided output keeps its gaps), each
   * representable in @dtype, so that every run begins from the same. */
  for (guint i = 0; i < c->n_acts; i++) {
    const gsize n = c->acts[i].numel;

    start[i] = g_new (float, n);
    for (gsize j = 0; j < n; j++)
      start[i][j] = narrow_widen (dtype,
          (float) g_rand_double_range (rand, -range, range));
    f32[i] = PP_DTYPE_F32;
    /* An in-place activation is on both sides, so SIDE_IN and SIDE_OUT
     * keep it 16-bit as SIDE_ALL does. */
    narrow_dtypes[i] = on_side (side, c->acts[i].role) ? dtype
        : PP_DTYPE_F32;
  }
  g_rand_free (rand);

  /* The float32 run in the same layouts, and channels first. */
  acts_upload (c, start, f32, laid, &wide);
  acts_upload (c, start, narrow_dtypes, laid, &narrow);
  c->run (&wide, weights);
  pp_ops_reset_flop_count ();
  c->run (&narrow, weights);
  check_layout_copies (c, laid, &narrow);
  if (laid != LAID_NCHW) {
    acts_upload (c, start, f32, LAID_NCHW, &ref);
    c->run (&ref, weights);
  }

  for (guint i = 0; i < c->n_acts; i++) {
    const gsize n = c->acts[i].numel;
    g_autofree float *expect = acts_take (c, &wide, i);
    g_autofree float *got = acts_take (c, &narrow, i);

    /* The 16-bit run: the float32 run of its layouts, rounded. */
    for (gsize j = 0; j < n; j++) {
      const float e = narrow.dtype[i] == PP_DTYPE_F32 ? expect[j]
          : narrow_widen (dtype, expect[j]);
      const gboolean own = own_sum && narrow.dtype[i] != PP_DTYPE_F32;
      const gboolean into = c->acts[i].role == ACT_INOUT;
      /* What the sum was added to: y itself, or a convolution's residual
       * (its second activation, of the output's shape). */
      const float *summand = into ? start[i] : c->op == PP_OP_CONV2D
          && c->n_acts == 3 && i == 2 ? start[1] : NULL;

      if (memcmp (&e, &got[j], sizeof (float)) != 0 && !(isnan (e)
              && isnan (got[j])) && !(own && one_ulp_apart (dtype, e, got[j]))
          && !(own && summand != NULL && fabsf (got[j] - e)
              <= own_sum_bound (dtype, e, summand[j])))
        g_error ("%s on %s, %s activations %s laid out %s, %s weights: "
            "activation %u element %" G_GSIZE_FORMAT " (channels first) is "
            "%.9g, the float32 run's %s %.9g%s", c->name,
            pp_backend_name (be), pp_dtype_name (dtype), side_names[side],
            laid_names[laid], pp_dtype_name (weights_dtype), i, j, got[j],
            narrow.dtype[i] == PP_DTYPE_F32 ? "is" : "rounds to", e,
            !own ? "" : summand != NULL ? " (one unit in the last place "
            "apart allowed, or a partial sum's rounding)" : " (one unit in "
            "the last place apart allowed)");
    }
    /* The layouts: the channels-first run's values, bit for bit but for
     * a device's group norm (LAYOUT_REL_BOUND). */
    if (laid != LAID_NCHW) {
      g_autofree float *first = acts_take (c, &ref, i);
      float top = 0.0f;

      for (gsize j = 0; j < n; j++)
        top = MAX (top, fabsf (first[j]));
      for (gsize j = 0; j < n; j++) {
        const gboolean same = memcmp (&first[j], &expect[j],
            sizeof (float)) == 0 || (isnan (first[j]) && isnan (expect[j]));

        if (!same && (exact || !(fabsf (first[j] - expect[j])
                    <= LAYOUT_REL_BOUND * MAX (top, 1.0f))))
          g_error ("%s on %s, float32 activations laid out %s, %s weights: "
              "activation %u element %" G_GSIZE_FORMAT " (laid back "
              "channels first) is %.9g, the channels-first run's %.9g (%s)",
              c->name,
              pp_backend_name (be), laid_names[laid],
              pp_dtype_name (weights_dtype), i, j, expect[j], first[j],
              exact ? "the same bits expected" : "beyond the bound");
      }
    }
  }
  /* After every activation's check: a later one's bound reads an earlier
   * one's start (a convolution's residual). */
  for (guint i = 0; i < c->n_acts; i++)
    g_free (start[i]);
  if (weights != NULL)
    pp_backend_free (be, weights);
}

static void
test_op_cases (gconstpointer data)
{
  const Case *c = data;
  const guint spatial = n_spatial (c);

  /* Channels last in float32: the layout alone. */
  for (Laid laid = LAID_NHWC; spatial > 0 && laid <= LAID_LAST_NCHW; laid++)
    if (laid == LAID_NHWC || spatial > 1)
      check_case (c, PP_DTYPE_F32, SIDE_ALL, laid);

  for (PpDType dtype = PP_DTYPE_F16; dtype <= PP_DTYPE_BF16; dtype++) {
    if (!(be->act_dtypes & PP_DTYPE_BIT (dtype))) {
      g_autofree gchar *why = g_strdup_printf ("the %s backend takes no %s "
          "activations", pp_backend_name (be), pp_dtype_name (dtype));

      g_test_skip (why);
      continue;
    }
    /* Float32 weights; then of this type, and of the other 16-bit one. */
    for (guint wt = 0; wt < (c->typed_weights ? 3 : 1); wt++) {
      weights_dtype = wt == 0 ? PP_DTYPE_F32 : wt == 1 ? dtype
          : dtype == PP_DTYPE_F16 ? PP_DTYPE_BF16 : PP_DTYPE_F16;
      for (Side side = SIDE_ALL; side <= SIDE_OUT; side++)
        for (Laid laid = LAID_NCHW; laid <= LAID_LAST_NCHW; laid++)
          if (laid == LAID_NCHW || laid == LAID_NHWC
              || (spatial > 1 && side == SIDE_ALL))
            check_case (c, dtype, side, laid);
    }
    weights_dtype = PP_DTYPE_F32;
  }
}

/* Every op of the list has a case, but the feature bank's that read and
 * write the bank's own rows only, float32 on every backend
 * (pp-ops-list.h). */
static void
test_every_op (void)
{
  for (int op = 0; op < PP_OP_FOR_ROWS; op++) {
    gboolean found = op == PP_OP_ROW_NORMS || op == PP_OP_BANK_MERGE_DEST
        || op == PP_OP_BANK_MERGE;

    for (guint i = 0; i < G_N_ELEMENTS (cases) && !found; i++)
      found = cases[i].op == (PpOp) op;
    if (!found) {
      PpOpProfile p;

      pp_ops_get_profile (op, &p);
      g_error ("op %s has no case with 16-bit activations", p.name);
    }
  }
}

/* An activation shorter than what the op writes, or of a dtype the
 * backend does not take, ends the process naming it. */
static void
test_refused (void)
{
  if (g_test_subprocess ()) {
    g_autoptr (GError) error = NULL;
    gpointer x = pp_backend_alloc (be, 64, &error);

    g_assert_no_error (error);
    pp_silu (be, pp_out (x, PP_DTYPE_F16, 3), 4);
    return;
  }
  g_test_trap_subprocess (NULL, 30 * G_USEC_PER_SEC, 0);
  g_test_trap_assert_failed ();
  g_test_trap_assert_stderr ("*silu: parameter x has 3 elements (F16)*"
      "the op uses 4*");
}

/* ---- a convolution's filter, read and written besides conv2d --------- */

#define FILTER_C 16             /* channels in and out: channels last on cuda */
#define FILTER_HW 6

typedef struct
{
  PpView w;                     /* the filter */
  gpointer owned;
  gsize bytes;                  /* its stored bytes */
  gpointer x, y;                /* float32 [1, C, HW, HW], on the device */
} FilterRun;

static void
filter_run_init (FilterRun * r, const float *wt, const float *x)
{
  const gsize xn = (gsize) FILTER_C * FILTER_HW * FILTER_HW;
  g_autoptr (GError) error = NULL;

  r->w = pp_backend_upload_weights (be, wt, (gsize) FILTER_C * FILTER_C * 9,
      PP_DTYPE_F16, &r->owned, &error);
  g_assert_no_error (error);
  r->bytes = r->w.numel * pp_dtype_size (r->w.dtype);
  r->x = pp_backend_alloc (be, xn * sizeof (float), &error);
  r->y = pp_backend_alloc (be, xn * sizeof (float), &error);
  g_assert_no_error (error);
  pp_backend_upload (be, r->x, x, xn * sizeof (float));
}

static void
filter_run_clear (FilterRun * r)
{
  pp_backend_free (be, r->owned);
  pp_backend_free (be, r->x);
  pp_backend_free (be, r->y);
}

/* y = conv3x3 (x, the filter), float32 activations channels first. */
static void
filter_conv (const FilterRun * r)
{
  const gsize xn = (gsize) FILTER_C * FILTER_HW * FILTER_HW;

  pp_conv2d (be, pp_view_f32 (r->x, xn), 1, FILTER_C, FILTER_HW, FILTER_HW,
      r->w, pp_view_none (), FILTER_C, 3, 3, 1, 1, pp_view_none (), FALSE,
      pp_out_f32 (r->y, xn));
}

/* A product reading the filter as a matrix [C, C·9] (a weight shared by
 * a convolution and a product), into y's first 2·C values: a linear of
 * two rows of x, or (@matmul) a matmul of the same rows by the filter's
 * transpose. */
#define FILTER_PRODUCT (2 * FILTER_C)

static void
filter_product (const FilterRun * r, gboolean matmul)
{
  const int in = FILTER_C * 9;

  if (matmul)
    pp_matmul (be, FALSE, TRUE, 2, FILTER_C, in, pp_view_f32 (r->x, 2 * in),
        in, r->w, in, FALSE, pp_out_f32 (r->y, FILTER_PRODUCT), FILTER_C);
  else
    pp_linear (be, pp_view_f32 (r->x, 2 * in), 2, in, r->w, pp_view_none (),
        FILTER_C, pp_out_f32 (r->y, FILTER_PRODUCT));
}

static guint8 *
download_bytes (gconstpointer mem, gsize bytes)
{
  guint8 *host = g_malloc (bytes);

  pp_backend_download (be, host, mem, bytes);
  return host;
}

/* @bytes of device @mem are @want's, or the test fails naming @what. */
static void
expect_bytes (const gchar * what, gconstpointer mem, const guint8 * want,
    gsize bytes)
{
  g_autofree guint8 *got = download_bytes (mem, bytes);

  if (memcmp (got, want, bytes) != 0)
    g_error ("%s: the bytes differ", what);
}

static gboolean
filter_graph_func (gpointer data, GError ** error)
{
  filter_conv (data);
  return TRUE;
}

/* A filter reads as it was written whatever conv2d made of it (on cuda,
 * channels last in its own bytes): after a convolution, a download and a
 * copy of it give the bytes uploaded, a linear and a matmul reading it as
 * a matrix give their products on a filter never convolved, a write to
 * half of it leaves the other half as it was and the convolution after it
 * sees both halves, and
 * each convolution gives the bytes of the same convolution on a filter
 * uploaded afresh; a graph's launches give its first run's bytes, before
 * and after another filter's first run beside it. */
static void
test_filter_reads (void)
{
  const gsize wn = (gsize) FILTER_C * FILTER_C * 9;
  const gsize ybytes = (gsize) FILTER_C * FILTER_HW * FILTER_HW
      * sizeof (float);
  g_autoptr (GRand) rand = g_rand_new_with_seed (5);
  g_autofree float *wt = g_new (float, wn);
  g_autofree float *wt2 = g_new (float, wn);
  g_autofree float *x = g_new (float, ybytes / sizeof (float));
  g_autofree guint8 *uploaded = NULL, *y1 = NULL;
  FilterRun a;
  gpointer copy;

  for (gsize i = 0; i < wn; i++) {
    wt[i] = (float) g_rand_double_range (rand, -1, 1);
    wt2[i] = (float) g_rand_double_range (rand, -1, 1);
  }
  for (gsize i = 0; i < ybytes / sizeof (float); i++)
    x[i] = (float) g_rand_double_range (rand, -1, 1);
  filter_run_init (&a, wt, x);
  uploaded = download_bytes (a.w.data, a.bytes);

  /* Read after a convolution: as uploaded. */
  filter_conv (&a);
  y1 = download_bytes (a.y, ybytes);
  expect_bytes ("the filter downloaded after a convolution", a.w.data,
      uploaded, a.bytes);
  filter_conv (&a);
  expect_bytes ("the convolution again", a.y, y1, ybytes);
  filter_conv (&a);
  copy = pp_backend_alloc (be, a.bytes, NULL);
  pp_backend_copy (be, copy, a.w.data, a.bytes);
  expect_bytes ("a copy of the filter after a convolution", copy, uploaded,
      a.bytes);
  pp_backend_free (be, copy);

  /* Read by a product right after a convolution (each on its own, so
   * that neither reads what the other laid back): what it reads of a
   * filter never convolved. */
  for (guint matmul = 0; matmul <= 1; matmul++) {
    FilterRun fresh;
    g_autofree guint8 *want = NULL;

    filter_run_init (&fresh, wt, x);
    filter_product (&fresh, matmul);
    want = download_bytes (fresh.y, FILTER_PRODUCT * sizeof (float));
    filter_conv (&a);
    filter_product (&a, matmul);
    expect_bytes (matmul ? "a matmul of the filter after a convolution"
        : "a linear of the filter after a convolution", a.y, want,
        FILTER_PRODUCT * sizeof (float));
    filter_conv (&a);
    expect_bytes ("the convolution after it", a.y, y1, ybytes);
    filter_run_clear (&fresh);
  }

  /* Half of it written after a convolution: the other half as it was,
   * and the convolution of both halves as a fresh filter's. */
  {
    FilterRun other;
    g_autofree guint8 *half = NULL, *mixed = NULL;

    filter_run_init (&other, wt2, x);
    half = download_bytes (other.w.data, other.bytes / 2);
    filter_conv (&a);
    pp_backend_upload (be, (gpointer) a.w.data, half, a.bytes / 2);
    mixed = download_bytes (a.w.data, a.bytes);
    g_assert_cmpmem (mixed, a.bytes / 2, half, a.bytes / 2);
    g_assert_cmpmem (mixed + a.bytes / 2, a.bytes / 2,
        uploaded + a.bytes / 2, a.bytes / 2);
    filter_conv (&a);
    g_free (y1);
    y1 = download_bytes (a.y, ybytes);
    /* The same bytes, uploaded at once into a filter never convolved. */
    pp_backend_upload (be, (gpointer) other.w.data, mixed, other.bytes);
    filter_conv (&other);
    expect_bytes ("the convolution of a filter half written over", other.y,
        y1, ybytes);
    filter_run_clear (&other);
  }
  filter_run_clear (&a);

  /* In graphs: a filter's convolution captured after its first run; and,
   * while that graph lives, another filter's first run (which the graph
   * does not read: on cuda, laid out in a copy of its own then) and a read
   * of it, then the graph launched again. */
  if (pp_backend_has_graphs (be)) {
    g_autoptr (GError) error = NULL;
    g_autofree guint8 *eager = NULL, *eager2 = NULL, *w2 = NULL;
    FilterRun first, second;
    gpointer graph;

    filter_run_init (&first, wt, x);
    filter_conv (&first);
    eager = download_bytes (first.y, ybytes);
    graph = pp_backend_graph_capture (be, filter_graph_func, &first, &error);
    g_assert_no_error (error);
    g_assert_nonnull (graph);
    pp_backend_fill (be, first.y, 0.0f, ybytes / sizeof (float));
    g_assert_true (pp_backend_graph_launch (be, graph, &error));
    g_assert_no_error (error);
    expect_bytes ("the graph's launch", first.y, eager, ybytes);

    filter_run_init (&second, wt2, x);
    w2 = download_bytes (second.w.data, second.bytes);
    filter_conv (&second);
    eager2 = download_bytes (second.y, ybytes);
    expect_bytes ("a filter first used beside a graph, downloaded",
        second.w.data, w2, second.bytes);
    filter_conv (&second);
    expect_bytes ("its convolution again", second.y, eager2, ybytes);
    filter_run_clear (&second);

    pp_backend_fill (be, first.y, 0.0f, ybytes / sizeof (float));
    g_assert_true (pp_backend_graph_launch (be, graph, &error));
    g_assert_no_error (error);
    expect_bytes ("the graph's launch after it", first.y, eager, ybytes);
    pp_backend_graph_free (be, graph);
    /* No graph left: read after its convolution, as uploaded. */
    expect_bytes ("the graph's filter downloaded", first.w.data, uploaded,
        first.bytes);
    filter_run_clear (&first);
  }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  be = pp_backend_default ();

  g_test_add_func ("/kernels/act-dtypes/every-op", test_every_op);
  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_autofree gchar *path = g_strdup_printf ("/kernels/act-dtypes/%s",
        cases[i].name);

    g_test_add_data_func (path, &cases[i], test_op_cases);
  }
  if (be->act_dtypes & PP_DTYPE_BIT (PP_DTYPE_F16))
    g_test_add_func ("/kernels/act-dtypes/refused", test_refused);
  g_test_add_func ("/kernels/act-dtypes/filter-reads", test_filter_reads);
  return g_test_run ();
}
