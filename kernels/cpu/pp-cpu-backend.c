/* ppdiffuse — the cpu backend: host memory as device memory, the CPU
 * kernels as its op table. */
#include "pp-backend-impl.h"
#include "pp-cpu-ops.h"
#include "pp-cpu-parallel.h"
#include "pp-error.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>

PpBackend *pp_cpu_backend_get (void);

/* Buffers start on 256 bytes, as a CUDA allocation does
 * (pp_backend_alloc): on a cache line, whole vectors for the AVX-512
 * loops, and an activation pool's blocks cut from them aligned alike. */
#define CPU_BUFFER_ALIGN 256

static gpointer
cpu_alloc (PpBackend * be, gsize bytes, GError ** error)
{
  gpointer mem = NULL;

  if (posix_memalign (&mem, CPU_BUFFER_ALIGN, bytes) != 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE,
        "out of host memory for %" G_GSIZE_FORMAT " bytes", bytes);
    return NULL;
  }
  return mem;
}

static void
cpu_free (PpBackend * be, gpointer mem)
{
  free (mem);
}

static void
cpu_copy (PpBackend * be, gpointer dst, gconstpointer src, gsize bytes)
{
  memmove (dst, src, bytes);
}

static void
cpu_fill (PpBackend * be, gpointer dst, float value, gsize n)
{
  float *p = dst;

  for (gsize i = 0; i < n; i++)
    p[i] = value;
}

static void
cpu_synchronize (PpBackend * be)
{
}

gpointer
pp_cpu_fence (PpBackend * be)
{
  return be;
}

void
pp_cpu_fence_wait (PpBackend * be, gpointer fence, gpointer stream)
{
  g_assert (fence == be);
}

void
pp_cpu_fence_free (PpBackend * be, gpointer fence)
{
  g_assert (fence == be);
}

static const PpBackendMemory cpu_memory = {
  .alloc = cpu_alloc,
  .free = cpu_free,
  .upload = cpu_copy,
  .download = cpu_copy,
  .copy = cpu_copy,
  .fill = cpu_fill,
  .synchronize = cpu_synchronize,
  .upload_weights = NULL,       /* the weights' memory map serves as is */
  .fence = pp_cpu_fence,
  .fence_wait = pp_cpu_fence_wait,
  .fence_free = pp_cpu_fence_free,
};

/* The kernels take float32: a view of another dtype is widened for the
 * call.  @v is what the op reads (the wrapper trimmed it). */
static const float *
view_floats (PpBackend * be, const char *op, const char *param, PpView v,
    PpCpuScratch use)
{
  float *wide;

  if (v.data == NULL)
    return NULL;
  switch (v.dtype) {
    case PP_DTYPE_F32:
      return v.data;
    case PP_DTYPE_F16:
    case PP_DTYPE_BF16:
      wide = pp_cpu_scratch (use, v.numel);
      pp_dtype_widen (v.data, v.dtype, wide, v.numel);
      return wide;
    default:
      pp_ops_refuse_dtype (be, op, param, v.dtype);
  }
}

/* Activations: the kernels compute in float32 on channels-first tensors,
 * so an activation of a 16-bit dtype, or a spatial one laid out channels
 * last, passes through float32 channels-first scratch for the call.  Each
 * one the op reads or writes is copied in (an output too: an op may update
 * it in place), and the ones written are copied back to their dtype
 * (rounded to nearest even) and layout when the kernel returns; a strided
 * matmul's y is its own case (cpu_matmul).  An output that is also an
 * input (a norm's y = x) gets a scratch of its own: the kernel then reads
 * one copy and writes the other, which gives what it gives in place.
 * Float32 channels-first activations reach the kernel as they are, and a
 * view that is no spatial tensor's (IN, OUT) is read in element order
 * whatever its layout says. */
#define CPU_CALL_ACTS (PP_CPU_SCRATCH_ACT_3 - PP_CPU_SCRATCH_ACT_0 + 1)

typedef struct
{
  PpBackend *be;
  const char *op;
  guint count;
  PpWidened acts[CPU_CALL_ACTS];
} CpuCall;

/* @data as float32 [n, c, hw] (@layout NHWC: it is [n, hw, c]), the
 * spatial dimensions given when @layout matters (n > 0). */
static float *
cpu_act (CpuCall * call, const char *param, gpointer data, PpDType dtype,
    gsize numel, PpLayout layout, int n, int c, int hw, gboolean written)
{
  const gboolean nhwc = n > 0 && layout == PP_LAYOUT_NHWC;
  float *wide;

  if (data == NULL || (dtype == PP_DTYPE_F32 && !nhwc))
    return data;
  if (dtype != PP_DTYPE_F32 && dtype != PP_DTYPE_F16
      && dtype != PP_DTYPE_BF16)
    pp_ops_refuse_dtype (call->be, call->op, param, dtype);
  g_assert (call->count < CPU_CALL_ACTS);
  g_assert (!nhwc || numel == (gsize) n * c * hw);
  wide = pp_cpu_scratch (PP_CPU_SCRATCH_ACT_0 + call->count, numel);
  if (!nhwc)
    pp_dtype_widen (data, dtype, wide, numel);
  else {
    const float *rows = data;

    pp_ops_note_layout_copy (call->op);
    if (dtype != PP_DTYPE_F32) {
      float *widened = pp_cpu_scratch (PP_CPU_SCRATCH_LAYOUT, numel);

      pp_dtype_widen (data, dtype, widened, numel);
      rows = widened;
    }
    pp_cpu_nlc_to_nchw (rows, n, c, hw, wide);
  }
  call->acts[call->count++] = (PpWidened) { data, dtype, numel, wide,
    written, nhwc ? PP_LAYOUT_NHWC : PP_LAYOUT_NCHW, n, c, hw };
  return wide;
}

/* Copies the call's outputs back from their scratch. */
static void
cpu_call_finish (CpuCall * call)
{
  for (guint i = 0; i < call->count; i++) {
    const PpWidened *a = &call->acts[i];
    float *rows;

    if (!a->written)
      continue;
    if (a->layout != PP_LAYOUT_NHWC) {
      pp_dtype_narrow (a->wide, a->dtype, a->data, a->numel);
      continue;
    }
    rows = a->dtype == PP_DTYPE_F32 ? a->data
        : pp_cpu_scratch (PP_CPU_SCRATCH_LAYOUT, a->numel);
    pp_cpu_nchw_to_nlc (a->wide, a->n, a->c, a->hw, rows);
    if (a->dtype != PP_DTYPE_F32)
      pp_dtype_narrow (rows, a->dtype, a->data, a->numel);
  }
}

#define CPU_CALL(name) CpuCall call = { be, #name }
#define IN(param) \
  ((const float *) cpu_act (&call, #param, (gpointer) param.data, \
      param.dtype, param.numel, param.layout, 0, 0, 0, FALSE))
#define OUT(param) \
  cpu_act (&call, #param, param.data, param.dtype, param.numel, \
      param.layout, 0, 0, 0, TRUE)
/* A spatial tensor [n, c, hw], read or written as its layout says. */
#define IN_AT(param, n, c, hw) \
  ((const float *) cpu_act (&call, #param, (gpointer) param.data, \
      param.dtype, param.numel, param.layout, (n), (c), (hw), FALSE))
#define OUT_AT(param, n, c, hw) \
  cpu_act (&call, #param, param.data, param.dtype, param.numel, \
      param.layout, (n), (c), (hw), TRUE)
#define FINISH() cpu_call_finish (&call)

/* With @residual, added over the whole output after the convolution, and
 * with @relu, the activation after that: what the ops give apart on
 * float32, byte for byte (a fused pass saves a GPU reads and writes of
 * the tensor). */
static void
cpu_conv2d (PpBackend * be, PpView x, int n, int cin, int h, int w,
    PpView weight, PpView bias, int cout, int kh, int kw, int stride,
    int pad, PpView residual, gboolean relu, PpOut y)
{
  CPU_CALL (conv2d);

  const int ho = pp_conv2d_out_size (h, kh, stride, pad);
  const int wo = pp_conv2d_out_size (w, kw, stride, pad);
  const size_t total = (size_t) n * cout * ho * wo;
  float *out = OUT_AT (y, n, cout, ho * wo);

  pp_cpu_conv2d (IN_AT (x, n, cin, h * w), n, cin, h, w,
      view_floats (be, "conv2d", "weight", weight, PP_CPU_SCRATCH_VIEW_A),
      view_floats (be, "conv2d", "bias", bias, PP_CPU_SCRATCH_VIEW_B), cout,
      kh, kw, stride, pad, out);
  if (residual.data != NULL)
    pp_cpu_add (out, IN_AT (residual, n, cout, ho * wo), total);
  if (relu)
    pp_cpu_relu (out, total);
  FINISH ();
}

/* With @silu, the activation over the whole output after the norm: what
 * the two ops give apart, byte for byte (a fused pass saves a GPU a read
 * and a write of the tensor; the CPU's norm is bound by its statistics).
 * With @shift, x + shift first, in the float32 output (the norm then runs
 * in place there): add_channel and the norm apart, byte for byte. */
static void
cpu_group_norm (PpBackend * be, PpView x, PpView shift, int n, int c, int hw,
    int groups, float eps, PpView gamma, PpView beta, gboolean silu, PpOut y)
{
  CPU_CALL (group_norm);
  float *out = OUT_AT (y, n, c, hw);
  const float *in = IN_AT (x, n, c, hw);

  if (shift.data != NULL) {
    if (out != in)
      memcpy (out, in, (size_t) n * c * hw * sizeof (float));
    pp_cpu_add_channel (out, n, c, hw, IN (shift));
    in = out;
  }
  pp_cpu_group_norm (in, n, c, hw, groups, eps,
      view_floats (be, "group_norm", "gamma", gamma, PP_CPU_SCRATCH_VIEW_A),
      view_floats (be, "group_norm", "beta", beta, PP_CPU_SCRATCH_VIEW_B),
      out);
  if (silu)
    pp_cpu_silu (out, (size_t) n * c * hw);
  FINISH ();
}

static void
cpu_layer_norm (PpBackend * be, PpView x, int rows, int dim, float eps,
    PpView gamma, PpView beta, PpOut y)
{
  CPU_CALL (layer_norm);

  pp_cpu_layer_norm (IN (x), rows, dim, eps,
      view_floats (be, "layer_norm", "gamma", gamma, PP_CPU_SCRATCH_VIEW_A),
      view_floats (be, "layer_norm", "beta", beta, PP_CPU_SCRATCH_VIEW_B),
      OUT (y));
  FINISH ();
}

static void
cpu_linear (PpBackend * be, PpView x, int rows, int in, PpView w, PpView b,
    int out, PpOut y)
{
  CPU_CALL (linear);

  pp_cpu_linear (IN (x), rows, in,
      view_floats (be, "linear", "w", w, PP_CPU_SCRATCH_VIEW_A),
      view_floats (be, "linear", "b", b, PP_CPU_SCRATCH_VIEW_B), out,
      OUT (y));
  FINISH ();
}

/* The product into scratch, then added to y: linear and add apart, byte
 * for byte on float32; a 16-bit y takes the float32 sum, rounded once. */
static void
cpu_linear_add (PpBackend * be, PpView x, int rows, int in, PpView w,
    PpView b, int out, PpOut y)
{
  CPU_CALL (linear_add);
  const size_t n = (size_t) rows * out;
  float *product = pp_cpu_scratch (PP_CPU_SCRATCH_PRODUCT, n);

  pp_cpu_linear (IN (x), rows, in,
      view_floats (be, "linear_add", "w", w, PP_CPU_SCRATCH_VIEW_A),
      view_floats (be, "linear_add", "b", b, PP_CPU_SCRATCH_VIEW_B), out,
      product);
  pp_cpu_add (OUT (y), product, n);
  FINISH ();
}

static void
cpu_attention (PpBackend * be, PpView q, PpView k, PpView v, int n, int lq,
    int lk, int heads, int head_dim, int ld_q, int ld_kv, PpDType dtype,
    PpOut out)
{
  CPU_CALL (attention);

  pp_cpu_attention (IN (q), IN (k), IN (v), n, lq, lk, heads, head_dim,
      ld_q, ld_kv, dtype, OUT (out));
  FINISH ();
}

static void
cpu_attention_causal (PpBackend * be, PpView q, PpView k, PpView v, int n,
    int l, int heads, int head_dim, PpDType dtype, PpOut out)
{
  CPU_CALL (attention_causal);

  pp_cpu_attention_causal (IN (q), IN (k), IN (v), n, l, heads, head_dim,
      dtype, OUT (out));
  FINISH ();
}

/* The element-wise ops on one tensor, in place. */
#define CPU_UNARY(name)                                                     \
  static void                                                               \
  cpu_##name (PpBackend * be, PpOut x, size_t n)                            \
  {                                                                         \
    CPU_CALL (name);                                                        \
                                                                            \
    pp_cpu_##name (OUT (x), n);                                             \
    FINISH ();                                                              \
  }
CPU_UNARY (silu)
CPU_UNARY (relu)
CPU_UNARY (tanh)
CPU_UNARY (gelu)
CPU_UNARY (quick_gelu)
#undef CPU_UNARY

static void
cpu_geglu (PpBackend * be, PpView x, int rows, int d, PpOut y)
{
  CPU_CALL (geglu);

  pp_cpu_geglu (IN (x), rows, d, OUT (y));
  FINISH ();
}

static void
cpu_upsample_nearest (PpBackend * be, PpView x, int n, int c, int h, int w,
    int factor, PpOut y)
{
  CPU_CALL (upsample_nearest);

  pp_cpu_upsample_nearest (IN_AT (x, n, c, h * w), n, c, h, w, factor,
      OUT_AT (y, n, c, h * w * factor * factor));
  FINISH ();
}

static void
cpu_interleave_phases (PpBackend * be, PpView z, int n, int c, int h, int w,
    PpOut y)
{
  CPU_CALL (interleave_phases);

  pp_cpu_interleave_phases (IN_AT (z, n, 4 * c, (h + 1) * (w + 1)), n, c, h,
      w, OUT_AT (y, n, c, 4 * h * w));
  FINISH ();
}

static void
cpu_resize_bilinear (PpBackend * be, PpView x, int c, int h, int w, PpOut y,
    int ho, int wo)
{
  CPU_CALL (resize_bilinear);

  pp_cpu_resize_bilinear (IN_AT (x, 1, c, h * w), c, h, w,
      OUT_AT (y, 1, c, ho * wo), ho, wo);
  FINISH ();
}

static void
cpu_concat_channels (PpBackend * be, PpView a, int ca, PpView b, int cb,
    int n, int hw, PpOut y)
{
  CPU_CALL (concat_channels);

  pp_cpu_concat_channels (IN_AT (a, n, ca, hw), ca, IN_AT (b, n, cb, hw),
      cb, n, hw, OUT_AT (y, n, ca + cb, hw));
  FINISH ();
}

static void
cpu_bytes_to_floats (PpBackend * be, const guint8 * x, size_t n, PpOut y)
{
  CPU_CALL (bytes_to_floats);

  pp_cpu_bytes_to_floats (x, n, OUT (y));
  FINISH ();
}

static void
cpu_floats_to_bytes (PpBackend * be, PpView x, size_t n, guint8 * y)
{
  CPU_CALL (floats_to_bytes);

  pp_cpu_floats_to_bytes (IN (x), n, y);
  FINISH ();
}

static void
cpu_add (PpBackend * be, PpOut y, PpView x, size_t n)
{
  CPU_CALL (add);

  pp_cpu_add (OUT (y), view_floats (be, "add", "x", x, PP_CPU_SCRATCH_VIEW_A),
      n);
  FINISH ();
}

static void
cpu_scale (PpBackend * be, PpOut x, size_t n, float s)
{
  CPU_CALL (scale);

  pp_cpu_scale (OUT (x), n, s);
  FINISH ();
}

static void
cpu_affine (PpBackend * be, PpOut x, size_t n, float mul, float add)
{
  CPU_CALL (affine);

  pp_cpu_affine (OUT (x), n, mul, add);
  FINISH ();
}

static void
cpu_axpby (PpBackend * be, PpOut y, float a, PpView x, float b, size_t n)
{
  CPU_CALL (axpby);

  pp_cpu_axpby (OUT (y), a, IN (x), b, n);
  FINISH ();
}

static void
cpu_lcm_step (PpBackend * be, PpOut x, PpView eps, PpView noise, size_t n,
    const PpLcmCoeffs * coeffs)
{
  CPU_CALL (lcm_step);

  pp_cpu_lcm_step (OUT (x), IN (eps), IN (noise), n, coeffs);
  FINISH ();
}

static void
cpu_timestep_embedding (PpBackend * be, float t, int dim,
    gboolean flip_sin_to_cos, float freq_shift, PpOut y)
{
  CPU_CALL (timestep_embedding);

  pp_cpu_timestep_embedding (t, dim, flip_sin_to_cos, freq_shift, OUT (y));
  FINISH ();
}

static void
cpu_nchw_to_nlc (PpBackend * be, PpView x, int n, int c, int hw, PpOut y)
{
  CPU_CALL (nchw_to_nlc);

  pp_cpu_nchw_to_nlc (IN_AT (x, n, c, hw), n, c, hw, OUT (y));
  FINISH ();
}

static void
cpu_nlc_to_nchw (PpBackend * be, PpView x, int n, int c, int hw, PpOut y)
{
  CPU_CALL (nlc_to_nchw);

  pp_cpu_nlc_to_nchw (IN (x), n, c, hw, OUT_AT (y, n, c, hw));
  FINISH ();
}

static void
cpu_add_channel (PpBackend * be, PpOut x, int n, int c, int hw, PpView v)
{
  CPU_CALL (add_channel);

  pp_cpu_add_channel (OUT_AT (x, n, c, hw), n, c, hw,
      view_floats (be, "add_channel", "v", v, PP_CPU_SCRATCH_VIEW_A));
  FINISH ();
}

/* A 16-bit y: the m × n values the op writes, widened into a dense
 * scratch and rounded back into their places.  Never its whole strided
 * span: the elements between the rows are other callers' (a row range of
 * a transformer block writes its columns of rows that other ranges write
 * at the same time). */
static void
cpu_matmul (PpBackend * be, gboolean trans_a, gboolean trans_b, int m,
    int n, int k, PpView a, int lda, PpView b, int ldb, gboolean accumulate,
    PpOut y, int ldy)
{
  const float *fa = view_floats (be, "matmul", "a", a, PP_CPU_SCRATCH_VIEW_A);
  const float *fb = view_floats (be, "matmul", "b", b, PP_CPU_SCRATCH_VIEW_B);
  guint16 *narrow = y.data;
  float *wide;

  if (y.dtype == PP_DTYPE_F32) {
    pp_cpu_matmul (trans_a, trans_b, m, n, k, fa, lda, fb, ldb, accumulate,
        y.data, ldy);
    return;
  }
  if (y.dtype != PP_DTYPE_F16 && y.dtype != PP_DTYPE_BF16)
    pp_ops_refuse_dtype (be, "matmul", "y", y.dtype);
  wide = pp_cpu_scratch (PP_CPU_SCRATCH_ACT_0, (size_t) m * n);
  for (int r = 0; r < m && accumulate; r++)
    pp_dtype_widen (narrow + (gsize) r * ldy, y.dtype, wide + (gsize) r * n,
        n);
  pp_cpu_matmul (trans_a, trans_b, m, n, k, fa, lda, fb, ldb, accumulate,
      wide, n);
  for (int r = 0; r < m; r++)
    pp_dtype_narrow (wide + (gsize) r * n, y.dtype, narrow + (gsize) r * ldy,
        n);
}

/* The feature bank's ops: their own rows are float32 (a bank's, its
 * norms and products); only bank_fuse's y is an activation of any dtype. */
static const float *
f32_floats (PpBackend * be, const char *op, const char *param, PpView v)
{
  if (v.dtype != PP_DTYPE_F32)
    pp_ops_refuse_dtype (be, op, param, v.dtype);
  return v.data;
}

#define F32_IN(op, param) f32_floats (be, op, #param, param)
#define F32_OUT(op, param) \
  ((float *) f32_floats (be, op, #param, pp_out_as_view (param)))

static void
cpu_row_norms (PpBackend * be, PpView x, int rows, int c, PpOut norms)
{
  pp_cpu_row_norms (F32_IN ("row_norms", x), rows, c,
      F32_OUT ("row_norms", norms));
}

static void
cpu_bank_fuse (PpBackend * be, PpView sim, int rows, int m, int c,
    PpView y_norms, PpView bank_norms, PpView bank, double threshold,
    double strength, PpOut y, PpOut fused)
{
  CPU_CALL (bank_fuse);

  pp_cpu_bank_fuse (F32_IN ("bank_fuse", sim), rows, m, c,
      F32_IN ("bank_fuse", y_norms), F32_IN ("bank_fuse", bank_norms),
      F32_IN ("bank_fuse", bank), threshold, strength, OUT (y),
      F32_OUT ("bank_fuse", fused));
  FINISH ();
}

static void
cpu_bank_merge_dest (PpBackend * be, PpView sim, int sources, int first,
    int n, int r, PpView norms, PpOut dest)
{
  g_return_if_fail (r >= 0 && 2 * (gint64) r <= n);
  pp_cpu_bank_merge_dest (F32_IN ("bank_merge_dest", sim), sources, first,
      n, r, F32_IN ("bank_merge_dest", norms),
      F32_OUT ("bank_merge_dest", dest));
}

static void
cpu_bank_merge (PpBackend * be, PpView x, int n, int r, int c, PpView dest,
    PpOut y)
{
  g_return_if_fail (r >= 0 && 2 * (gint64) r <= n);
  pp_cpu_bank_merge (F32_IN ("bank_merge", x), n, r, c,
      F32_IN ("bank_merge", dest), F32_OUT ("bank_merge", y));
}

#undef F32_IN
#undef F32_OUT
#undef CPU_CALL
#undef IN
#undef OUT
#undef FINISH

static void
cpu_for_rows (PpBackend * be, int rows, PpRowsFunc func, gpointer data)
{
  pp_cpu_for_rows (rows, PP_CPU_ROW_RANGE_MIN, func, data);
}

static const PpOps cpu_ops = {
#define CPU_ENTRY(name, NAME, params, args, flops, views) \
  .name = cpu_##name,
  PP_OPS_LIST (CPU_ENTRY)
#undef CPU_ENTRY
  .for_rows = cpu_for_rows,
};

/* What the CPU kernels run on: cores, vector kernels, team size, and
 * OpenBLAS's kernels. */
gchar *
pp_cpu_describe (void)
{
  return g_strdup_printf ("CPU, %u cores, %s kernels, %u threads, "
      "OpenBLAS %s", g_get_num_processors (),
      pp_cpu_avx512_kernels () ? "AVX-512" : "portable",
      pp_cpu_parallel_threads (), openblas_get_corename ());
}

PpBackend *
pp_cpu_backend_get (void)
{
  static PpBackend cpu = {
    .name = "cpu",
    .default_weight_dtype = PP_DTYPE_F32,
    .samples_apart = TRUE,
    .view_dtypes = PP_DTYPE_BIT (PP_DTYPE_F32) | PP_DTYPE_BIT (PP_DTYPE_F16)
        | PP_DTYPE_BIT (PP_DTYPE_BF16),
    .act_dtypes = PP_DTYPE_BIT (PP_DTYPE_F32) | PP_DTYPE_BIT (PP_DTYPE_F16)
        | PP_DTYPE_BIT (PP_DTYPE_BF16),
    .memory = &cpu_memory,
    .ops = &cpu_ops,
  };
  static gsize ready;

  if (g_once_init_enter (&ready)) {
    cpu.device = pp_cpu_describe ();
    g_once_init_leave (&ready, 1);
  }
  return &cpu;
}

/* The kernels' op table (views and activations dispatched on their dtype),
 * for the cpu-strict backend to wrap. */
const PpOps *
pp_cpu_ops (void)
{
  return &cpu_ops;
}
