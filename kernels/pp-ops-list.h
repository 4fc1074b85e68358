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
 *   views   its view parameters in parentheses, each as one of
 *             PP_OPS_VIEW (param, numel), PP_OPS_VIEW_OPTIONAL (param,
 *               numel): a weight's PpView (or an activation in a
 *               weight's place, as add's x): its dtype one the backend
 *               reads weights in (PpBackend.view_dtypes);
 *             PP_OPS_IN (param, numel), PP_OPS_IN_OPTIONAL (param, numel):
 *               an activation's PpView, read;
 *             PP_OPS_OUT (param, numel): an activation's PpOut, written
 *               (or, for an op that works in place, read and written);
 *           activations' dtypes are the backend's act_dtypes; numel is how
 *           many elements the op reads or writes of it, an expression of
 *           the parameters; _OPTIONAL ones may be absent (NULL data);
 *           and PP_OPS_STRIDE (param, width): a row stride parameter,
 *           checked to be at least the row's width.
 *
 * Adding an op touches this list and each backend's kernel, nothing else:
 * the PpOps table, the wrappers and the profile are generated from it.
 *
 * Every view's data is device memory of the backend the op runs on (for
 * the CPU backends, host memory); sizes and scalars are host values.  Each
 * view carries its dtype (F32, F16, BF16) and element count (pp-view.h);
 * the wrappers check both against what the backend takes and the op
 * needs, and the backend reads and writes the data as that dtype.  A
 * view's shape beyond its length is the caller's to get right: ops do not
 * validate their operands' shapes against each other.  Outputs never
 * alias inputs unless an op says so.
 *
 * Shapes below are written channels first ([n,c,h,w], [n,c,hw]).  A view
 * of a spatial tensor may be laid out channels last instead (PpView.layout
 * NHWC: [n,h,w,c]): conv2d, group_norm, upsample_nearest,
 * interleave_phases, resize_bilinear, concat_channels, add_channel (x),
 * nchw_to_nlc (x) and nlc_to_nchw (y) read and write each such view as
 * its layout says, each view apart; every other op reads and writes
 * elements in order whatever the layout says. */
#pragma once

/* Strips the parentheses of a parameter or argument list. */
#define PP_OPS_UNPAREN(...) __VA_ARGS__

#define PP_OPS_LIST(X)                                                       \
  /* x [n,cin,h,w], weight [cout,cin,kh,kw], bias [cout] (optional),         \
   * y [n,cout,ho,wo], ho = (h + 2 pad - kh) / stride + 1 (same for wo);     \
   * zero padding.  residual (optional), an activation of y's shape, is     \
   * added to conv + bias (a residual connection), and with @relu y is the   \
   * relu of that sum (a TAESD block's convolution, skip and activation in   \
   * one pass: on float32 y, the bytes of conv2d, add and relu apart; a      \
   * 16-bit y is rounded once, at the end). */                               \
  X (conv2d, CONV2D,                                                         \
      (PpView x, int n, int cin, int h, int w, PpView weight, PpView bias,   \
          int cout, int kh, int kw, int stride, int pad, PpView residual,    \
          gboolean relu, PpOut y),                                           \
      (x, n, cin, h, w, weight, bias, cout, kh, kw, stride, pad, residual,   \
          relu, y),                                                          \
      2 * (gint64) n * cout * cin * kh * kw                                  \
      * pp_conv2d_out_size (h, kh, stride, pad)                              \
      * pp_conv2d_out_size (w, kw, stride, pad),                             \
      (PP_OPS_IN (x, (gint64) n * cin * h * w)                               \
          PP_OPS_VIEW (weight, (gint64) cout * cin * kh * kw)                \
          PP_OPS_VIEW_OPTIONAL (bias, cout)                                  \
          PP_OPS_IN_OPTIONAL (residual, (gint64) n * cout                    \
              * pp_conv2d_out_size (h, kh, stride, pad)                      \
              * pp_conv2d_out_size (w, kw, stride, pad))                     \
          PP_OPS_OUT (y, (gint64) n * cout                                   \
              * pp_conv2d_out_size (h, kh, stride, pad)                      \
              * pp_conv2d_out_size (w, kw, stride, pad))))                   \
  /* x, y [n,c,hw]; statistics per (sample, group of c/groups channels);     \
   * gamma, beta [c] (absent: 1 and 0); with @silu, y = silu of the          \
   * normalised values (a ResNet's norm and activation in one pass: on       \
   * float32 y, the bytes of group_norm then silu; a 16-bit y is rounded     \
   * once, after the silu).  shift [n,c] (absent: 0), an activation, is      \
   * added to x's channels first (a ResNet's time embedding: on float32,    \
   * the bytes of add_channel then group_norm, without writing the sum).    \
   * y may be x. */                                                          \
  X (group_norm, GROUP_NORM,                                                 \
      (PpView x, PpView shift, int n, int c, int hw, int groups, float eps,  \
          PpView gamma, PpView beta, gboolean silu, PpOut y),                \
      (x, shift, n, c, hw, groups, eps, gamma, beta, silu, y), 0,            \
      (PP_OPS_IN (x, (gint64) n * c * hw)                                    \
          PP_OPS_IN_OPTIONAL (shift, (gint64) n * c)                         \
          PP_OPS_VIEW_OPTIONAL (gamma, c) PP_OPS_VIEW_OPTIONAL (beta, c)     \
          PP_OPS_OUT (y, (gint64) n * c * hw)))                              \
  /* x, y [rows,dim]; gamma, beta [dim] (absent: 1 and 0).  y may be x. */   \
  X (layer_norm, LAYER_NORM,                                                 \
      (PpView x, int rows, int dim, float eps, PpView gamma, PpView beta,    \
          PpOut y),                                                          \
      (x, rows, dim, eps, gamma, beta, y), 0,                                \
      (PP_OPS_IN (x, (gint64) rows * dim)                                    \
          PP_OPS_VIEW_OPTIONAL (gamma, dim)                                  \
          PP_OPS_VIEW_OPTIONAL (beta, dim)                                   \
          PP_OPS_OUT (y, (gint64) rows * dim)))                              \
  /* y [rows,out] = x [rows,in] · wᵀ + b, w [out,in] (PyTorch layout),       \
   * b [out] (optional). */                                                  \
  X (linear, LINEAR,                                                         \
      (PpView x, int rows, int in, PpView w, PpView b, int out, PpOut y),    \
      (x, rows, in, w, b, out, y), 2 * (gint64) rows * in * out,             \
      (PP_OPS_IN (x, (gint64) rows * in)                                     \
          PP_OPS_VIEW (w, (gint64) out * in) PP_OPS_VIEW_OPTIONAL (b, out)   \
          PP_OPS_OUT (y, (gint64) rows * out)))                              \
  /* y [rows,out] += x [rows,in] · wᵀ + b, as linear above: a residual       \
   * connection's sum with its projection.  The CPU backends compute what   \
   * linear into a buffer and add give apart, byte for byte on float32     \
   * (on a 16-bit y their float32 sum, rounded once); a GPU's GEMM may      \
   * read y as its C and add the product in its own order. */               \
  X (linear_add, LINEAR_ADD,                                                 \
      (PpView x, int rows, int in, PpView w, PpView b, int out, PpOut y),    \
      (x, rows, in, w, b, out, y), 2 * (gint64) rows * in * out,             \
      (PP_OPS_IN (x, (gint64) rows * in)                                     \
          PP_OPS_VIEW (w, (gint64) out * in) PP_OPS_VIEW_OPTIONAL (b, out)   \
          PP_OPS_OUT (y, (gint64) rows * out)))                              \
  /* q [n,lq,heads·head_dim] (row stride ld_q), k, v [n,lk,heads·head_dim]  \
   * (row stride ld_kv), out [n,lq,heads·head_dim] (rows packed):            \
   * softmax(q kᵀ / √head_dim) v per sample and head.  The strides let q, k   \
   * and v be column ranges of one [rows, 3·heads·head_dim] projection (a    \
   * fused QKV); a stride of heads·head_dim is packed rows.  @dtype is the   \
   * type of the weights that made q, k and v: a backend with 16-bit tensor  \
   * cores may round q, k, v, the probabilities and out to it (F16, BF16;    \
   * float32 softmax and accumulation); F32 asks for float32.  The CPU       \
   * backends compute float32 whatever it says. */                           \
  X (attention, ATTENTION,                                                   \
      (PpView q, PpView k, PpView v, int n, int lq, int lk, int heads,       \
          int head_dim, int ld_q, int ld_kv, PpDType dtype, PpOut out),      \
      (q, k, v, n, lq, lk, heads, head_dim, ld_q, ld_kv, dtype, out),        \
      4 * (gint64) n * heads * lq * lk * head_dim,                           \
      (PP_OPS_STRIDE (ld_q, heads * head_dim)                                \
          PP_OPS_STRIDE (ld_kv, heads * head_dim)                            \
          PP_OPS_IN (q, pp_strided_numel (n * lq, heads * head_dim, ld_q))   \
          PP_OPS_IN (k, pp_strided_numel (n * lk, heads * head_dim, ld_kv))  \
          PP_OPS_IN (v, pp_strided_numel (n * lk, heads * head_dim, ld_kv))  \
          PP_OPS_OUT (out, (gint64) n * lq * heads * head_dim)))             \
  /* Self-attention with a causal mask (a text encoder's): q, k, v, out      \
   * [n,l,heads·head_dim]; query i sees keys 0…i only; @dtype as for         \
   * attention. */                                                           \
  X (attention_causal, ATTENTION_CAUSAL,                                     \
      (PpView q, PpView k, PpView v, int n, int l, int heads, int head_dim,  \
          PpDType dtype, PpOut out),                                         \
      (q, k, v, n, l, heads, head_dim, dtype, out),                          \
      2 * (gint64) n * heads * l * (l + 1) * head_dim,                       \
      (PP_OPS_IN (q, (gint64) n * l * heads * head_dim)                      \
          PP_OPS_IN (k, (gint64) n * l * heads * head_dim)                   \
          PP_OPS_IN (v, (gint64) n * l * heads * head_dim)                   \
          PP_OPS_OUT (out, (gint64) n * l * heads * head_dim)))              \
  /* In place, n elements. */                                                \
  X (silu, SILU, (PpOut x, size_t n), (x, n), 0,                             \
      (PP_OPS_OUT (x, (gint64) n)))                                          \
  X (relu, RELU, (PpOut x, size_t n), (x, n), 0,                             \
      (PP_OPS_OUT (x, (gint64) n)))                                          \
  X (tanh, TANH, (PpOut x, size_t n), (x, n), 0,                             \
      (PP_OPS_OUT (x, (gint64) n)))                                          \
  X (gelu, GELU, (PpOut x, size_t n), (x, n), 0,                             \
      (PP_OPS_OUT (x, (gint64) n)))                                          \
  /* x·sigmoid(1.702·x), CLIP's GELU approximation. */                       \
  X (quick_gelu, QUICK_GELU, (PpOut x, size_t n), (x, n), 0,                 \
      (PP_OPS_OUT (x, (gint64) n)))                                          \
  /* x [rows,2d]: per row d values then d gates; y [rows,d] =                \
   * value · gelu(gate). */                                                  \
  X (geglu, GEGLU, (PpView x, int rows, int d, PpOut y), (x, rows, d, y), 0, \
      (PP_OPS_IN (x, 2 * (gint64) rows * d)                                  \
          PP_OPS_OUT (y, (gint64) rows * d)))                                \
  /* x [n,c,h,w] → y [n,c,h·factor,w·factor], nearest neighbour. */          \
  X (upsample_nearest, UPSAMPLE_NEAREST,                                     \
      (PpView x, int n, int c, int h, int w, int factor, PpOut y),           \
      (x, n, c, h, w, factor, y), 0,                                         \
      (PP_OPS_IN (x, (gint64) n * c * h * w)                                 \
          PP_OPS_OUT (y, (gint64) n * c * h * w * factor * factor)))         \
  /* z [n,4c,h+1,w+1] → y [n,c,2h,2w]: y[n,k,2i+a,2j+b] =                  \
   * z[n,(2a+b)c+k,i+a,j+b] for a, b in {0,1}.  A 3×3 convolution (stride   \
   * 1, padding 1) of a nearest ×2 upsampling, each of its four output       \
   * phases a 2×2 convolution of the input with padding 1 whose taps sum     \
   * the 3×3 kernel's (pp_bind_conv_up2): the phases, interleaved. */        \
  X (interleave_phases, INTERLEAVE_PHASES,                                   \
      (PpView z, int n, int c, int h, int w, PpOut y),                       \
      (z, n, c, h, w, y), 0,                                                 \
      (PP_OPS_IN (z, (gint64) n * 4 * c * (h + 1) * (w + 1))                 \
          PP_OPS_OUT (y, (gint64) n * c * 4 * h * w)))                       \
  /* x [c,h,w] → y [c,ho,wo], bilinear with half-pixel centres and edge      \
   * clamping (torch's interpolate, align_corners=False, no antialias). */   \
  X (resize_bilinear, RESIZE_BILINEAR,                                       \
      (PpView x, int c, int h, int w, PpOut y, int ho, int wo),              \
      (x, c, h, w, y, ho, wo), 0,                                            \
      (PP_OPS_IN (x, (gint64) c * h * w)                                     \
          PP_OPS_OUT (y, (gint64) c * ho * wo)))                             \
  /* a [n,ca,hw], b [n,cb,hw] → y [n,ca+cb,hw]. */                           \
  X (concat_channels, CONCAT_CHANNELS,                                       \
      (PpView a, int ca, PpView b, int cb, int n, int hw, PpOut y),          \
      (a, ca, b, cb, n, hw, y), 0,                                           \
      (PP_OPS_IN (a, (gint64) n * ca * hw) PP_OPS_IN (b, (gint64) n * cb * hw) \
          PP_OPS_OUT (y, (gint64) n * (ca + cb) * hw)))                      \
  /* x [n] bytes → y [n] values 0…255 (a frame's pixels, uploaded as         \
   * bytes: pp_image_to_planes). */                                          \
  X (bytes_to_floats, BYTES_TO_FLOATS,                                       \
      (const guint8 *x, size_t n, PpOut y), (x, n, y), 0,                    \
      (PP_OPS_OUT (y, (gint64) n)))                                          \
  /* x [n] → y [n] bytes: pp_math_to_byte (rounded, ties to even, clamped    \
   * to 0…255, NaN to 0), the bytes pp_image_from_tensor writes. */          \
  X (floats_to_bytes, FLOATS_TO_BYTES,                                       \
      (PpView x, size_t n, guint8 *y), (x, n, y), 0,                         \
      (PP_OPS_IN (x, (gint64) n)))                                           \
  /* y += x, n elements. */                                                  \
  X (add, ADD, (PpOut y, PpView x, size_t n), (y, x, n), 0,                  \
      (PP_OPS_OUT (y, (gint64) n) PP_OPS_VIEW (x, (gint64) n)))              \
  /* x *= s, n elements. */                                                  \
  X (scale, SCALE, (PpOut x, size_t n, float s), (x, n, s), 0,               \
      (PP_OPS_OUT (x, (gint64) n)))                                          \
  /* x = x · mul + add, n elements. */                                       \
  X (affine, AFFINE, (PpOut x, size_t n, float mul, float add),              \
      (x, n, mul, add), 0, (PP_OPS_OUT (x, (gint64) n)))                     \
  /* y = a·x + b·y, n elements; with b = 0, y is only written (with a = 1,   \
   * x converted to y's dtype). */                                           \
  X (axpby, AXPBY, (PpOut y, float a, PpView x, float b, size_t n),          \
      (y, a, x, b, n), 0,                                                    \
      (PP_OPS_OUT (y, (gint64) n) PP_OPS_IN (x, (gint64) n)))                \
  /* One latent-consistency step (pp_math_lcm_step) on n elements: x from    \
   * x and the noise prediction eps; noise absent on the last step. */       \
  X (lcm_step, LCM_STEP,                                                     \
      (PpOut x, PpView eps, PpView noise, size_t n,                          \
          const PpLcmCoeffs * coeffs),                                       \
      (x, eps, noise, n, coeffs), 0,                                         \
      (PP_OPS_OUT (x, (gint64) n) PP_OPS_IN (eps, (gint64) n)                \
          PP_OPS_IN_OPTIONAL (noise, (gint64) n)))                           \
  /* y [dim]: half = dim/2 frequencies f_k = exp(-ln(10000) k / (half -      \
   * freq_shift)); y = [sin(t f), cos(t f)], or [cos, sin] when              \
   * flip_sin_to_cos; an odd dim gets a trailing 0. */                       \
  X (timestep_embedding, TIMESTEP_EMBEDDING,                                 \
      (float t, int dim, gboolean flip_sin_to_cos, float freq_shift,         \
          PpOut y),                                                          \
      (t, dim, flip_sin_to_cos, freq_shift, y), 0,                           \
      (PP_OPS_OUT (y, dim)))                                                 \
  /* x [n,c,hw] → y [n,hw,c]. */                                             \
  X (nchw_to_nlc, NCHW_TO_NLC,                                               \
      (PpView x, int n, int c, int hw, PpOut y), (x, n, c, hw, y), 0,        \
      (PP_OPS_IN (x, (gint64) n * c * hw)                                    \
          PP_OPS_OUT (y, (gint64) n * c * hw)))                              \
  /* x [n,hw,c] → y [n,c,hw]. */                                             \
  X (nlc_to_nchw, NLC_TO_NCHW,                                               \
      (PpView x, int n, int c, int hw, PpOut y), (x, n, c, hw, y), 0,        \
      (PP_OPS_IN (x, (gint64) n * c * hw)                                    \
          PP_OPS_OUT (y, (gint64) n * c * hw)))                              \
  /* x [n,c,hw] += v [n,c] broadcast over hw (a ResNet's time embedding, a   \
   * bias). */                                                               \
  X (add_channel, ADD_CHANNEL,                                               \
      (PpOut x, int n, int c, int hw, PpView v), (x, n, c, hw, v), 0,        \
      (PP_OPS_OUT (x, (gint64) n * c * hw) PP_OPS_VIEW (v, (gint64) n * c))) \
  /* y [m,n] (row stride ldy) = op(a) · op(b), plus y itself when            \
   * accumulate.  op(a) [m,k] is a [m,k] (row stride lda), or with trans_a   \
   * the transpose of a [k,m]; op(b) [k,n] likewise.  Strided operands let   \
   * a model multiply slices of NCHW tensors without a transpose. */         \
  X (matmul, MATMUL,                                                         \
      (gboolean trans_a, gboolean trans_b, int m, int n, int k, PpView a,    \
          int lda, PpView b, int ldb, gboolean accumulate, PpOut y,          \
          int ldy),                                                          \
      (trans_a, trans_b, m, n, k, a, lda, b, ldb, accumulate, y, ldy),       \
      2 * (gint64) m * n * k,                                                \
      (PP_OPS_VIEW (a, pp_strided_numel (trans_a ? k : m, trans_a ? m : k,   \
                  lda))                                                      \
          PP_OPS_VIEW (b, pp_strided_numel (trans_b ? n : k,                 \
                  trans_b ? k : n, ldb))                                     \
          PP_OPS_OUT (y, pp_strided_numel (m, n, ldy))))                  \
  /* The temporal feature bank's (kernels/models/pp-feature-bank.h).         \
   * norms [rows] = the Euclidean norm of each row of x [rows,c], its        \
   * squares summed in double. */                                            \
  X (row_norms, ROW_NORMS, (PpView x, int rows, int c, PpOut norms),         \
      (x, rows, c, norms), 2 * (gint64) rows * c,                            \
      (PP_OPS_IN (x, (gint64) rows * c) PP_OPS_OUT (norms, rows)))           \
  /* Fusion of rows y [rows,c] with a bank's rows bank [m,c]: sim [rows,m]   \
   * their dot products, y_norms [rows] and bank_norms [m] their norms.      \
   * Row i's choice is the first j with the largest sim[i,j] ·               \
   * pp_math_inverse_norm (bank_norms[j]); where the cosine of the two       \
   * (pp_math_cosine) is at least threshold, y_i becomes                    \
   * pp_math_blend (y_i, bank_j, strength) and fused[i] += 1; elsewhere     \
   * both stay as they are.  m > 0. */                                       \
  X (bank_fuse, BANK_FUSE,                                                   \
      (PpView sim, int rows, int m, int c, PpView y_norms,                   \
          PpView bank_norms, PpView bank, double threshold, double strength, \
          PpOut y, PpOut fused),                                             \
      (sim, rows, m, c, y_norms, bank_norms, bank, threshold, strength, y,   \
          fused), 2 * (gint64) rows * m,                                     \
      (PP_OPS_IN (sim, (gint64) rows * m) PP_OPS_IN (y_norms, rows)          \
          PP_OPS_IN (bank_norms, m) PP_OPS_IN (bank, (gint64) m * c)         \
          PP_OPS_OUT (y, (gint64) rows * c) PP_OPS_OUT (fused, rows)))       \
  /* A merge's destinations: of n rows, r ≤ n / 2 are merged away (rows 0,  \
   * 2, …, 2r − 2, the sources) and n − r kept, the kept row t being row    \
   * pp_math_bank_kept (t, r).  sim [sources,n − r] holds the dot products  \
   * of sources first, first + 2, … with the kept rows, norms [n] every     \
   * row's norm; dest[q] = the kept row j = pp_math_bank_kept (t, r) with   \
   * the largest sim[q,t] · pp_math_inverse_norm (norms[j]), the first on    \
   * ties (the source itself where no score beats -FLT_MAX), as a float32    \
   * value (exact: n < 2^24). */                                             \
  X (bank_merge_dest, BANK_MERGE_DEST,                                       \
      (PpView sim, int sources, int first, int n, int r, PpView norms,       \
          PpOut dest),                                                       \
      (sim, sources, first, n, r, norms, dest),                              \
      2 * (gint64) sources * (n - r),                                        \
      (PP_OPS_IN (sim, (gint64) sources * (n - r)) PP_OPS_IN (norms, n)      \
          PP_OPS_OUT (dest, sources)))                                       \
  /* A merge's rows: y [n − r,c], row s the mean of x's kept row t =         \
   * pp_math_bank_kept (s, r) and of the sources 2q (q < r) whose dest[q]    \
   * is t, x [n,c], summed in double in row order. */                        \
  X (bank_merge, BANK_MERGE,                                                 \
      (PpView x, int n, int r, int c, PpView dest, PpOut y),                 \
      (x, n, r, c, dest, y), (gint64) n * c,                                 \
      (PP_OPS_IN (x, (gint64) n * c) PP_OPS_IN (dest, r)                     \
          PP_OPS_OUT (y, (gint64) (n - r) * c)))
