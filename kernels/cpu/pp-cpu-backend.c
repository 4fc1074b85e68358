/* ppdiffuse — the cpu backend: host memory as device memory, the CPU
 * kernels as its op table. */
#include "pp-backend-impl.h"
#include "pp-cpu-ops.h"
#include "pp-cpu-parallel.h"
#include "pp-dtype-math.h"
#include "pp-error.h"

#include <stdlib.h>
#include <string.h>

PpBackend *pp_cpu_backend_get (void);

/* Buffers start on a cache line: whole vectors for the AVX-512 loops. */
#define CPU_BUFFER_ALIGN 64

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

static const PpBackendMemory cpu_memory = {
  .alloc = cpu_alloc,
  .free = cpu_free,
  .upload = cpu_copy,
  .download = cpu_copy,
  .copy = cpu_copy,
  .fill = cpu_fill,
  .synchronize = cpu_synchronize,
  .upload_weights = NULL,       /* the weights' memory map serves as is */
};

/* The kernels take float32: a view of another dtype is widened for the
 * call.  @v is what the op reads (the wrapper trimmed it). */
static const float *
view_floats (PpBackend * be, const char *op, const char *param, PpView v,
    PpCpuScratch use)
{
  const guint16 *narrow = v.data;
  float *wide;

  if (v.data == NULL)
    return NULL;
  switch (v.dtype) {
    case PP_DTYPE_F32:
      return v.data;
    case PP_DTYPE_F16:
      wide = pp_cpu_scratch (use, v.numel);
      for (gsize i = 0; i < v.numel; i++)
        wide[i] = pp_f16_to_f32 (narrow[i]);
      return wide;
    case PP_DTYPE_BF16:
      wide = pp_cpu_scratch (use, v.numel);
      for (gsize i = 0; i < v.numel; i++)
        wide[i] = pp_bf16_to_f32 (narrow[i]);
      return wide;
    default:
      pp_ops_refuse_dtype (be, op, param, v.dtype);
  }
}

/* The ops that read views (VIEWS in PP_OPS_LIST_SPLIT). */

static void
cpu_conv2d (PpBackend * be, const float *x, int n, int cin, int h, int w,
    PpView weight, PpView bias, int cout, int kh, int kw, int stride,
    int pad, float *y)
{
  pp_cpu_conv2d (x, n, cin, h, w,
      view_floats (be, "conv2d", "weight", weight, PP_CPU_SCRATCH_VIEW_A),
      view_floats (be, "conv2d", "bias", bias, PP_CPU_SCRATCH_VIEW_B), cout,
      kh, kw, stride, pad, y);
}

/* With @silu, the activation over the whole output after the norm: what
 * the two ops give apart, byte for byte (a fused pass saves a GPU a read
 * and a write of the tensor; the CPU's norm is bound by its statistics). */
static void
cpu_group_norm (PpBackend * be, const float *x, int n, int c, int hw,
    int groups, float eps, PpView gamma, PpView beta, gboolean silu,
    float *y)
{
  pp_cpu_group_norm (x, n, c, hw, groups, eps,
      view_floats (be, "group_norm", "gamma", gamma, PP_CPU_SCRATCH_VIEW_A),
      view_floats (be, "group_norm", "beta", beta, PP_CPU_SCRATCH_VIEW_B),
      y);
  if (silu)
    pp_cpu_silu (y, (size_t) n * c * hw);
}

static void
cpu_layer_norm (PpBackend * be, const float *x, int rows, int dim,
    float eps, PpView gamma, PpView beta, float *y)
{
  pp_cpu_layer_norm (x, rows, dim, eps,
      view_floats (be, "layer_norm", "gamma", gamma, PP_CPU_SCRATCH_VIEW_A),
      view_floats (be, "layer_norm", "beta", beta, PP_CPU_SCRATCH_VIEW_B),
      y);
}

static void
cpu_linear (PpBackend * be, const float *x, int rows, int in, PpView w,
    PpView b, int out, float *y)
{
  pp_cpu_linear (x, rows, in,
      view_floats (be, "linear", "w", w, PP_CPU_SCRATCH_VIEW_A),
      view_floats (be, "linear", "b", b, PP_CPU_SCRATCH_VIEW_B), out, y);
}

static void
cpu_add (PpBackend * be, float *y, PpView x, size_t n)
{
  pp_cpu_add (y, view_floats (be, "add", "x", x, PP_CPU_SCRATCH_VIEW_A), n);
}

static void
cpu_add_channel (PpBackend * be, float *x, int n, int c, int hw, PpView v)
{
  pp_cpu_add_channel (x, n, c, hw,
      view_floats (be, "add_channel", "v", v, PP_CPU_SCRATCH_VIEW_A));
}

static void
cpu_matmul (PpBackend * be, gboolean trans_a, gboolean trans_b, int m,
    int n, int k, PpView a, int lda, PpView b, int ldb, gboolean accumulate,
    float *y, int ldy)
{
  pp_cpu_matmul (trans_a, trans_b, m, n, k,
      view_floats (be, "matmul", "a", a, PP_CPU_SCRATCH_VIEW_A), lda,
      view_floats (be, "matmul", "b", b, PP_CPU_SCRATCH_VIEW_B), ldb,
      accumulate, y, ldy);
}

/* The others: straight to their kernels. */
#define CPU_OP(name, NAME, params, args, flops, views)                      \
  static void                                                               \
  cpu_##name (PpBackend * be, PP_OPS_UNPAREN params)                        \
  {                                                                         \
    pp_cpu_##name args;                                                     \
  }
#define CPU_OP_WRITTEN(...)
PP_OPS_LIST_SPLIT (CPU_OP, CPU_OP_WRITTEN)
#undef CPU_OP
#undef CPU_OP_WRITTEN

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

/* What the CPU kernels run on: cores, vector kernels, team size. */
gchar *
pp_cpu_describe (void)
{
  return g_strdup_printf ("CPU, %u cores, %s kernels, %u threads",
      g_get_num_processors (),
      pp_cpu_avx512_kernels () ? "AVX-512" : "portable",
      pp_cpu_parallel_threads ());
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

/* The kernels' op table (views dispatched on their dtype), for the
 * cpu-strict backend to wrap. */
const PpOps *
pp_cpu_ops (void)
{
  return &cpu_ops;
}
