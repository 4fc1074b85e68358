/* ppdiffuse — the op list, declared once.
 *
 * PP_OPS_LIST (X) calls X (name, NAME, params, args, flops, views) for
 * every op:
 *   name    the op (the PpOps field, the pp_NAME wrapper, the pp_cpu_NAME
 *           kernel);
 *   NAME    its PpOp profile entry (PP_OP_NAME);
 *   params  its parameters in parentheses, without the backend;
 *   args    the same names as an argument list;
 *   flops   FLOPs of one call (2 per multiply-add; 0 for memory-bound ops),
 *           an expression of the parameters;
 *   views   its PpView parameters in parentheses, each as
 *           PP_OPS_VIEW (param, numel), or PP_OPS_VIEW_OPTIONAL (param,
 *           numel) when it may be absent: numel is how many elements the
 *           op reads of it, an expression of the parameters; () for none.
 *
 * PP_OPS_LIST_SPLIT (PLAIN, VIEWS) is the same list calling PLAIN for the
 * ops on float32 buffers alone and VIEWS for the ops that read typed views:
 * a backend can generate the glue of the former and write the latter's,
 * which dispatches on each view's dtype.
 *
 * Adding an op touches this list and each backend's kernel, nothing else:
 * the PpOps table, the wrappers, the profile and the backends' tables are
 * generated from it.
 *
 * Every pointer, and every view's data, is device memory of the backend the
 * op runs on (for the CPU backends, host memory); sizes and scalars are
 * host values.  Parameters that can be weights are PpViews (pp-view.h):
 * they carry their dtype (F32, F16, BF16) and element count, the wrappers
 * check both against what the backend reads and the op needs, and the
 * backend reads the data as that dtype.  Activations (outputs, and the
 * other inputs) are float32 pointers: ops do not validate their shapes
 * against each other, callers do.  Outputs never alias inputs unless an
 * op says so. */
#pragma once

/* Strips the parentheses of a parameter or argument list. */
#define PP_OPS_UNPAREN(...) __VA_ARGS__

#define PP_OPS_LIST(X) PP_OPS_LIST_SPLIT (X, X)

#define PP_OPS_LIST_SPLIT(PLAIN, VIEWS)                                      \
  /* x [n,cin,h,w], weight [cout,cin,kh,kw], bias [cout] (optional),         \
   * y [n,cout,ho,wo], ho = (h + 2 pad - kh) / stride + 1 (same for wo);     \
   * zero padding. */                                                        \
  VIEWS (conv2d, CONV2D,                                                     \
      (const float *x, int n, int cin, int h, int w, PpView weight,          \
          PpView bias, int cout, int kh, int kw, int stride, int pad,        \
          float *y),                                                         \
      (x, n, cin, h, w, weight, bias, cout, kh, kw, stride, pad, y),         \
      2 * (gint64) n * cout * cin * kh * kw                                  \
      * pp_conv2d_out_size (h, kh, stride, pad)                              \
      * pp_conv2d_out_size (w, kw, stride, pad),                             \
      (PP_OPS_VIEW (weight, (gint64) cout * cin * kh * kw)                   \
          PP_OPS_VIEW_OPTIONAL (bias, cout)))                                \
  /* x, y [n,c,hw]; statistics per (sample, group of c/groups channels);     \
   * gamma, beta [c] (absent: 1 and 0); with @silu, y = silu of the          \
   * normalised values (a ResNet's norm and activation in one pass, the      \
   * bytes of group_norm then silu).  y may equal x. */                      \
  VIEWS (group_norm, GROUP_NORM,                                             \
      (const float *x, int n, int c, int hw, int groups, float eps,          \
          PpView gamma, PpView beta, gboolean silu, float *y),               \
      (x, n, c, hw, groups, eps, gamma, beta, silu, y), 0,                   \
      (PP_OPS_VIEW_OPTIONAL (gamma, c) PP_OPS_VIEW_OPTIONAL (beta, c)))      \
  /* x, y [rows,dim]; gamma, beta [dim] (absent: 1 and 0).  y may equal      \
   * x. */                                                                   \
  VIEWS (layer_norm, LAYER_NORM,                                             \
      (const float *x, int rows, int dim, float eps, PpView gamma,           \
          PpView beta, float *y),                                            \
      (x, rows, dim, eps, gamma, beta, y), 0,                                \
      (PP_OPS_VIEW_OPTIONAL (gamma, dim) PP_OPS_VIEW_OPTIONAL (beta, dim)))  \
  /* y [rows,out] = x [rows,in] · wᵀ + b, w [out,in] (PyTorch layout),       \
   * b [out] (optional). */                                                  \
  VIEWS (linear, LINEAR,                                                     \
      (const float *x, int rows, int in, PpView w, PpView b, int out,        \
          float *y),                                                         \
      (x, rows, in, w, b, out, y), 2 * (gint64) rows * in * out,             \
      (PP_OPS_VIEW (w, (gint64) out * in) PP_OPS_VIEW_OPTIONAL (b, out)))    \
  /* q [n,lq,heads·head_dim], k, v [n,lk,heads·head_dim], out like q:        \
   * softmax(q kᵀ / √head_dim) v per sample and head.  @dtype is the type    \
   * of the weights that made q, k and v: a backend with 16-bit tensor       \
   * cores may round q, k, v, the probabilities and out to it (F16, BF16;    \
   * float32 softmax and accumulation); F32 asks for float32.  The CPU       \
   * backends compute float32 whatever it says. */                           \
  PLAIN (attention, ATTENTION,                                               \
      (const float *q, const float *k, const float *v, int n, int lq,        \
          int lk, int heads, int head_dim, PpDType dtype, float *out),       \
      (q, k, v, n, lq, lk, heads, head_dim, dtype, out),                     \
      4 * (gint64) n * heads * lq * lk * head_dim, ())                       \
  /* Self-attention with a causal mask (a text encoder's): q, k, v, out      \
   * [n,l,heads·head_dim]; query i sees keys 0…i only; @dtype as for         \
   * attention. */                                                           \
  PLAIN (attention_causal, ATTENTION_CAUSAL,                                 \
      (const float *q, const float *k, const float *v, int n, int l,         \
          int heads, int head_dim, PpDType dtype, float *out),               \
      (q, k, v, n, l, heads, head_dim, dtype, out),                          \
      2 * (gint64) n * heads * l * (l + 1) * head_dim, ())                   \
  /* In place, n elements. */                                                \
  PLAIN (silu, SILU, (float *x, size_t n), (x, n), 0, ())                    \
  PLAIN (relu, RELU, (float *x, size_t n), (x, n), 0, ())                    \
  PLAIN (tanh, TANH, (float *x, size_t n), (x, n), 0, ())                    \
  PLAIN (gelu, GELU, (float *x, size_t n), (x, n), 0, ())                    \
  /* x·sigmoid(1.702·x), CLIP's GELU approximation. */                       \
  PLAIN (quick_gelu, QUICK_GELU, (float *x, size_t n), (x, n), 0, ())        \
  /* x [rows,2d]: per row d values then d gates; y [rows,d] =                \
   * value · gelu(gate). */                                                  \
  PLAIN (geglu, GEGLU, (const float *x, int rows, int d, float *y),          \
      (x, rows, d, y), 0, ())                                                \
  /* x [n,c,h,w] → y [n,c,h·factor,w·factor], nearest neighbour. */          \
  PLAIN (upsample_nearest, UPSAMPLE_NEAREST,                                 \
      (const float *x, int n, int c, int h, int w, int factor, float *y),    \
      (x, n, c, h, w, factor, y), 0, ())                                     \
  /* x [c,h,w] → y [c,ho,wo], bilinear with half-pixel centres and edge      \
   * clamping (torch's interpolate, align_corners=False, no antialias). */   \
  PLAIN (resize_bilinear, RESIZE_BILINEAR,                                   \
      (const float *x, int c, int h, int w, float *y, int ho, int wo),       \
      (x, c, h, w, y, ho, wo), 0, ())                                        \
  /* a [n,ca,hw], b [n,cb,hw] → y [n,ca+cb,hw]. */                           \
  PLAIN (concat_channels, CONCAT_CHANNELS,                                   \
      (const float *a, int ca, const float *b, int cb, int n, int hw,        \
          float *y),                                                         \
      (a, ca, b, cb, n, hw, y), 0, ())                                       \
  /* x [n] bytes → y [n] floats 0…255 (a frame's pixels, uploaded as         \
   * bytes: pp_image_to_planes). */                                          \
  PLAIN (bytes_to_floats, BYTES_TO_FLOATS,                                   \
      (const guint8 *x, size_t n, float *y), (x, n, y), 0, ())               \
  /* x [n] floats → y [n] bytes: pp_math_to_byte (rounded, ties to even,     \
   * clamped to 0…255, NaN to 0), the bytes pp_image_from_tensor writes. */  \
  PLAIN (floats_to_bytes, FLOATS_TO_BYTES,                                   \
      (const float *x, size_t n, guint8 *y), (x, n, y), 0, ())               \
  /* y += x, n elements. */                                                  \
  VIEWS (add, ADD, (float *y, PpView x, size_t n), (y, x, n), 0,             \
      (PP_OPS_VIEW (x, (gint64) n)))                                         \
  /* x *= s, n elements. */                                                  \
  PLAIN (scale, SCALE, (float *x, size_t n, float s), (x, n, s), 0, ())      \
  /* x = x · mul + add, n elements. */                                       \
  PLAIN (affine, AFFINE, (float *x, size_t n, float mul, float add),         \
      (x, n, mul, add), 0, ())                                               \
  /* y = a·x + b·y, n elements; with b = 0, y is only written. */            \
  PLAIN (axpby, AXPBY,                                                       \
      (float *y, float a, const float *x, float b, size_t n),                \
      (y, a, x, b, n), 0, ())                                                \
  /* One latent-consistency step (pp_math_lcm_step) on n elements: x from    \
   * x and the noise prediction eps; noise NULL on the last step. */         \
  PLAIN (lcm_step, LCM_STEP,                                                 \
      (float *x, const float *eps, const float *noise, size_t n,             \
          const PpLcmCoeffs * coeffs),                                       \
      (x, eps, noise, n, coeffs), 0, ())                                     \
  /* y [dim]: half = dim/2 frequencies f_k = exp(-ln(10000) k / (half -      \
   * freq_shift)); y = [sin(t f), cos(t f)], or [cos, sin] when              \
   * flip_sin_to_cos; an odd dim gets a trailing 0. */                       \
  PLAIN (timestep_embedding, TIMESTEP_EMBEDDING,                             \
      (float t, int dim, gboolean flip_sin_to_cos, float freq_shift,         \
          float *y),                                                         \
      (t, dim, flip_sin_to_cos, freq_shift, y), 0, ())                       \
  /* x [n,c,hw] → y [n,hw,c]. */                                             \
  PLAIN (nchw_to_nlc, NCHW_TO_NLC,                                           \
      (const float *x, int n, int c, int hw, float *y), (x, n, c, hw, y), 0, \
      ())                                                                    \
  /* x [n,hw,c] → y [n,c,hw]. */                                             \
  PLAIN (nlc_to_nchw, NLC_TO_NCHW,                                           \
      (const float *x, int n, int c, int hw, float *y), (x, n, c, hw, y), 0, \
      ())                                                                    \
  /* x [n,c,hw] += v [n,c] broadcast over hw (a ResNet's time embedding, a   \
   * bias). */                                                               \
  VIEWS (add_channel, ADD_CHANNEL,                                           \
      (float *x, int n, int c, int hw, PpView v), (x, n, c, hw, v), 0,       \
      (PP_OPS_VIEW (v, (gint64) n * c)))                                     \
  /* y [m,n] (row stride ldy) = op(a) · op(b), plus y itself when            \
   * accumulate.  op(a) [m,k] is a [m,k] (row stride lda), or with trans_a   \
   * the transpose of a [k,m]; op(b) [k,n] likewise.  Strided operands let   \
   * a model multiply slices of NCHW tensors without a transpose. */         \
  VIEWS (matmul, MATMUL,                                                     \
      (gboolean trans_a, gboolean trans_b, int m, int n, int k, PpView a,    \
          int lda, PpView b, int ldb, gboolean accumulate, float *y,         \
          int ldy),                                                          \
      (trans_a, trans_b, m, n, k, a, lda, b, ldb, accumulate, y, ldy),       \
      2 * (gint64) m * n * k,                                                \
      (PP_OPS_VIEW (a, pp_strided_numel (trans_a ? k : m, trans_a ? m : k,   \
                  lda))                                                      \
          PP_OPS_VIEW (b, pp_strided_numel (trans_b ? n : k,                 \
                  trans_b ? k : n, ldb))))
