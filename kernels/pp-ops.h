/* ppdiffuse — tensor ops of the diffusion models (F32, contiguous,
 * row-major).
 *
 * Every op is a function pointer in a PpOps table, one table per backend;
 * pp_ops_cpu (kernels/cpu/) is the only one so far.  The plain pp_* wrappers
 * call through pp_ops_cpu, so model code does not change when a second
 * backend arrives.
 *
 * Ops do not validate shapes against each other (they cannot: they get bare
 * pointers); callers check shapes and report errors.  Preconditions that an
 * op can check itself (positive sizes, channels divisible by groups) are
 * g_return_if_fail()s.  Outputs never alias inputs unless an op says so.
 * Ops are thread-safe: none keeps state between calls. */
#pragma once

#include <glib.h>
#include <stddef.h>

G_BEGIN_DECLS

/* pp_attention processes at most this many queries of one head at a time,
 * so its score buffer is PP_ATTENTION_QUERY_BLOCK × lk floats. */
#define PP_ATTENTION_QUERY_BLOCK 256

/* pp_conv2d's im2col buffer holds at most this many floats (8 MiB; always
 * at least one output row): a larger convolution is done in bands of
 * output rows.  Measured best of 1-16 MiB: the band stays in cache between
 * im2col and the GEMM that reads it. */
#define PP_CONV2D_COL_MAX_FLOATS (1 << 21)

/* Processes rows [begin, end) of a row-parallel region (pp_for_rows). */
typedef void (*PpRowsFunc) (int begin, int end, gpointer data);

typedef struct
{
  const char *name;

  /* x [n,cin,h,w], weight [cout,cin,kh,kw], bias [cout] or NULL,
   * y [n,cout,ho,wo] with ho = (h + 2 pad - kh) / stride + 1 (same for wo).
   * Zero padding. */
  void (*conv2d) (const float *x, int n, int cin, int h, int w,
      const float *weight, const float *bias, int cout, int kh, int kw,
      int stride, int pad, float *y);
  /* x, y [n,c,hw]; statistics per (sample, group of c/groups channels);
   * gamma, beta [c] (NULL: 1 and 0).  y may equal x. */
  void (*group_norm) (const float *x, int n, int c, int hw, int groups,
      float eps, const float *gamma, const float *beta, float *y);
  /* x, y [rows,dim]; gamma, beta [dim] (NULL: 1 and 0).  y may equal x. */
  void (*layer_norm) (const float *x, int rows, int dim, float eps,
      const float *gamma, const float *beta, float *y);
  /* y [rows,out] = x [rows,in] · wᵀ + b, w [out,in] (PyTorch layout),
   * b [out] or NULL. */
  void (*linear) (const float *x, int rows, int in, const float *w,
      const float *b, int out, float *y);
  /* q [n,lq,heads·head_dim], k, v [n,lk,heads·head_dim], out like q:
   * softmax(q kᵀ / √head_dim) v per sample and head. */
  void (*attention) (const float *q, const float *k, const float *v, int n,
      int lq, int lk, int heads, int head_dim, float *out);
  /* In place, n elements. */
  void (*silu) (float *x, size_t n);
  void (*relu) (float *x, size_t n);
  void (*tanh) (float *x, size_t n);
  void (*gelu) (float *x, size_t n);
  /* x [rows,2d]: per row d values then d gates; y [rows,d] =
   * value · gelu(gate). */
  void (*geglu) (const float *x, int rows, int d, float *y);
  /* x [n,c,h,w] → y [n,c,h·factor,w·factor], nearest neighbour. */
  void (*upsample_nearest) (const float *x, int n, int c, int h, int w,
      int factor, float *y);
  /* a [n,ca,hw], b [n,cb,hw] → y [n,ca+cb,hw]. */
  void (*concat_channels) (const float *a, int ca, const float *b, int cb,
      int n, int hw, float *y);
  /* y += x, n elements. */
  void (*add) (float *y, const float *x, size_t n);
  /* x *= s, n elements. */
  void (*scale) (float *x, size_t n, float s);
  /* y [dim]: half = dim/2 frequencies f_k = exp(-ln(10000) k / (half -
   * freq_shift)); y = [sin(t f), cos(t f)], or [cos, sin] when
   * flip_sin_to_cos; an odd dim gets a trailing 0. */
  void (*timestep_embedding) (float t, int dim, gboolean flip_sin_to_cos,
      float freq_shift, float *y);
  /* x [n,c,hw] → y [n,hw,c]. */
  void (*nchw_to_nlc) (const float *x, int n, int c, int hw, float *y);
  /* x [n,hw,c] → y [n,c,hw]. */
  void (*nlc_to_nchw) (const float *x, int n, int c, int hw, float *y);
  /* x [n,c,hw] += v [n,c] broadcast over hw (a ResNet's time embedding). */
  void (*add_channel) (float *x, int n, int c, int hw, const float *v);
  /* y [m,n] (row stride ldy) = op(a) · op(b), plus y itself when
   * accumulate.  op(a) [m,k] is a [m,k] (row stride lda), or with trans_a
   * the transpose of a [k,m]; op(b) [k,n] likewise.  Strided operands let a
   * model multiply slices of NCHW tensors without a transpose. */
  void (*matmul) (gboolean trans_a, gboolean trans_b, int m, int n, int k,
      const float *a, int lda, const float *b, int ldb, gboolean accumulate,
      float *y, int ldy);
  /* Calls @func on disjoint ranges covering [0, rows): in parallel, each
   * range then being at least min_rows long and the ops @func calls
   * running on its own thread, or as one range when rows is too few to
   * split.  For chains of row-wise ops whose intermediates then stay in
   * a core's cache. */
  void (*for_rows) (int rows, int min_rows, PpRowsFunc func, gpointer data);
} PpOps;

extern const PpOps pp_ops_cpu;

/* FLOPs of the convolutions, linears and attention matmuls run so far
 * (2 per multiply-add), for benchmarks.  The reset clears the profile too. */
guint64 pp_ops_flop_count (void);
void pp_ops_reset_flop_count (void);

/* The ops as the profile groups them (the activations share one entry, so
 * do the two layout transposes). */
typedef enum
{
  PP_OP_CONV2D,
  PP_OP_GROUP_NORM,
  PP_OP_LAYER_NORM,
  PP_OP_LINEAR,
  PP_OP_ATTENTION,
  PP_OP_ACTIVATION,
  PP_OP_GEGLU,
  PP_OP_UPSAMPLE,
  PP_OP_CONCAT,
  PP_OP_ADD,
  PP_OP_SCALE,
  PP_OP_TIMESTEP_EMBEDDING,
  PP_OP_LAYOUT,
  PP_OP_ADD_CHANNEL,
  PP_OP_MATMUL,
  PP_OP_FOR_ROWS,
  PP_OP_COUNT
} PpOp;

typedef struct
{
  const char *name;
  guint64 calls;
  double seconds;               /* wall time inside the op */
  guint64 flops;
} PpOpProfile;

/* While on, every op call through the pp_* wrappers adds its wall time to
 * the op's entry (off by default: it reads the clock twice a call).  Ops
 * called inside pp_for_rows count toward the for_rows entry instead (its
 * wall time, their FLOPs): on several threads at once, their own times
 * would add up to more than the wall time. */
void pp_ops_set_profiling (gboolean on);
void pp_ops_get_profile (PpOp op, PpOpProfile * out);

void pp_conv2d (const float *x, int n, int cin, int h, int w,
    const float *weight, const float *bias, int cout, int kh, int kw,
    int stride, int pad, float *y);
void pp_group_norm (const float *x, int n, int c, int hw, int groups,
    float eps, const float *gamma, const float *beta, float *y);
void pp_layer_norm (const float *x, int rows, int dim, float eps,
    const float *gamma, const float *beta, float *y);
void pp_linear (const float *x, int rows, int in, const float *w,
    const float *b, int out, float *y);
void pp_attention (const float *q, const float *k, const float *v, int n,
    int lq, int lk, int heads, int head_dim, float *out);
void pp_silu (float *x, size_t n);
void pp_relu (float *x, size_t n);
void pp_tanh (float *x, size_t n);
void pp_gelu (float *x, size_t n);
void pp_geglu (const float *x, int rows, int d, float *y);
void pp_upsample_nearest (const float *x, int n, int c, int h, int w,
    int factor, float *y);
void pp_concat_channels (const float *a, int ca, const float *b, int cb,
    int n, int hw, float *y);
void pp_add (float *y, const float *x, size_t n);
void pp_scale (float *x, size_t n, float s);
void pp_timestep_embedding (float t, int dim, gboolean flip_sin_to_cos,
    float freq_shift, float *y);
void pp_nchw_to_nlc (const float *x, int n, int c, int hw, float *y);
void pp_nlc_to_nchw (const float *x, int n, int c, int hw, float *y);
void pp_add_channel (float *x, int n, int c, int hw, const float *v);
void pp_matmul (gboolean trans_a, gboolean trans_b, int m, int n, int k,
    const float *a, int lda, const float *b, int ldb, gboolean accumulate,
    float *y, int ldy);
void pp_for_rows (int rows, int min_rows, PpRowsFunc func, gpointer data);

/* Output size of a convolution along one axis: (in + 2 pad - k) / stride +
 * 1, or 0 when the kernel does not fit. */
static inline int
pp_conv2d_out_size (int in, int k, int stride, int pad)
{
  const int span = in + 2 * pad - k;

  return span < 0 || stride < 1 ? 0 : span / stride + 1;
}

G_END_DECLS
