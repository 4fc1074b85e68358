/* ppdiffuse — the CPU op table and the pp_* wrappers that call through it. */
#include "pp-ops.h"

#include <stdatomic.h>
#include <stdbool.h>
#include "pp-cpu-ops.h"

const PpOps pp_ops_cpu = {
  .name = "cpu",
  .conv2d = pp_cpu_conv2d,
  .group_norm = pp_cpu_group_norm,
  .layer_norm = pp_cpu_layer_norm,
  .linear = pp_cpu_linear,
  .attention = pp_cpu_attention,
  .silu = pp_cpu_silu,
  .relu = pp_cpu_relu,
  .tanh = pp_cpu_tanh,
  .gelu = pp_cpu_gelu,
  .geglu = pp_cpu_geglu,
  .upsample_nearest = pp_cpu_upsample_nearest,
  .concat_channels = pp_cpu_concat_channels,
  .add = pp_cpu_add,
  .scale = pp_cpu_scale,
  .timestep_embedding = pp_cpu_timestep_embedding,
  .nchw_to_nlc = pp_cpu_nchw_to_nlc,
  .nlc_to_nchw = pp_cpu_nlc_to_nchw,
  .add_channel = pp_cpu_add_channel,
  .matmul = pp_cpu_matmul,
  .for_rows = pp_cpu_for_rows,
};

/* The one backend the wrappers use until a second table exists. */
#define PP_OPS_ACTIVE (&pp_ops_cpu)

/* Per-op counters: matrix FLOPs always (benchmarks read them), calls and
 * time only while profiling is on, so that the default costs one relaxed
 * load per call. */
typedef struct
{
  atomic_ullong calls, ns, flops;
} OpCounters;

static OpCounters counters[PP_OP_COUNT];
static atomic_bool profiling;

static const char *const op_names[PP_OP_COUNT] = {
  [PP_OP_CONV2D] = "conv2d",
  [PP_OP_GROUP_NORM] = "group_norm",
  [PP_OP_LAYER_NORM] = "layer_norm",
  [PP_OP_LINEAR] = "linear",
  [PP_OP_ATTENTION] = "attention",
  [PP_OP_ACTIVATION] = "activation",
  [PP_OP_GEGLU] = "geglu",
  [PP_OP_UPSAMPLE] = "upsample_nearest",
  [PP_OP_CONCAT] = "concat_channels",
  [PP_OP_ADD] = "add",
  [PP_OP_SCALE] = "scale",
  [PP_OP_TIMESTEP_EMBEDDING] = "timestep_embedding",
  [PP_OP_LAYOUT] = "layout",
  [PP_OP_ADD_CHANNEL] = "add_channel",
  [PP_OP_MATMUL] = "matmul",
  [PP_OP_FOR_ROWS] = "for_rows",
};

/* Set on a thread while it runs a range of pp_for_rows. */
static __thread gboolean in_rows;

/* Starts timing one call of an op; 0 when profiling is off. */
static gint64
op_begin (void)
{
  return atomic_load_explicit (&profiling, memory_order_relaxed) && !in_rows
      ? g_get_monotonic_time () * 1000 : 0;
}

static void
op_end (PpOp op, gint64 start_ns, gint64 flops)
{
  OpCounters *c = &counters[in_rows ? PP_OP_FOR_ROWS : op];

  if (flops)
    atomic_fetch_add_explicit (&c->flops, (unsigned long long) flops,
        memory_order_relaxed);
  if (start_ns == 0)
    return;
  atomic_fetch_add_explicit (&c->calls, 1, memory_order_relaxed);
  atomic_fetch_add_explicit (&c->ns,
      (unsigned long long) (g_get_monotonic_time () * 1000 - start_ns),
      memory_order_relaxed);
}

guint64
pp_ops_flop_count (void)
{
  guint64 total = 0;

  for (int op = 0; op < PP_OP_COUNT; op++)
    total += atomic_load (&counters[op].flops);
  return total;
}

void
pp_ops_reset_flop_count (void)
{
  for (int op = 0; op < PP_OP_COUNT; op++) {
    atomic_store (&counters[op].calls, 0);
    atomic_store (&counters[op].ns, 0);
    atomic_store (&counters[op].flops, 0);
  }
}

void
pp_ops_set_profiling (gboolean on)
{
  atomic_store (&profiling, on != FALSE);
}

void
pp_ops_get_profile (PpOp op, PpOpProfile * out)
{
  g_return_if_fail (op < PP_OP_COUNT && out != NULL);

  out->name = op_names[op];
  out->calls = atomic_load (&counters[op].calls);
  out->seconds = atomic_load (&counters[op].ns) / 1e9;
  out->flops = atomic_load (&counters[op].flops);
}

void
pp_conv2d (const float *x, int n, int cin, int h, int w, const float *weight,
    const float *bias, int cout, int kh, int kw, int stride, int pad,
    float *y)
{
  gint64 ho = pp_conv2d_out_size (h, kh, stride, pad);
  gint64 wo = pp_conv2d_out_size (w, kw, stride, pad);
  const gint64 start = op_begin ();

  PP_OPS_ACTIVE->conv2d (x, n, cin, h, w, weight, bias, cout, kh, kw, stride,
      pad, y);
  op_end (PP_OP_CONV2D, start, 2 * (gint64) n * cout * cin * kh * kw * ho * wo);
}

void
pp_group_norm (const float *x, int n, int c, int hw, int groups, float eps,
    const float *gamma, const float *beta, float *y)
{
  const gint64 start = op_begin ();

  PP_OPS_ACTIVE->group_norm (x, n, c, hw, groups, eps, gamma, beta, y);
  op_end (PP_OP_GROUP_NORM, start, 0);
}

void
pp_layer_norm (const float *x, int rows, int dim, float eps,
    const float *gamma, const float *beta, float *y)
{
  const gint64 start = op_begin ();

  PP_OPS_ACTIVE->layer_norm (x, rows, dim, eps, gamma, beta, y);
  op_end (PP_OP_LAYER_NORM, start, 0);
}

void
pp_linear (const float *x, int rows, int in, const float *w, const float *b,
    int out, float *y)
{
  const gint64 start = op_begin ();

  PP_OPS_ACTIVE->linear (x, rows, in, w, b, out, y);
  op_end (PP_OP_LINEAR, start, 2 * (gint64) rows * in * out);
}

void
pp_attention (const float *q, const float *k, const float *v, int n, int lq,
    int lk, int heads, int head_dim, float *out)
{
  const gint64 start = op_begin ();

  PP_OPS_ACTIVE->attention (q, k, v, n, lq, lk, heads, head_dim, out);
  /* q·kᵀ and (scores)·v */
  op_end (PP_OP_ATTENTION, start, 4 * (gint64) n * heads * lq * lk * head_dim);
}

void
pp_silu (float *x, size_t n)
{
  const gint64 start = op_begin ();

  PP_OPS_ACTIVE->silu (x, n);
  op_end (PP_OP_ACTIVATION, start, 0);
}

void
pp_relu (float *x, size_t n)
{
  const gint64 start = op_begin ();

  PP_OPS_ACTIVE->relu (x, n);
  op_end (PP_OP_ACTIVATION, start, 0);
}

void
pp_tanh (float *x, size_t n)
{
  const gint64 start = op_begin ();

  PP_OPS_ACTIVE->tanh (x, n);
  op_end (PP_OP_ACTIVATION, start, 0);
}

void
pp_gelu (float *x, size_t n)
{
  const gint64 start = op_begin ();

  PP_OPS_ACTIVE->gelu (x, n);
  op_end (PP_OP_ACTIVATION, start, 0);
}

void
pp_geglu (const float *x, int rows, int d, float *y)
{
  const gint64 start = op_begin ();

  PP_OPS_ACTIVE->geglu (x, rows, d, y);
  op_end (PP_OP_GEGLU, start, 0);
}

void
pp_upsample_nearest (const float *x, int n, int c, int h, int w, int factor,
    float *y)
{
  const gint64 start = op_begin ();

  PP_OPS_ACTIVE->upsample_nearest (x, n, c, h, w, factor, y);
  op_end (PP_OP_UPSAMPLE, start, 0);
}

void
pp_concat_channels (const float *a, int ca, const float *b, int cb, int n,
    int hw, float *y)
{
  const gint64 start = op_begin ();

  PP_OPS_ACTIVE->concat_channels (a, ca, b, cb, n, hw, y);
  op_end (PP_OP_CONCAT, start, 0);
}

void
pp_add (float *y, const float *x, size_t n)
{
  const gint64 start = op_begin ();

  PP_OPS_ACTIVE->add (y, x, n);
  op_end (PP_OP_ADD, start, 0);
}

void
pp_scale (float *x, size_t n, float s)
{
  const gint64 start = op_begin ();

  PP_OPS_ACTIVE->scale (x, n, s);
  op_end (PP_OP_SCALE, start, 0);
}

void
pp_timestep_embedding (float t, int dim, gboolean flip_sin_to_cos,
    float freq_shift, float *y)
{
  const gint64 start = op_begin ();

  PP_OPS_ACTIVE->timestep_embedding (t, dim, flip_sin_to_cos, freq_shift, y);
  op_end (PP_OP_TIMESTEP_EMBEDDING, start, 0);
}

void
pp_nchw_to_nlc (const float *x, int n, int c, int hw, float *y)
{
  const gint64 start = op_begin ();

  PP_OPS_ACTIVE->nchw_to_nlc (x, n, c, hw, y);
  op_end (PP_OP_LAYOUT, start, 0);
}

void
pp_nlc_to_nchw (const float *x, int n, int c, int hw, float *y)
{
  const gint64 start = op_begin ();

  PP_OPS_ACTIVE->nlc_to_nchw (x, n, c, hw, y);
  op_end (PP_OP_LAYOUT, start, 0);
}

void
pp_add_channel (float *x, int n, int c, int hw, const float *v)
{
  const gint64 start = op_begin ();

  PP_OPS_ACTIVE->add_channel (x, n, c, hw, v);
  op_end (PP_OP_ADD_CHANNEL, start, 0);
}

void
pp_matmul (gboolean trans_a, gboolean trans_b, int m, int n, int k,
    const float *a, int lda, const float *b, int ldb, gboolean accumulate,
    float *y, int ldy)
{
  const gint64 start = op_begin ();

  PP_OPS_ACTIVE->matmul (trans_a, trans_b, m, n, k, a, lda, b, ldb,
      accumulate, y, ldy);
  op_end (PP_OP_MATMUL, start, 2 * (gint64) m * n * k);
}

typedef struct
{
  PpRowsFunc func;
  gpointer data;
} RowsCall;

static void
rows_range (int begin, int end, gpointer data)
{
  const RowsCall *call = data;
  const gboolean outer = in_rows;

  in_rows = TRUE;
  call->func (begin, end, call->data);
  in_rows = outer;
}

void
pp_for_rows (int rows, int min_rows, PpRowsFunc func, gpointer data)
{
  const gint64 start = op_begin ();
  RowsCall call = { func, data };

  PP_OPS_ACTIVE->for_rows (rows, min_rows, rows_range, &call);
  op_end (PP_OP_FOR_ROWS, start, 0);
}
