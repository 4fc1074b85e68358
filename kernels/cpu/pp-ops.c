/* ppdiffuse — the CPU op table and the pp_* wrappers that call through it. */
#include "pp-ops.h"

#include <stdatomic.h>
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
};

/* The one backend the wrappers use until a second table exists. */
#define PP_OPS_ACTIVE (&pp_ops_cpu)

/* Matrix FLOPs done through the wrappers (benchmarks read them). */
static atomic_ullong flop_count;

static void
count_flops (gint64 flops)
{
  atomic_fetch_add_explicit (&flop_count, (unsigned long long) flops,
      memory_order_relaxed);
}

guint64
pp_ops_flop_count (void)
{
  return atomic_load (&flop_count);
}

void
pp_ops_reset_flop_count (void)
{
  atomic_store (&flop_count, 0);
}

void
pp_conv2d (const float *x, int n, int cin, int h, int w, const float *weight,
    const float *bias, int cout, int kh, int kw, int stride, int pad,
    float *y)
{
  gint64 ho = pp_conv2d_out_size (h, kh, stride, pad);
  gint64 wo = pp_conv2d_out_size (w, kw, stride, pad);

  count_flops (2 * (gint64) n * cout * cin * kh * kw * ho * wo);
  PP_OPS_ACTIVE->conv2d (x, n, cin, h, w, weight, bias, cout, kh, kw, stride,
      pad, y);
}

void
pp_group_norm (const float *x, int n, int c, int hw, int groups, float eps,
    const float *gamma, const float *beta, float *y)
{
  PP_OPS_ACTIVE->group_norm (x, n, c, hw, groups, eps, gamma, beta, y);
}

void
pp_layer_norm (const float *x, int rows, int dim, float eps,
    const float *gamma, const float *beta, float *y)
{
  PP_OPS_ACTIVE->layer_norm (x, rows, dim, eps, gamma, beta, y);
}

void
pp_linear (const float *x, int rows, int in, const float *w, const float *b,
    int out, float *y)
{
  count_flops (2 * (gint64) rows * in * out);
  PP_OPS_ACTIVE->linear (x, rows, in, w, b, out, y);
}

void
pp_attention (const float *q, const float *k, const float *v, int n, int lq,
    int lk, int heads, int head_dim, float *out)
{
  /* q·kᵀ and (scores)·v */
  count_flops (4 * (gint64) n * heads * lq * lk * head_dim);
  PP_OPS_ACTIVE->attention (q, k, v, n, lq, lk, heads, head_dim, out);
}

void
pp_silu (float *x, size_t n)
{
  PP_OPS_ACTIVE->silu (x, n);
}

void
pp_relu (float *x, size_t n)
{
  PP_OPS_ACTIVE->relu (x, n);
}

void
pp_tanh (float *x, size_t n)
{
  PP_OPS_ACTIVE->tanh (x, n);
}

void
pp_gelu (float *x, size_t n)
{
  PP_OPS_ACTIVE->gelu (x, n);
}

void
pp_geglu (const float *x, int rows, int d, float *y)
{
  PP_OPS_ACTIVE->geglu (x, rows, d, y);
}

void
pp_upsample_nearest (const float *x, int n, int c, int h, int w, int factor,
    float *y)
{
  PP_OPS_ACTIVE->upsample_nearest (x, n, c, h, w, factor, y);
}

void
pp_concat_channels (const float *a, int ca, const float *b, int cb, int n,
    int hw, float *y)
{
  PP_OPS_ACTIVE->concat_channels (a, ca, b, cb, n, hw, y);
}

void
pp_add (float *y, const float *x, size_t n)
{
  PP_OPS_ACTIVE->add (y, x, n);
}

void
pp_scale (float *x, size_t n, float s)
{
  PP_OPS_ACTIVE->scale (x, n, s);
}

void
pp_timestep_embedding (float t, int dim, gboolean flip_sin_to_cos,
    float freq_shift, float *y)
{
  PP_OPS_ACTIVE->timestep_embedding (t, dim, flip_sin_to_cos, freq_shift, y);
}

void
pp_nchw_to_nlc (const float *x, int n, int c, int hw, float *y)
{
  PP_OPS_ACTIVE->nchw_to_nlc (x, n, c, hw, y);
}

void
pp_nlc_to_nchw (const float *x, int n, int c, int hw, float *y)
{
  PP_OPS_ACTIVE->nlc_to_nchw (x, n, c, hw, y);
}

void
pp_add_channel (float *x, int n, int c, int hw, const float *v)
{
  PP_OPS_ACTIVE->add_channel (x, n, c, hw, v);
}
