/* Tests of the CPU ops against naive float64 references written here with
 * direct loops (no im2col, no GEMM, no blocking), on random inputs with odd
 * sizes.  Each check prints its max abs error and the magnitude it is
 * relative to. */
#include "pp-ops.h"
#include "pp-ops-math.h"
#include "pp-cpu-parallel.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* Bound on max |got - ref| / max(1, max |ref|) for float32 ops whose
 * reference is float64: well above float rounding (≈1e-7 · terms), well
 * below any indexing or formula mistake. */
#define TOL_REL 1e-4
#define SEED 20240611
/* Large enough that every op splits its work across threads (when OpenBLAS
 * runs more than one). */
#define LARGE_ELEMENTS 300007

static float *
random_floats (GRand * rng, size_t n, double amplitude)
{
  float *p = g_new (float, n);

  for (size_t i = 0; i < n; i++)
    p[i] = (float) g_rand_double_range (rng, -amplitude, amplitude);
  return p;
}

/* Asserts that @got matches @ref within TOL_REL relative to the reference's
 * magnitude, and reports the error. */
static void
check_close (const gchar * what, const float *got, const double *ref,
    size_t n)
{
  double err = 0.0, mag = 0.0;
  size_t worst = 0;

  for (size_t i = 0; i < n; i++) {
    const double e = fabs ((double) got[i] - ref[i]);

    g_assert_true (isfinite (got[i]));
    if (e > err) {
      err = e;
      worst = i;
    }
    mag = MAX (mag, fabs (ref[i]));
  }
  g_test_message ("%s: %zu values, max abs error %.3g (max |ref| %.3g)",
      what, n, err, mag);
  if (err > TOL_REL * MAX (1.0, mag))
    g_error ("%s: error %.3g at %zu (got %.9g, expected %.9g) exceeds %.3g",
        what, err, worst, got[worst], ref[worst], TOL_REL * MAX (1.0, mag));
}

static void
check_equal (const gchar * what, const float *got, const float *expect,
    size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (got[i] != expect[i])
      g_error ("%s: value %zu is %.9g, expected %.9g", what, i, got[i],
          expect[i]);
  g_test_message ("%s: %zu values, exact", what, n);
}

/* conv2d */

typedef struct
{
  int n, cin, h, w, cout, kh, kw, stride, pad;
  gboolean bias;
} ConvCase;

static void
conv_reference (const ConvCase * c, const float *x, const float *wt,
    const float *bias, int ho, int wo, double *y)
{
  for (int b = 0; b < c->n; b++)
    for (int co = 0; co < c->cout; co++)
      for (int oy = 0; oy < ho; oy++)
        for (int ox = 0; ox < wo; ox++) {
          double acc = bias ? bias[co] : 0.0;

          for (int ci = 0; ci < c->cin; ci++)
            for (int ky = 0; ky < c->kh; ky++)
              for (int kx = 0; kx < c->kw; kx++) {
                const int iy = oy * c->stride - c->pad + ky;
                const int ix = ox * c->stride - c->pad + kx;

                if (iy < 0 || iy >= c->h || ix < 0 || ix >= c->w)
                  continue;
                acc += (double) x[((size_t) (b * c->cin + ci) * c->h + iy)
                    * c->w + ix]
                    * wt[((size_t) (co * c->cin + ci) * c->kh + ky) * c->kw
                    + kx];
              }
          y[((size_t) (b * c->cout + co) * ho + oy) * wo + ox] = acc;
        }
}

static void
run_conv_case (GRand * rng, const ConvCase * c)
{
  const int ho = pp_conv2d_out_size (c->h, c->kh, c->stride, c->pad);
  const int wo = pp_conv2d_out_size (c->w, c->kw, c->stride, c->pad);
  const size_t n_in = (size_t) c->n * c->cin * c->h * c->w;
  const size_t n_w = (size_t) c->cout * c->cin * c->kh * c->kw;
  const size_t n_out = (size_t) c->n * c->cout * ho * wo;
  g_autofree float *x = random_floats (rng, n_in, 1.0);
  g_autofree float *wt = random_floats (rng, n_w, 0.5);
  g_autofree float *bias = c->bias ? random_floats (rng, c->cout, 1.0) : NULL;
  g_autofree float *y = g_new (float, n_out);
  g_autofree double *ref = g_new (double, n_out);
  g_autofree gchar *what = g_strdup_printf ("conv2d n%d %dx%dx%d -> %d "
      "k%dx%d s%d p%d%s (out %dx%d)", c->n, c->cin, c->h, c->w, c->cout,
      c->kh, c->kw, c->stride, c->pad, c->bias ? " bias" : "", ho, wo);

  g_assert_cmpint (ho, >, 0);
  g_assert_cmpint (wo, >, 0);
  /* NaN canaries: every output must be written. */
  for (size_t i = 0; i < n_out; i++)
    y[i] = NAN;
  pp_conv2d (x, c->n, c->cin, c->h, c->w, wt, bias, c->cout, c->kh, c->kw,
      c->stride, c->pad, y);
  conv_reference (c, x, wt, bias, ho, wo, ref);
  check_close (what, y, ref, n_out);
}

static void
test_conv2d (void)
{
  static const ConvCase cases[] = {
    {2, 5, 9, 13, 7, 3, 3, 1, 1, TRUE},
    {2, 5, 9, 13, 7, 3, 3, 2, 1, TRUE},
    {2, 5, 9, 13, 7, 3, 3, 1, 0, FALSE},
    {2, 5, 9, 13, 7, 3, 3, 2, 0, FALSE},
    {2, 5, 8, 11, 7, 3, 3, 2, 1, FALSE},
    {1, 3, 1, 1, 4, 3, 3, 1, 1, TRUE},  /* only the centre tap is inside */
    {2, 5, 9, 13, 7, 1, 1, 1, 0, TRUE}, /* direct GEMM path */
    {2, 5, 9, 13, 7, 1, 1, 1, 0, FALSE},
    {2, 5, 9, 13, 7, 1, 1, 2, 0, FALSE},        /* strided 1×1: im2col */
    {1, 5, 9, 13, 7, 1, 1, 1, 1, TRUE}, /* padded 1×1 */
    {2, 4, 7, 10, 3, 3, 1, 1, 1, TRUE}, /* kh ≠ kw */
    {1, 2, 5, 6, 3, 5, 5, 3, 2, TRUE},  /* large kernel, stride 3 */
    /* 3×3 stride-1 pad-1 convolutions take the direct kernel where the CPU
     * has it (tiles of 6 output channels × 64 pixels, rows packed
     * back to back): odd channel counts, partial channel tiles and pixel
     * blocks, masked last vectors, no bias */
    {2, 5, 9, 16, 7, 3, 3, 1, 1, TRUE},
    {1, 6, 7, 32, 3, 3, 3, 1, 1, TRUE},
    {1, 9, 5, 48, 13, 3, 3, 1, 1, FALSE},
    {1, 7, 8, 8, 13, 3, 3, 1, 1, TRUE}, /* 8-wide: two rows a vector */
    {2, 11, 16, 16, 9, 3, 3, 1, 1, TRUE},
    {1, 10, 32, 32, 7, 3, 3, 1, 1, FALSE},
    {1, 3, 5, 7, 1, 3, 3, 1, 1, TRUE},  /* 35 pixels: masked tail */
    {1, 4, 3, 40, 14, 3, 3, 1, 1, TRUE},        /* 120 pixels: 2 blocks */
  };

  GRand *rng = g_rand_new_with_seed (SEED);

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++)
    run_conv_case (rng, &cases[i]);
  g_rand_free (rng);
}

/* A convolution whose column matrix exceeds PP_CONV2D_COL_MAX_FLOATS runs
 * in bands of output rows; the last band is partial here. */
static void
test_conv2d_bands (void)
{
  static const ConvCase cases[] = {
    {1, 512, 45, 61, 3, 3, 3, 1, 1, TRUE},
    {1, 512, 45, 61, 3, 3, 3, 2, 1, FALSE},
    {2, 600, 37, 64, 9, 3, 3, 1, 1, TRUE},      /* direct kernel, several bands */
  };
  GRand *rng = g_rand_new_with_seed (SEED + 1);

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    const ConvCase *c = &cases[i];
    const int ho = pp_conv2d_out_size (c->h, c->kh, c->stride, c->pad);
    const int wo = pp_conv2d_out_size (c->w, c->kw, c->stride, c->pad);
    const size_t rows_per_band = PP_CONV2D_COL_MAX_FLOATS /
        ((size_t) c->cin * c->kh * c->kw * wo);

    g_assert_cmpuint (rows_per_band, <, (size_t) ho);
    g_assert_cmpuint (ho % rows_per_band, !=, 0);
    run_conv_case (rng, c);
  }
  g_rand_free (rng);
}

/* group_norm, layer_norm */

static void
normalise_reference (const float *x, size_t count, double eps, double *mean,
    double *rstd)
{
  double s = 0.0, v = 0.0;

  for (size_t i = 0; i < count; i++)
    s += x[i];
  *mean = s / count;
  for (size_t i = 0; i < count; i++)
    v += (x[i] - *mean) * (x[i] - *mean);
  *rstd = 1.0 / sqrt (v / count + eps);
}

static void
run_group_norm (GRand * rng, int n, int c, int hw, int groups, double offset,
    gboolean affine, float eps)
{
  const size_t total = (size_t) n * c * hw;
  const int per = c / groups;
  g_autofree float *x = random_floats (rng, total, 1.0);
  g_autofree float *gamma = affine ? random_floats (rng, c, 1.0) : NULL;
  g_autofree float *beta = affine ? random_floats (rng, c, 1.0) : NULL;
  g_autofree float *y = g_new (float, total);
  g_autofree double *ref = g_new (double, total);
  g_autofree gchar *what = g_strdup_printf ("group_norm n%d c%d hw%d g%d "
      "offset %g%s", n, c, hw, groups, offset, affine ? " affine" : "");

  /* A large common offset tests that the variance does not cancel. */
  for (size_t i = 0; i < total; i++)
    x[i] += (float) offset;
  pp_group_norm (x, n, c, hw, groups, eps, gamma, beta, y);
  for (int b = 0; b < n; b++)
    for (int g = 0; g < groups; g++) {
      const size_t first = ((size_t) b * c + g * per) * hw;
      double mean, rstd;

      normalise_reference (x + first, (size_t) per * hw, eps, &mean, &rstd);
      for (int ch = g * per; ch < (g + 1) * per; ch++)
        for (int i = 0; i < hw; i++) {
          const size_t at = ((size_t) b * c + ch) * hw + i;
          const double v = (x[at] - mean) * rstd;

          ref[at] = affine ? v * gamma[ch] + beta[ch] : v;
        }
    }
  check_close (what, y, ref, total);

  /* In place gives the same result. */
  pp_group_norm (x, n, c, hw, groups, eps, gamma, beta, x);
  check_equal ("group_norm in place", x, y, total);
}

static void
test_group_norm (void)
{
  GRand *rng = g_rand_new_with_seed (SEED + 2);

  run_group_norm (rng, 2, 12, 35, 4, 0.0, TRUE, 1e-5f);
  run_group_norm (rng, 2, 12, 35, 3, 0.0, FALSE, 1e-6f);
  run_group_norm (rng, 1, 7, 3, 7, 0.0, TRUE, 1e-5f);   /* groups = channels */
  run_group_norm (rng, 1, 8, 1000, 1, 0.0, TRUE, 1e-5f);        /* 8000 per group, spans blocks */
  run_group_norm (rng, 2, 16, 777, 8, 100.0, TRUE, 1e-5f);
  run_group_norm (rng, 2, 64, 4099, 32, 0.5, TRUE, 1e-6f);      /* threads */
  g_rand_free (rng);
}

static void
run_layer_norm (GRand * rng, int rows, int dim, double offset,
    gboolean affine)
{
  const size_t total = (size_t) rows * dim;
  const float eps = 1e-5f;
  g_autofree float *x = random_floats (rng, total, 1.0);
  g_autofree float *gamma = affine ? random_floats (rng, dim, 1.0) : NULL;
  g_autofree float *beta = affine ? random_floats (rng, dim, 1.0) : NULL;
  g_autofree float *y = g_new (float, total);
  g_autofree double *ref = g_new (double, total);
  g_autofree gchar *what = g_strdup_printf ("layer_norm %dx%d offset %g%s",
      rows, dim, offset, affine ? " affine" : "");

  for (size_t i = 0; i < total; i++)
    x[i] += (float) offset;
  pp_layer_norm (x, rows, dim, eps, gamma, beta, y);
  for (int r = 0; r < rows; r++) {
    double mean, rstd;

    normalise_reference (x + (size_t) r * dim, dim, eps, &mean, &rstd);
    for (int i = 0; i < dim; i++) {
      const double v = (x[(size_t) r * dim + i] - mean) * rstd;

      ref[(size_t) r * dim + i] = affine ? v * gamma[i] + beta[i] : v;
    }
  }
  check_close (what, y, ref, total);
  pp_layer_norm (x, rows, dim, eps, gamma, beta, x);
  check_equal ("layer_norm in place", x, y, total);
}

static void
test_layer_norm (void)
{
  GRand *rng = g_rand_new_with_seed (SEED + 3);

  run_layer_norm (rng, 13, 37, 0.0, TRUE);
  run_layer_norm (rng, 5, 1, 0.0, TRUE);        /* variance 0: y = beta */
  run_layer_norm (rng, 3, 700, 50.0, TRUE);
  run_layer_norm (rng, 4, 9, 0.0, FALSE);
  run_layer_norm (rng, 1001, 320, 0.0, TRUE);   /* threads */
  g_rand_free (rng);
}

/* linear */

static void
run_linear (GRand * rng, int rows, int in, int out, gboolean with_bias)
{
  g_autofree float *x = random_floats (rng, (size_t) rows * in, 1.0);
  g_autofree float *w = random_floats (rng, (size_t) out * in, 1.0);
  g_autofree float *b = with_bias ? random_floats (rng, out, 1.0) : NULL;
  g_autofree float *y = g_new (float, (size_t) rows * out);
  g_autofree double *ref = g_new (double, (size_t) rows * out);
  g_autofree gchar *what = g_strdup_printf ("linear %dx%d -> %d%s", rows, in,
      out, with_bias ? " bias" : "");

  for (size_t i = 0; i < (size_t) rows * out; i++)
    y[i] = NAN;
  pp_linear (x, rows, in, w, b, out, y);
  for (int r = 0; r < rows; r++)
    for (int o = 0; o < out; o++) {
      double acc = b ? b[o] : 0.0;

      for (int i = 0; i < in; i++)
        acc += (double) x[(size_t) r * in + i] * w[(size_t) o * in + i];
      ref[(size_t) r * out + o] = acc;
    }
  check_close (what, y, ref, (size_t) rows * out);
}

static void
test_linear (void)
{
  GRand *rng = g_rand_new_with_seed (SEED + 4);

  run_linear (rng, 13, 37, 11, TRUE);
  run_linear (rng, 1, 5, 3, FALSE);
  run_linear (rng, 60, 32, 96, FALSE);
  run_linear (rng, 7, 129, 1, TRUE);
  /* large enough to split across threads, by rows and by columns */
  run_linear (rng, 300, 64, 48, TRUE);
  run_linear (rng, 77, 256, 200, FALSE);
  g_rand_free (rng);
}

/* matmul: strided operands (a slice of a wider matrix), every transpose,
 * with and without accumulation. */
static void
run_matmul (GRand * rng, gboolean ta, gboolean tb, int m, int n, int k,
    gboolean accumulate)
{
  const int slack = 5;
  const int a_rows = ta ? k : m, a_cols = ta ? m : k;
  const int b_rows = tb ? n : k, b_cols = tb ? k : n;
  const int lda = a_cols + slack, ldb = b_cols + slack, ldy = n + slack;
  g_autofree float *a = random_floats (rng, (size_t) a_rows * lda, 1.0);
  g_autofree float *b = random_floats (rng, (size_t) b_rows * ldb, 1.0);
  g_autofree float *y = random_floats (rng, (size_t) m * ldy, 1.0);
  g_autofree float *y0 = g_memdup2 (y, (size_t) m * ldy * sizeof (float));
  g_autofree double *ref = g_new (double, (size_t) m * n);
  g_autofree float *got = g_new (float, (size_t) m * n);
  g_autofree gchar *what = g_strdup_printf ("matmul %c%c %dx%dx%d%s",
      ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, accumulate ? " +=" : "");

  pp_matmul (ta, tb, m, n, k, a, lda, b, ldb, accumulate, y, ldy);
  for (int i = 0; i < m; i++) {
    for (int j = 0; j < n; j++) {
      double acc = accumulate ? y0[(size_t) i * ldy + j] : 0.0;

      for (int p = 0; p < k; p++)
        acc += (double) (ta ? a[(size_t) p * lda + i] : a[(size_t) i * lda
                + p]) * (tb ? b[(size_t) j * ldb + p] : b[(size_t) p * ldb
                + j]);
      ref[(size_t) i * n + j] = acc;
      got[(size_t) i * n + j] = y[(size_t) i * ldy + j];
    }
    /* the slack between rows of y is left alone */
    for (int j = n; j < ldy; j++)
      g_assert_cmpfloat (y[(size_t) i * ldy + j], ==,
          y0[(size_t) i * ldy + j]);
  }
  check_close (what, got, ref, (size_t) m * n);
}

static void
test_matmul (void)
{
  GRand *rng = g_rand_new_with_seed (SEED + 11);

  for (int t = 0; t < 4; t++) {
    run_matmul (rng, t & 1, t >> 1, 9, 7, 5, t % 2 == 0);
    run_matmul (rng, t & 1, t >> 1, 64, 200, 64, t % 2 == 1);
  }
  g_rand_free (rng);
}

/* for_rows: every row once, and ops called inside a range compute what
 * they compute outside. */
typedef struct
{
  gint *hits;
  const float *x, *w;
  float *y;
  int in, out;
} RowsCase;

static void
rows_linear (int begin, int end, gpointer data)
{
  RowsCase *c = data;

  for (int r = begin; r < end; r++)
    g_atomic_int_inc (&c->hits[r]);
  pp_linear (c->x + (size_t) begin * c->in, end - begin, c->in, c->w, NULL,
      c->out, c->y + (size_t) begin * c->out);
}

static void
test_for_rows (void)
{
  const int rows = 1000, in = 64, out = 96;
  GRand *rng = g_rand_new_with_seed (SEED + 12);
  g_autofree float *x = random_floats (rng, (size_t) rows * in, 1.0);
  g_autofree float *w = random_floats (rng, (size_t) out * in, 1.0);
  g_autofree float *y = g_new (float, (size_t) rows * out);
  g_autofree double *ref = g_new (double, (size_t) rows * out);
  g_autofree gint *hits = g_new0 (gint, rows);
  RowsCase c = { hits, x, w, y, in, out };

  for (int min_rows = 1; min_rows <= 2 * rows; min_rows *= 7) {
    memset (hits, 0, rows * sizeof (gint));
    pp_for_rows (rows, min_rows, rows_linear, &c);
    for (int r = 0; r < rows; r++)
      g_assert_cmpint (hits[r], ==, 1);
  }
  for (int r = 0; r < rows; r++)
    for (int o = 0; o < out; o++) {
      double acc = 0.0;

      for (int i = 0; i < in; i++)
        acc += (double) x[(size_t) r * in + i] * w[(size_t) o * in + i];
      ref[(size_t) r * out + o] = acc;
    }
  check_close ("for_rows linear", y, ref, (size_t) rows * out);
  pp_for_rows (0, 1, rows_linear, &c);
  g_rand_free (rng);
}

/* attention */

static void
attention_reference (const float *q, const float *k, const float *v, int n,
    int lq, int lk, int heads, int hd, double *out)
{
  const int ld = heads * hd;
  const double scale = 1.0 / sqrt (hd);
  g_autofree double *s = g_new (double, lk);

  for (int b = 0; b < n; b++)
    for (int h = 0; h < heads; h++)
      for (int i = 0; i < lq; i++) {
        const float *qi = q + ((size_t) b * lq + i) * ld + h * hd;
        double max = -INFINITY, sum = 0.0;

        for (int j = 0; j < lk; j++) {
          const float *kj = k + ((size_t) b * lk + j) * ld + h * hd;
          double dot = 0.0;

          for (int d = 0; d < hd; d++)
            dot += (double) qi[d] * kj[d];
          s[j] = dot * scale;
          max = MAX (max, s[j]);
        }
        for (int j = 0; j < lk; j++)
          sum += exp (s[j] - max);
        for (int d = 0; d < hd; d++) {
          double acc = 0.0;

          for (int j = 0; j < lk; j++)
            acc += exp (s[j] - max) / sum
                * v[((size_t) b * lk + j) * ld + h * hd + d];
          out[((size_t) b * lq + i) * ld + h * hd + d] = acc;
        }
      }
}

static void
run_attention (GRand * rng, int n, int lq, int lk, int heads, int hd,
    double amplitude)
{
  const size_t nq = (size_t) n * lq * heads * hd;
  const size_t nk = (size_t) n * lk * heads * hd;
  g_autofree float *q = random_floats (rng, nq, amplitude);
  g_autofree float *k = random_floats (rng, nk, amplitude);
  g_autofree float *v = random_floats (rng, nk, 1.0);
  g_autofree float *out = g_new (float, nq);
  g_autofree double *ref = g_new (double, nq);
  g_autofree gchar *what = g_strdup_printf ("attention n%d lq%d lk%d heads%d "
      "head_dim%d amplitude %g", n, lq, lk, heads, hd, amplitude);

  for (size_t i = 0; i < nq; i++)
    out[i] = NAN;
  pp_attention (q, k, v, n, lq, lk, heads, hd, out);
  attention_reference (q, k, v, n, lq, lk, heads, hd, ref);
  check_close (what, out, ref, nq);
}

/* Every score strongly negative (q in [6, 7], k in [-7, -6]): a row
 * maximum that took in the zero scores of padded keys would send every
 * real key's exp below the float range. */
static void
run_attention_negative (GRand * rng, int lq, int lk, int hd)
{
  const int heads = 2;
  const size_t nq = (size_t) lq * heads * hd, nk = (size_t) lk * heads * hd;
  g_autofree float *q = random_floats (rng, nq, 0.5);
  g_autofree float *k = random_floats (rng, nk, 0.5);
  g_autofree float *v = random_floats (rng, nk, 1.0);
  g_autofree float *out = g_new (float, nq);
  g_autofree double *ref = g_new (double, nq);
  g_autofree gchar *what = g_strdup_printf ("attention negative scores lq%d "
      "lk%d head_dim%d", lq, lk, hd);

  for (size_t i = 0; i < nq; i++)
    q[i] += 6.5f;
  for (size_t i = 0; i < nk; i++)
    k[i] -= 6.5f;
  pp_attention (q, k, v, 1, lq, lk, heads, hd, out);
  attention_reference (q, k, v, 1, lq, lk, heads, hd, ref);
  check_close (what, out, ref, nq);
}

static void
test_attention (void)
{
  GRand *rng = g_rand_new_with_seed (SEED + 5);

  /* More queries than one block: a full block and a partial one. */
  G_STATIC_ASSERT (300 > PP_ATTENTION_QUERY_BLOCK);
  G_STATIC_ASSERT (300 < 2 * PP_ATTENTION_QUERY_BLOCK);
  run_attention (rng, 2, 300, 37, 3, 5, 1.0);
  run_attention (rng, 2, 7, 60, 2, 16, 1.0);    /* cross: lq < lk */
  run_attention (rng, 1, 60, 60, 4, 8, 1.0);
  run_attention (rng, 1, 2 * PP_ATTENTION_QUERY_BLOCK, 5, 1, 3, 1.0);
  run_attention (rng, 1, 1, 1, 1, 1, 1.0);
  run_attention (rng, 2, 301, 257, 2, 8, 1.0);  /* threads in the softmax */
  /* Large scores: exp would overflow without subtracting the max. */
  run_attention (rng, 1, 33, 29, 2, 6, 30.0);
  /* Fused path: key blocks of 64 plus single vectors and a masked tail
   * (lk 77, 200), row groups of 4 plus single rows (lq 70, 9), p·v by
   * lanes (head_dim 8) and key by key (16, 32), large scores into the
   * exp clamp. */
  run_attention (rng, 1, 70, 77, 2, 32, 1.0);
  run_attention (rng, 2, 9, 200, 3, 16, 1.0);
  run_attention (rng, 1, 70, 130, 2, 8, 1.0);
  run_attention (rng, 1, 21, 77, 2, 8, 30.0);
  run_attention (rng, 1, 21, 77, 2, 16, 30.0);
  /* head_dim 8, exp fused with p·v: row pairs plus a lone row (lq 71, 23:
   * groups of 4 leave 3), keys past several SUM_BLOCKs (1024, 1000: not a
   * multiple of 64 or 256), text length 77, one key, large scores. */
  run_attention (rng, 1, 71, 1024, 2, 8, 1.0);
  run_attention (rng, 1, 23, 1000, 3, 8, 1.0);
  run_attention (rng, 2, 71, 77, 2, 8, 1.0);
  run_attention (rng, 1, 5, 1, 2, 8, 1.0);
  run_attention (rng, 1, 23, 1024, 2, 8, 30.0);
  /* Base-2 exp (fused_exp2): scores so large that most 2^(s - max) go
   * below the denormals, through the clamp, for both fused exps. */
  run_attention (rng, 1, 21, 77, 2, 8, 100.0);
  run_attention (rng, 1, 21, 77, 2, 16, 100.0);
  run_attention_negative (rng, 13, 77, 8);
  run_attention_negative (rng, 13, 77, 16);
  run_attention_negative (rng, 6, 1000, 8);
  g_rand_free (rng);
}

/* element-wise */

typedef double (*RefFunc) (double x);

static double
ref_silu (double x)
{
  return x / (1.0 + exp (-x));
}

static double
ref_relu (double x)
{
  return x > 0.0 ? x : 0.0;
}

static double
ref_gelu (double x)
{
  return 0.5 * x * (1.0 + erf (x / sqrt (2.0)));
}

static void
run_unary (GRand * rng, const gchar * name, size_t n,
    void (*op) (float *, size_t), RefFunc ref_func)
{
  g_autofree gchar *what = g_strdup_printf ("%s %zu", name, n);
  g_autofree float *x = random_floats (rng, n, 12.0);
  g_autofree float *y = g_memdup2 (x, n * sizeof (float));
  g_autofree double *ref = g_new (double, n);

  x[0] = 0.0f;
  x[1] = -100.0f;
  x[2] = 100.0f;
  memcpy (y, x, n * sizeof (float));
  op (y, n);
  for (size_t i = 0; i < n; i++)
    ref[i] = ref_func (x[i]);
  check_close (what, y, ref, n);
}

static void
test_unary (void)
{
  static const size_t sizes[] = { 1001, LARGE_ELEMENTS };
  GRand *rng = g_rand_new_with_seed (SEED + 6);

  /* Odd lengths, the larger one split across threads; the range covers
   * saturation on both sides. */
  for (guint i = 0; i < G_N_ELEMENTS (sizes); i++) {
    run_unary (rng, "silu", sizes[i], pp_silu, ref_silu);
    run_unary (rng, "relu", sizes[i], pp_relu, ref_relu);
    run_unary (rng, "tanh", sizes[i], pp_tanh, tanh);
    run_unary (rng, "gelu", sizes[i], pp_gelu, ref_gelu);
  }
  g_rand_free (rng);

  /* Known values. */
  g_assert_cmpfloat_with_epsilon (pp_math_gelu_erf (1.0f), 0.8413447460685429,
      1e-6);
  g_assert_cmpfloat_with_epsilon (pp_math_silu (1.0f), 0.7310585786300049,
      1e-6);
  g_assert_true (isnan (pp_math_relu (NAN)));
}

static void
run_geglu (int rows, int d)
{
  GRand *rng = g_rand_new_with_seed (SEED + 7);
  g_autofree float *x = random_floats (rng, (size_t) rows * 2 * d, 4.0);
  g_autofree float *y = g_new (float, (size_t) rows * d);
  g_autofree double *ref = g_new (double, (size_t) rows * d);
  g_autofree gchar *what = g_strdup_printf ("geglu %dx(2x%d)", rows, d);

  pp_geglu (x, rows, d, y);
  for (int r = 0; r < rows; r++)
    for (int i = 0; i < d; i++)
      ref[(size_t) r * d + i] = x[(size_t) r * 2 * d + i]
          * ref_gelu (x[(size_t) r * 2 * d + d + i]);
  check_close (what, y, ref, (size_t) rows * d);
  g_rand_free (rng);
}

static void
test_geglu (void)
{
  run_geglu (11, 13);
  run_geglu (1001, 160);        /* threads */
}

static void
run_add_scale (size_t n)
{
  GRand *rng = g_rand_new_with_seed (SEED + 8);
  g_autofree float *a = random_floats (rng, n, 1.0);
  g_autofree float *b = random_floats (rng, n, 1.0);
  g_autofree float *y = g_memdup2 (a, n * sizeof (float));
  g_autofree float *expect = g_new (float, n);

  pp_add (y, b, n);
  for (size_t i = 0; i < n; i++)
    expect[i] = a[i] + b[i];
  check_equal ("add", y, expect, n);
  pp_scale (y, n, -0.375f);
  for (size_t i = 0; i < n; i++)
    expect[i] *= -0.375f;
  check_equal ("scale", y, expect, n);
  g_rand_free (rng);
}

static void
test_add_scale (void)
{
  run_add_scale (103);
  run_add_scale (LARGE_ELEMENTS);       /* threads */
}

static void
test_add_channel (void)
{
  const int n = 2, c = 3, hw = 17;
  const size_t total = (size_t) n * c * hw;
  GRand *rng = g_rand_new_with_seed (SEED + 9);
  g_autofree float *x = random_floats (rng, total, 1.0);
  g_autofree float *v = random_floats (rng, (size_t) n * c, 1.0);
  g_autofree float *y = g_memdup2 (x, total * sizeof (float));
  g_autofree float *expect = g_new (float, total);

  pp_add_channel (y, n, c, hw, v);
  for (int b = 0; b < n; b++)
    for (int ch = 0; ch < c; ch++)
      for (int i = 0; i < hw; i++) {
        const size_t at = ((size_t) b * c + ch) * hw + i;

        expect[at] = x[at] + v[b * c + ch];
      }
  check_equal ("add_channel", y, expect, total);
  g_rand_free (rng);
}

/* layout */

static void
run_transpose (int n, int c, int hw)
{
  const size_t total = (size_t) n * c * hw;
  GRand *rng = g_rand_new_with_seed (SEED + 10);
  g_autofree float *x = random_floats (rng, total, 1.0);
  g_autofree float *nlc = g_new (float, total);
  g_autofree float *back = g_new (float, total);
  g_autofree float *expect = g_new (float, total);
  g_autofree gchar *what = g_strdup_printf ("nchw_to_nlc %dx%dx%d", n, c,
      hw);

  pp_nchw_to_nlc (x, n, c, hw, nlc);
  for (int b = 0; b < n; b++)
    for (int ch = 0; ch < c; ch++)
      for (int i = 0; i < hw; i++)
        expect[((size_t) b * hw + i) * c + ch] =
            x[((size_t) b * c + ch) * hw + i];
  check_equal (what, nlc, expect, total);
  pp_nlc_to_nchw (nlc, n, c, hw, back);
  check_equal ("nlc_to_nchw round trip", back, x, total);
  g_rand_free (rng);
}

static void
test_transpose (void)
{
  static const int shapes[][3] = {
    {2, 37, 70},                /* not multiples of the tile */
    {2, 320, 1030},             /* threads */
  };

  for (guint i = 0; i < G_N_ELEMENTS (shapes); i++)
    run_transpose (shapes[i][0], shapes[i][1], shapes[i][2]);
}

static void
test_concat (void)
{
  const int n = 2, ca = 3, cb = 5, hw = 7;
  const size_t total = (size_t) n * (ca + cb) * hw;
  GRand *rng = g_rand_new_with_seed (SEED + 11);
  g_autofree float *a = random_floats (rng, (size_t) n * ca * hw, 1.0);
  g_autofree float *b = random_floats (rng, (size_t) n * cb * hw, 1.0);
  g_autofree float *y = g_new (float, total);
  g_autofree float *expect = g_new (float, total);

  pp_concat_channels (a, ca, b, cb, n, hw, y);
  for (int s = 0; s < n; s++)
    for (int ch = 0; ch < ca + cb; ch++)
      for (int i = 0; i < hw; i++)
        expect[((size_t) s * (ca + cb) + ch) * hw + i] = ch < ca
            ? a[((size_t) s * ca + ch) * hw + i]
            : b[((size_t) s * cb + ch - ca) * hw + i];
  check_equal ("concat_channels", y, expect, total);
  g_rand_free (rng);
}

static void
run_upsample (GRand * rng, int n, int c, int h, int w, int f)
{
  const size_t total = (size_t) n * c * h * f * w * f;
  g_autofree float *x = random_floats (rng, (size_t) n * c * h * w, 1.0);
  g_autofree float *y = g_new (float, total);
  g_autofree float *expect = g_new (float, total);
  g_autofree gchar *what = g_strdup_printf ("upsample_nearest %dx%dx%dx%d "
      "x%d", n, c, h, w, f);

  pp_upsample_nearest (x, n, c, h, w, f, y);
  for (int p = 0; p < n * c; p++)
    for (int oy = 0; oy < h * f; oy++)
      for (int ox = 0; ox < w * f; ox++)
        expect[((size_t) p * h * f + oy) * w * f + ox] =
            x[((size_t) p * h + oy / f) * w + ox / f];
  check_equal (what, y, expect, total);
}

static void
test_upsample (void)
{
  GRand *rng = g_rand_new_with_seed (SEED + 12);

  run_upsample (rng, 2, 3, 5, 7, 2);
  run_upsample (rng, 1, 2, 3, 4, 3);
  run_upsample (rng, 1, 2, 3, 4, 1);
  run_upsample (rng, 2, 64, 33, 17, 2);         /* threads */
  g_rand_free (rng);
}

/* timestep embedding */

static void
check_embedding (float t, int dim, gboolean flip, float shift)
{
  const int half = dim / 2;
  g_autofree float *y = g_new (float, dim);
  g_autofree double *ref = g_new (double, dim);
  g_autofree gchar *what = g_strdup_printf ("timestep_embedding t=%g dim %d "
      "%s shift %g", t, dim, flip ? "[cos,sin]" : "[sin,cos]", shift);

  for (int i = 0; i < dim; i++)
    y[i] = NAN;
  pp_timestep_embedding (t, dim, flip, shift, y);
  for (int k = 0; k < half; k++) {
    /* Closed form: f_k = 10000^(-k / (half - shift)). */
    const double f = pow (10000.0, -(double) k / (half - shift));

    ref[flip ? half + k : k] = sin (t * f);
    ref[flip ? k : half + k] = cos (t * f);
  }
  if (dim % 2)
    ref[dim - 1] = 0.0;
  check_close (what, y, ref, dim);
}

static void
test_timestep_embedding (void)
{
  float y[8];

  /* t = 0: sin 0 = 0, cos 0 = 1, exactly. */
  pp_timestep_embedding (0.0f, 8, TRUE, 0.0f, y);
  for (int i = 0; i < 4; i++) {
    g_assert_cmpfloat (y[i], ==, 1.0f);
    g_assert_cmpfloat (y[4 + i], ==, 0.0f);
  }
  /* dim 8, shift 0: frequencies 1, 0.1, 0.01, 0.001. */
  pp_timestep_embedding (1.0f, 8, FALSE, 0.0f, y);
  g_assert_cmpfloat_with_epsilon (y[0], sin (1.0), 1e-7);
  g_assert_cmpfloat_with_epsilon (y[1], sin (0.1), 1e-7);
  g_assert_cmpfloat_with_epsilon (y[3], sin (0.001), 1e-7);
  g_assert_cmpfloat_with_epsilon (y[7], cos (0.001), 1e-7);

  check_embedding (357.0f, 8, TRUE, 0.0f);
  check_embedding (357.0f, 8, FALSE, 0.0f);
  check_embedding (999.0f, 320, TRUE, 0.0f);
  check_embedding (0.5f, 32, FALSE, 1.0f);
  check_embedding (42.0f, 7, TRUE, 0.0f);       /* odd: trailing 0 */
}

/* The vectorisable exp and erf of pp-ops-math.h against libm in double,
 * on a dense sweep. */
static void
test_math (void)
{
  const int steps = 2000000;
  double exp_err = 0.0, erf_err = 0.0, arg_exp = 0.0, arg_erf = 0.0;

  for (int i = 0; i <= steps; i++) {
    /* Where e^x is a normal float. */
    const float x = (float) (-86.5 + (88.5 + 86.5) * i / steps);
    const double e = fabs (pp_math_exp (x) / exp ((double) x) - 1.0);
    const float z = (float) (-10.0 + 20.0 * i / steps);
    const double f = fabs (pp_math_erf (z) - erf ((double) z));

    if (e > exp_err) {
      exp_err = e;
      arg_exp = x;
    }
    if (f > erf_err) {
      erf_err = f;
      arg_erf = z;
    }
  }
  g_test_message ("exp: max relative error %.3g at %g; erf: max abs error "
      "%.3g at %g", exp_err, arg_exp, erf_err, arg_erf);
  /* exp: a few float ulps (one is 6e-8 relative).  erf: A&S 7.1.26 is
   * 1.5e-7 in exact arithmetic; in float, erf = 1 - erfc loses up to a few
   * ulps of 1 (1.2e-7 each) near 0, where GELU multiplies it by x/2. */
  g_assert_cmpfloat (exp_err, <, 3e-7);
  g_assert_cmpfloat (erf_err, <, 1e-6);
  g_assert_cmpfloat (pp_math_exp (0.0f), ==, 1.0f);
  /* The ends: 0 (never a denormal) and inf, as far as float reaches. */
  g_assert_cmpfloat (pp_math_exp (-1000.0f), ==, 0.0f);
  g_assert_cmpfloat (pp_math_exp (-87.4f), ==, 0.0f);
  g_assert_cmpfloat (pp_math_exp (-86.5f), >=, FLT_MIN);
  g_assert_cmpfloat_with_epsilon (pp_math_exp (88.5f) / exp (88.5), 1.0,
      3e-7);
  g_assert_true (isinf (pp_math_exp (88.8f)));
  g_assert_true (isinf (pp_math_exp (1000.0f)));
  g_assert_true (isnan (pp_math_exp (NAN)));
  g_assert_true (isnan (pp_math_gelu_erf (NAN)));
}

/* The table and the wrappers agree. */
static void
test_table (void)
{
  float a[3] = { -1.0f, 0.5f, 2.0f }, b[3] = { -1.0f, 0.5f, 2.0f };

  g_assert_cmpstr (pp_ops_cpu.name, ==, "cpu");
  pp_ops_cpu.relu (a, 3);
  pp_relu (b, 3);
  check_equal ("table relu", a, b, 3);
  g_assert_cmpfloat (a[0], ==, 0.0f);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_message ("threads of the CPU ops: %u",
      pp_cpu_parallel_threads ());
  g_test_add_func ("/kernels/ops/table", test_table);
  g_test_add_func ("/kernels/ops/math", test_math);
  g_test_add_func ("/kernels/ops/conv2d", test_conv2d);
  g_test_add_func ("/kernels/ops/conv2d-bands", test_conv2d_bands);
  g_test_add_func ("/kernels/ops/group-norm", test_group_norm);
  g_test_add_func ("/kernels/ops/layer-norm", test_layer_norm);
  g_test_add_func ("/kernels/ops/linear", test_linear);
  g_test_add_func ("/kernels/ops/matmul", test_matmul);
  g_test_add_func ("/kernels/ops/for-rows", test_for_rows);
  g_test_add_func ("/kernels/ops/attention", test_attention);
  g_test_add_func ("/kernels/ops/unary", test_unary);
  g_test_add_func ("/kernels/ops/geglu", test_geglu);
  g_test_add_func ("/kernels/ops/add-scale", test_add_scale);
  g_test_add_func ("/kernels/ops/add-channel", test_add_channel);
  g_test_add_func ("/kernels/ops/transpose", test_transpose);
  g_test_add_func ("/kernels/ops/concat", test_concat);
  g_test_add_func ("/kernels/ops/upsample", test_upsample);
  g_test_add_func ("/kernels/ops/timestep-embedding",
      test_timestep_embedding);
  return g_test_run ();
}
