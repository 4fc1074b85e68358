/* Tests of the CPU ops against naive float64 references written here with
 * direct loops (no im2col, no GEMM, no blocking), on random inputs with odd
 * sizes.
 *
 * A test proves something only at the shapes and team sizes it runs, so
 * the shapes here come from the thresholds in pp-cpu-tuning.h and
 * pp-ops.h, one case on each side of each, and the CPU backend's path
 * counters (pp_cpu_path_count) prove that every case took the kernel, the
 * bands and the thread split it was written for.  meson runs this file at
 * 1, 2 and 4 threads (PPDIFFUSE_CPU_THREADS), and again built without the
 * AVX-512 kernels and clones (kernels-ops-portable-*), where the cases
 * written for those kernels run through the portable ones.
 *
 * Coverage: threshold (file) → the cases below and at/above it.  "Split"
 * is a parallel loop run on the team: n ≥ 2·min_chunk items, 2+ threads.
 *
 *   Element-wise (elementwise.c)
 *   silu/tanh/gelu split: n ≥ 2·GRAIN_MATH      /unary: 2·G - 1, 2·G
 *   relu, add, scale: n ≥ 2·GRAIN_MEMORY        /unary, /add-scale: same
 *   vector tails (4, 8, 16 lanes)               /unary, /add-scale: n < 16
 *   geglu rows ≥ 2·(GRAIN_MATH/d + 1)           /geglu: both sides, d 13, 160
 *   add_channel planes ≥ 2·(GRAIN_MEMORY/hw+1)  /add-channel: both sides, and
 *                                               hw > GRAIN_MEMORY (chunk 1)
 *   Layout (layout.c)
 *   TRANSPOSE_TILE: rows, cols <, =, > tile     /transpose
 *   transpose bands ≥ 2·(G/(tile·cols) + 1)     /transpose: both sides, both
 *                                               directions
 *   upsample planes ≥ 2·(G/(h·w·f²) + 1)        /upsample: both sides
 *   Normalisation (norm.c)
 *   NORM_BLOCK: count <16, <, =, > block, many  /group-norm, /layer-norm
 *   group split n·groups ≥ 2·(G/count + 1)      /group-norm: both sides
 *   layer split rows ≥ 2·(G/dim + 1)            /layer-norm: both sides
 *   GEMM (gemm.c; also test-parallel.c /gemm-thresholds)
 *   flops ≥ 2·GEMM_GRAIN_FLOPS, len > ALIGN     /linear: both sides of each
 *   rows (m ≥ n) or columns                     /linear, /matmul
 *   Attention (attention.c)
 *   head_dim ≤ FUSED_MAX_HEAD_DIM: fused        /attention-fused: 32, 24, 16,
 *                                               8, 6, 5, 3, 1
 *   head_dim > it (33, 40, 64, 80, 160): GEMM   /attention-gemm
 *   lq vs PP_ATTENTION_QUERY_BLOCK              /attention-gemm: QB-1, QB,
 *                                               QB+1, 2·QB
 *   softmax rows ≥ 2·(GRAIN_SCORES/lk + 1)      /attention-gemm: both sides
 *   SUM_BLOCK, PP_CPU_LANES (softmax rows)      /attention-*: lk 5, 16, 63-65,
 *                                               SUM_BLOCK ± 1, 2·SUM_BLOCK+37
 *   fused rows: FUSED_ROWS groups, lone rows,   /attention-fused: lq % 4 = 1-3,
 *   FUSED_PAIR (head_dim 8), chunk boundaries   chunks starting inside a head
 *   fused split heads·⌈lq/FUSED_ROWS⌉ ≥         /attention-fused: both sides
 *     2·FUSED_GRAIN_ROWS/FUSED_ROWS
 *   fused packing split: heads ≥ 2              /attention-fused: 1, 2 heads
 *   Convolution (conv.c)
 *   1×1 s1 p0: GEMM on x; other 1×1: im2col     /conv2d
 *   3×3 s1 p1: direct (w ≥ NARROW_BELOW_WIDTH,  /conv2d-kernels: w = 16, 32,
 *   w % DIRECT_LANES = 0), else narrow          33, 48, 64
 *   DIRECT_PACK_MIN_PIXELS                      /conv2d-kernels: n·h·w = P-32,
 *                                               P (by rows and by samples)
 *   DIRECT_BAND_FLOATS: one band, several,      /conv2d-bands
 *   one row a band (clamp)
 *   NARROW_BAND_FLOATS: same, and the budget    /conv2d-bands
 *   under two rows (wrapped around before)
 *   narrow pixel blocks: 1-4 vectors, masks     /conv2d-kernels: 5, 35, 64, 80,
 *                                               81, 104, 120 pixels
 *   narrow split: blocks ≥ 2·(GRAIN/flops + 1)  /conv2d-kernels: both sides
 *   direct split: band rows ≥ 2                 /conv2d-kernels: 1 and 2 rows
 *   band copies' split over input channels      /conv2d-kernels: both sides,
 *   (CONV_GRAIN_COL_VALUES)                     direct and narrow
 *   PP_CONV2D_COL_MAX_FLOATS: one band,         /conv2d-bands; /conv2d for one
 *   several, one row a band (clamp)
 *   im2col split: cin ≥ 2·(G/(kh·kw·cols) + 1)  /conv2d-kernels: both sides
 *   im2col strides 1, 2, other; taps wholly     /conv2d
 *   in the padding
 *   Parallel loop (parallel.c): test-parallel.c (both sides of 2·min_chunk,
 *   nested, concurrent callers, sleeping helpers, a forked child).  The
 *   chunk cap MAX_CHUNKS needs over 16k threads: unreachable.
 *   Vector clones (vectorize.h): AVX-512 in kernels-ops-*, AVX2 in
 *   kernels-ops-portable-* on AVX-512 machines; the baseline clone runs
 *   only on CPUs without AVX2 (a clang build runs clang's own baseline
 *   code).
 *   pp_resize_bilinear (be, pp-image.c): test-resize.c.
 *
 * Error bounds: each check divides |got - ref| by the magnitude the op's
 * float32 rounding error grows with (its "scale", given with each op) and
 * bounds the largest result in FLT_EPSILONs; the TOL_* values are about
 * 10-20× the largest measured at these shapes (gcc with and without the
 * AVX-512 kernels, clang; 1, 2 and 4 threads; noted beside each), where
 * a wrong index or formula is off by the scale itself, ~10⁷ epsilons.  Run
 * with --verbose for each check's normalised error, max abs error and NMSE
 * (Σ(got - ref)² / Σ ref²). */
#include "pp-ops.h"
#include "pp-ops-reference.h"
#include "pp-backend.h"
#include "pp-ops-math.h"
#include "pp-dtype-math.h"
#include "cpu-paths.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* The CPU kernels, through their backend's table. */
static PpBackend *be;

#define SEED 20240611

/* Scales, and each bound in FLT_EPSILONs of its scale. */
/* Dot products (conv2d, linear, matmul): sqrt(K) · max |ref|.  A float sum
 * of K terms drifts like a random walk of roundings of partial sums
 * (~ eps · σ · K) while |ref| grows like σ · sqrt(K).  Measured ≤ 0.46. */
#define TOL_DOT 8.0
/* Attention: max |v| · max(1, max |score|): a score's rounding moves its
 * weight by that much relative.  Measured ≤ 0.93. */
#define TOL_ATTENTION 12.0
/* Norms: max |ref|.  Measured ≤ 0.93. */
#define TOL_NORM 12.0
/* SiLU, tanh: |ref| per value; GELU: |x| per value (A&S 7.1.26 bounds
 * erf's absolute error, so GELU's relative error grows in the negative
 * tail where GELU → 0); GEGLU: |value · gate|.  Measured ≤ 2.3. */
#define TOL_UNARY 30.0
/* Timestep embedding: 1 + |t · f|, the argument being rounded to float
 * first as in PyTorch, and f itself coming from expf of an argument up to
 * ln 10⁴ ≈ 9.2 (up to ~10 eps of t · f).  Measured ≤ 2.6. */
#define TOL_EMBEDDING 30.0
/* Values below this count as 0 in a relative scale: pp_math_exp gives 0
 * below e^-87.5 ≈ 1e-38 by design. */
#define SCALE_FLOOR 1e-30

static float *
random_floats (GRand * rng, size_t n, double amplitude)
{
  float *p = g_new (float, n);

  for (size_t i = 0; i < n; i++)
    p[i] = (float) g_rand_double_range (rng, -amplitude, amplitude);
  return p;
}

static double
max_abs (const double *p, size_t n)
{
  double m = 0.0;

  for (size_t i = 0; i < n; i++)
    m = MAX (m, fabs (p[i]));
  return m;
}

static double
max_abs_float (const float *p, size_t n)
{
  double m = 0.0;

  for (size_t i = 0; i < n; i++)
    m = MAX (m, fabs (p[i]));
  return m;
}

/* Compares @got with the float64 reference @ref.  The error of value i is
 * |got - ref| / scale_i in FLT_EPSILONs, scale_i being @scale[i] or, when
 * @scale is NULL, @scale_all; fails when the largest exceeds @tol or a
 * value is not finite. */
static void
check_close (const gchar * what, const float *got, const double *ref,
    size_t n, const double *scale, double scale_all, double tol)
{
  double worst = 0.0, worst_abs = 0.0, sum_err = 0.0, sum_ref = 0.0;
  size_t at = 0;

  for (size_t i = 0; i < n; i++) {
    const double d = (double) got[i] - ref[i];
    const double s = MAX (scale ? scale[i] : scale_all, SCALE_FLOOR);
    const double e = fabs (d) / s / FLT_EPSILON;

    if (!isfinite (got[i]))
      g_error ("%s: value %zu is %g, expected %.9g", what, i, got[i],
          ref[i]);
    if (e > worst) {
      worst = e;
      at = i;
    }
    worst_abs = MAX (worst_abs, fabs (d));
    sum_err += d * d;
    sum_ref += ref[i] * ref[i];
  }
  g_test_message ("%s: %zu values, max error %.3g eps of scale (bound %g), "
      "max abs error %.3g, NMSE %.3g", what, n, worst, tol, worst_abs,
      sum_ref > 0.0 ? sum_err / sum_ref : sum_err);
  if (worst > tol)
    g_error ("%s: error %.3g eps of scale %.3g at %zu (got %.9g, expected "
        "%.9g) exceeds %g", what, worst, scale ? scale[at] : scale_all, at,
        got[at], ref[at], tol);
}

/* check_close for a dot product of @k terms per value. */
static void
check_dot (const gchar * what, const float *got, const double *ref, size_t n,
    int k)
{
  check_close (what, got, ref, n, NULL, sqrt (k) * max_abs (ref, n),
      TOL_DOT);
}

static void
check_equal (const gchar * what, const float *got, const float *expect,
    size_t n)
{
  for (size_t i = 0; i < n; i++)
    if (memcmp (&got[i], &expect[i], sizeof (float)) != 0)
      g_error ("%s: value %zu is %.9g, expected %.9g", what, i, got[i],
          expect[i]);
  g_test_message ("%s: %zu values, exact", what, n);
}

/* Path counters */

static void
check_path (const gchar * what, const Paths * before, PpCpuPath path,
    guint64 expected)
{
  const guint64 got = paths_since (before, path);

  if (got != expected)
    g_error ("%s: path counter %d went up by %" G_GUINT64_FORMAT
        ", expected %" G_GUINT64_FORMAT, what, path, got, expected);
}

/* Parallel loops run on the team since @before, less those of split GEMMs
 * (one each when there is a team to run them: a GEMM's blocks do not depend
 * on the team size): the op's own loops. */
static guint64
own_splits (const Paths * before)
{
  const guint64 gemm_loops = pp_cpu_parallel_threads () > 1
      ? paths_since (before, PP_CPU_PATH_GEMM_SPLIT_ROWS)
      + paths_since (before, PP_CPU_PATH_GEMM_SPLIT_COLS) : 0;

  return paths_since (before, PP_CPU_PATH_LOOP_SPLIT) - gemm_loops;
}

static void
check_splits (const gchar * what, const Paths * before, guint64 expected)
{
  const guint64 got = own_splits (before);

  if (got != expected)
    g_error ("%s: %" G_GUINT64_FORMAT " parallel loops ran on the team, "
        "expected %" G_GUINT64_FORMAT " (%u threads)", what, got, expected,
        pp_cpu_parallel_threads ());
}

/* The kernels are there where they should be. */
static void
test_paths (void)
{
#ifdef PP_CPU_AVX512_KERNELS
  const gboolean cpu = __builtin_cpu_supports ("avx512f")
      && __builtin_cpu_supports ("fma");

  g_assert_cmpint (pp_cpu_avx512_kernels (), ==, cpu);
#else
  g_assert_false (pp_cpu_avx512_kernels ());
#endif
  g_test_message ("threads %u, AVX-512 kernels %s",
      pp_cpu_parallel_threads (), pp_cpu_avx512_kernels () ? "on" : "off");
}

/* conv2d */

typedef enum
{
  CONV_1X1,                     /* one GEMM per sample on x as it is */
  CONV_IM2COL,
  CONV_DIRECT,                  /* AVX-512 row kernel */
  CONV_NARROW,                  /* AVX-512 kernel across rows */
} ConvKernel;

/* Unchecked thread splits. */
#define ANY_SPLITS -1

typedef struct
{
  int n, cin, h, w, cout, kh, kw, stride, pad;
  gboolean bias;
  /* The kernel the case is written for where the AVX-512 kernels run. */
  ConvKernel kernel;
  /* Loops the op runs on the team (2+ threads), or ANY_SPLITS. */
  int splits;
} ConvCase;

/* Rows per band of the direct and narrow kernels (as long as that is at
 * least 1), and output rows per band through im2col: each band's buffer
 * within its budget. */
#define DIRECT_BAND_ROWS(cin, w) \
  (PP_CPU_DIRECT_BAND_FLOATS / ((cin) * ((w) + 2)) - 2)
#define NARROW_BAND_ROWS(cin, w) \
  (PP_CPU_NARROW_BAND_FLOATS / (3 * (cin) * (w)) - 2)
#define IM2COL_BAND_ROWS(k_len, wo) \
  (PP_CONV2D_COL_MAX_FLOATS / ((k_len) * (wo)))
/* Input channels that leave @rows per band of width @w. */
#define DIRECT_CIN_FOR_ROWS(rows, w) \
  (PP_CPU_DIRECT_BAND_FLOATS / (((w) + 2) * ((rows) + 2)))
#define NARROW_CIN_FOR_ROWS(rows, w) \
  (PP_CPU_NARROW_BAND_FLOATS / (3 * (w) * ((rows) + 2)))
/* The narrow kernel's pixels per block and flops per (block, channel
 * tile), and its minimum chunk for one input channel. */
#define NARROW_BLOCK (PP_CPU_NARROW_VECS * PP_CPU_NARROW_LANES)
#define NARROW_ITEM_FLOPS(cin) \
  (2 * 9 * (cin) * PP_CPU_NARROW_COUT_TILE * NARROW_BLOCK)
#define NARROW_MIN_BLOCKS \
  (PP_CPU_NARROW_GRAIN_FLOPS / NARROW_ITEM_FLOPS (1) + 1)
/* im2col's minimum chunk of input channels for a 3×3 kernel and @cols
 * columns. */
#define IM2COL_MIN_CIN(cols) (PP_CPU_CONV_GRAIN_COL_VALUES / (9 * (cols)) + 1)
/* Floats of one of the narrow kernel's shifted input planes for @rows
 * output rows of width @w: the rows and their halo, whole cache lines and
 * the masked last vector's slack. */
#define NARROW_PLANE(rows, w) \
  ((((rows) + 2) * (w) + 2 * PP_CPU_NARROW_LANES - 1) / PP_CPU_NARROW_LANES \
      * PP_CPU_NARROW_LANES)

/* The fewest input channels for which the direct kernel's band copy runs
 * on the team, a padded band row of one channel being @row floats: its
 * minimum chunk is the grain over a row of all channels. */
static int
first_split_cin (int row)
{
  int cin = 1;

  while (cin < 2 * (PP_CPU_CONV_GRAIN_COL_VALUES / (cin * row) + 1))
    cin++;
  return cin;
}

static ConvKernel
expected_kernel (const ConvCase * c)
{
  if (c->kh == 1 && c->kw == 1 && c->stride == 1 && c->pad == 0)
    return CONV_1X1;
  if (pp_cpu_avx512_kernels () && c->kh == 3 && c->kw == 3 && c->stride == 1
      && c->pad == 1)
    return c->w >= PP_CPU_NARROW_BELOW_WIDTH
        && c->w % PP_CPU_DIRECT_LANES == 0 ? CONV_DIRECT : CONV_NARROW;
  return CONV_IM2COL;
}

/* Bands (1×1: samples) the kernel runs for the case. */
static guint64
expected_bands (const ConvCase * c, ConvKernel kernel)
{
  const int ho = pp_conv2d_out_size (c->h, c->kh, c->stride, c->pad);
  const int wo = pp_conv2d_out_size (c->w, c->kw, c->stride, c->pad);
  const guint64 k_len = (guint64) c->cin * c->kh * c->kw;
  guint64 rows = 1;

  switch (kernel) {
    case CONV_1X1:
      return c->n;
    case CONV_IM2COL:
      rows = CLAMP (PP_CONV2D_COL_MAX_FLOATS / (k_len * wo), 1, (guint64) ho);
      return c->n * ceil_div (ho, rows);
    case CONV_DIRECT:
      rows = CLAMP (PP_CPU_DIRECT_BAND_FLOATS / ((guint64) c->cin * (c->w
                  + 2)), 3, (guint64) c->h + 2) - 2;
      break;
    case CONV_NARROW:
      rows = CLAMP (PP_CPU_NARROW_BAND_FLOATS / (3 * (guint64) c->cin
              * c->w), 3, (guint64) c->h + 2) - 2;
      break;
  }
  return c->n * ceil_div (c->h, rows);
}

static const PpCpuPath conv_paths[] = {
  [CONV_1X1] = PP_CPU_PATH_CONV_1X1,
  [CONV_IM2COL] = PP_CPU_PATH_CONV_IM2COL_BAND,
  [CONV_DIRECT] = PP_CPU_PATH_CONV_DIRECT_BAND,
  [CONV_NARROW] = PP_CPU_PATH_CONV_NARROW_BAND,
};

static const gchar *const conv_names[] = {
  [CONV_1X1] = "1x1", [CONV_IM2COL] = "im2col", [CONV_DIRECT] = "direct",
  [CONV_NARROW] = "narrow",
};

static void
run_conv_case (GRand * rng, const ConvCase * c)
{
  const int ho = pp_conv2d_out_size (c->h, c->kh, c->stride, c->pad);
  const int wo = pp_conv2d_out_size (c->w, c->kw, c->stride, c->pad);
  const size_t n_in = (size_t) c->n * c->cin * c->h * c->w;
  const size_t n_w = (size_t) c->cout * c->cin * c->kh * c->kw;
  const size_t n_out = (size_t) c->n * c->cout * ho * wo;
  const ConvKernel kernel = expected_kernel (c);
  g_autofree float *x = random_floats (rng, n_in, 1.0);
  g_autofree float *wt = random_floats (rng, n_w, 0.5);
  g_autofree float *bias = c->bias ? random_floats (rng, c->cout, 1.0) : NULL;
  g_autofree float *y = g_new (float, n_out);
  g_autofree double *ref = g_new (double, n_out);
  g_autofree gchar *what = g_strdup_printf ("conv2d n%d %dx%dx%d -> %d "
      "k%dx%d s%d p%d%s (out %dx%d, %s)", c->n, c->cin, c->h, c->w, c->cout,
      c->kh, c->kw, c->stride, c->pad, c->bias ? " bias" : "", ho, wo,
      conv_names[kernel]);
  Paths before;

  g_assert_cmpint (ho, >, 0);
  g_assert_cmpint (wo, >, 0);
  /* The case list says which kernel each case is for. */
  if (pp_cpu_avx512_kernels () && kernel != c->kernel)
    g_error ("%s: written for the %s kernel", what, conv_names[c->kernel]);
  /* NaN canaries: every output must be written. */
  for (size_t i = 0; i < n_out; i++)
    y[i] = NAN;
  before = paths_now ();
  pp_conv2d (be, pp_view_f32 (x, n_in), c->n, c->cin, c->h, c->w,
      pp_view_f32 (wt, n_w), pp_view_f32 (bias, c->cout), c->cout, c->kh,
      c->kw, c->stride, c->pad, pp_view_none (), FALSE, pp_out_f32 (y, n_out));
  for (guint k = 0; k < G_N_ELEMENTS (conv_paths); k++)
    check_path (what, &before, conv_paths[k],
        k == kernel ? expected_bands (c, kernel) : 0);
  check_path (what, &before, PP_CPU_PATH_CONV_DIRECT_PACKED,
      kernel == CONV_DIRECT
      && (size_t) c->n * c->h * c->w >= PP_CPU_DIRECT_PACK_MIN_PIXELS);
  if (c->splits != ANY_SPLITS && kernel == c->kernel)
    check_splits (what, &before, pp_cpu_parallel_threads () > 1
        ? (guint64) c->splits : 0);
  pp_ref_conv2d (x, c->n, c->cin, c->h, c->w, wt, bias, c->cout, c->kh,
      c->kw, c->stride, c->pad, ref);
  check_dot (what, y, ref, n_out, c->cin * c->kh * c->kw);

  /* With a residual, and its relu: the convolution, add and relu apart,
   * byte for byte. */
  {
    g_autofree float *res = random_floats (rng, n_out, 1.0);
    g_autofree float *fused = g_new (float, n_out);
    g_autofree float *apart = g_memdup2 (y, n_out * sizeof (float));
    g_autofree gchar *res_what = g_strconcat (what, ", residual, relu",
        NULL);

    pp_conv2d (be, pp_view_f32 (x, n_in), c->n, c->cin, c->h, c->w,
        pp_view_f32 (wt, n_w), pp_view_f32 (bias, c->cout), c->cout, c->kh,
        c->kw, c->stride, c->pad, pp_view_f32 (res, n_out), TRUE,
        pp_out_f32 (fused, n_out));
    pp_add (be, pp_out_f32 (apart, n_out), pp_view_f32 (res, n_out), n_out);
    pp_relu (be, pp_out_f32 (apart, n_out), n_out);
    check_equal (res_what, fused, apart, n_out);
  }
}

static void
run_conv_cases (guint32 seed, const ConvCase * cases, guint n)
{
  GRand *rng = g_rand_new_with_seed (seed);

  for (guint i = 0; i < n; i++)
    run_conv_case (rng, &cases[i]);
  g_rand_free (rng);
}

/* Shapes, strides, paddings and the GEMM and im2col paths. */
static void
test_conv2d (void)
{
  static const ConvCase cases[] = {
    {2, 5, 9, 13, 7, 3, 3, 1, 1, TRUE, CONV_NARROW, ANY_SPLITS},
    {2, 5, 9, 13, 7, 3, 3, 2, 1, TRUE, CONV_IM2COL, ANY_SPLITS},
    /* stride 1 without padding: im2col's memcpy rows in every build */
    {2, 5, 9, 13, 7, 3, 3, 1, 0, FALSE, CONV_IM2COL, ANY_SPLITS},
    {2, 5, 9, 13, 7, 3, 3, 2, 0, FALSE, CONV_IM2COL, ANY_SPLITS},
    {2, 5, 8, 11, 7, 3, 3, 2, 1, FALSE, CONV_IM2COL, ANY_SPLITS},
    /* only the centre tap is inside */
    {1, 3, 1, 1, 4, 3, 3, 1, 1, TRUE, CONV_NARROW, ANY_SPLITS},
    {2, 5, 9, 13, 7, 1, 1, 1, 0, TRUE, CONV_1X1, ANY_SPLITS},
    {2, 5, 9, 13, 7, 1, 1, 1, 0, FALSE, CONV_1X1, ANY_SPLITS},
    /* strided and padded 1×1: im2col, whole border rows of padding */
    {2, 5, 9, 13, 7, 1, 1, 2, 0, FALSE, CONV_IM2COL, ANY_SPLITS},
    {1, 5, 9, 13, 7, 1, 1, 1, 1, TRUE, CONV_IM2COL, ANY_SPLITS},
    /* kh ≠ kw; stride 3 (the general strided copy) */
    {2, 4, 7, 10, 3, 3, 1, 1, 1, TRUE, CONV_IM2COL, ANY_SPLITS},
    {1, 2, 5, 6, 3, 5, 5, 3, 2, TRUE, CONV_IM2COL, ANY_SPLITS},
    /* a kernel wider than the input: taps that see only padding */
    {1, 2, 3, 2, 3, 5, 5, 1, 2, TRUE, CONV_IM2COL, ANY_SPLITS},
  };

  run_conv_cases (SEED, cases, G_N_ELEMENTS (cases));
}

/* Which 3×3 kernel takes which width, the direct kernel's weight packing,
 * the narrow kernel's pixel blocks, and the thread splits of the narrow
 * kernel and of im2col. */
static void
test_conv2d_kernels (void)
{
  static const ConvCase cases[] = {
    /* direct from NARROW_BELOW_WIDTH when a multiple of DIRECT_LANES;
     * below it (a multiple too) or not a multiple: narrow */
    {1, 4, 5, PP_CPU_NARROW_BELOW_WIDTH, 5, 3, 3, 1, 1, TRUE, CONV_DIRECT,
        ANY_SPLITS},
    {1, 4, 5, PP_CPU_NARROW_BELOW_WIDTH - PP_CPU_DIRECT_LANES, 5, 3, 3, 1, 1,
        TRUE, CONV_NARROW, ANY_SPLITS},
    {1, 4, 5, PP_CPU_NARROW_BELOW_WIDTH + 1, 5, 3, 3, 1, 1, TRUE,
        CONV_NARROW, ANY_SPLITS},
    /* direct: full tiles plus a one-vector tail; two full tiles; output
     * channel tiles full, partial, and less than one */
    {1, 9, 5, PP_CPU_NARROW_BELOW_WIDTH + PP_CPU_DIRECT_LANES,
        PP_CPU_DIRECT_COUT_TILE + 5, 3, 3, 1, 1, FALSE, CONV_DIRECT,
        ANY_SPLITS},
    {2, 10, 11, 2 * PP_CPU_NARROW_BELOW_WIDTH, PP_CPU_DIRECT_COUT_TILE, 3, 3,
        1, 1, TRUE, CONV_DIRECT, ANY_SPLITS},
    {1, 6, 7, PP_CPU_NARROW_BELOW_WIDTH, 3, 3, 3, 1, 1, TRUE, CONV_DIRECT,
        ANY_SPLITS},
    /* weights repacked from DIRECT_PACK_MIN_PIXELS output pixels (rows or
     * samples), read as they are below */
    {1, 3, PP_CPU_DIRECT_PACK_MIN_PIXELS / PP_CPU_NARROW_BELOW_WIDTH - 1,
        PP_CPU_NARROW_BELOW_WIDTH, 9, 3, 3, 1, 1, TRUE, CONV_DIRECT,
        ANY_SPLITS},
    {1, 3, PP_CPU_DIRECT_PACK_MIN_PIXELS / PP_CPU_NARROW_BELOW_WIDTH,
        PP_CPU_NARROW_BELOW_WIDTH, 9, 3, 3, 1, 1, TRUE, CONV_DIRECT,
        ANY_SPLITS},
    {2, 3, PP_CPU_DIRECT_PACK_MIN_PIXELS / PP_CPU_NARROW_BELOW_WIDTH / 2,
        PP_CPU_NARROW_BELOW_WIDTH, 9, 3, 3, 1, 1, FALSE, CONV_DIRECT,
        ANY_SPLITS},
    /* narrow pixel blocks of NARROW_BLOCK: 1-4 vectors, masked or whole,
     * rows packed back to back (8 wide: two rows a vector); output channel
     * tiles full, partial, several */
    {1, 3, 1, 5, PP_CPU_NARROW_COUT_TILE, 3, 3, 1, 1, TRUE, CONV_NARROW,
        ANY_SPLITS},
    {1, 3, 5, 7, 1, 3, 3, 1, 1, TRUE, CONV_NARROW, ANY_SPLITS},
    {1, 7, NARROW_BLOCK / 8, 8, 13, 3, 3, 1, 1, TRUE, CONV_NARROW,
        ANY_SPLITS},
    {1, 5, 10, 8, PP_CPU_NARROW_COUT_TILE + 1, 3, 3, 1, 1, FALSE,
        CONV_NARROW, ANY_SPLITS},
    {1, 5, 9, 9, 7, 3, 3, 1, 1, TRUE, CONV_NARROW, ANY_SPLITS},
    {1, 5, 13, 8, 7, 3, 3, 1, 1, TRUE, CONV_NARROW, ANY_SPLITS},
    {1, 4, 3, 40, 14, 3, 3, 1, 1, TRUE, CONV_NARROW, ANY_SPLITS},
    {2, 11, 16, 16, 9, 3, 3, 1, 1, TRUE, CONV_NARROW, ANY_SPLITS},
    /* the narrow kernel's loop over (block, tile) items: one input channel
     * (its band copy cannot split) and one channel tile, 2·min - 1 and
     * 2·min blocks */
    {1, 1, (2 * NARROW_MIN_BLOCKS - 1) * NARROW_BLOCK / 16, 16,
        PP_CPU_NARROW_COUT_TILE, 3, 3, 1, 1, TRUE, CONV_NARROW, 0},
    {1, 1, 2 * NARROW_MIN_BLOCKS * NARROW_BLOCK / 16, 16,
        PP_CPU_NARROW_COUT_TILE, 3, 3, 1, 1, TRUE, CONV_NARROW, 1},
    /* im2col's loop over input channels, 2·min - 1 and 2·min of them, for
     * 4×4 output pixels (one output channel: the GEMM does not split) */
    {1, 2 * IM2COL_MIN_CIN (16) - 1, 8, 8, 1, 3, 3, 2, 1, FALSE,
        CONV_IM2COL, 0},
    {1, 2 * IM2COL_MIN_CIN (16), 8, 8, 1, 3, 3, 2, 1, FALSE, CONV_IM2COL, 1},
    /* the direct kernel's loop over a band's rows (one input channel row
     * each: its copy cannot split): one row, two */
    {1, 3, 1, PP_CPU_NARROW_BELOW_WIDTH, 3, 3, 3, 1, 1, TRUE, CONV_DIRECT, 0},
    {1, 3, 2, PP_CPU_NARROW_BELOW_WIDTH, 3, 3, 3, 1, 1, TRUE, CONV_DIRECT, 1},
  };
  const int wd = PP_CPU_NARROW_BELOW_WIDTH, wn = 16;
  /* The band copies' loops over input channels, for one output row (the
   * kernels' own loops cannot split): the fewest channels that split, and
   * one less.  The direct kernel's minimum chunk is the grain over a padded
   * row of all channels, the narrow one's over a channel's three shifted
   * planes (NARROW_PLANE floats each, one row and its two halo rows). */
  const int cd = first_split_cin (wd + 2);
  const int cn = 2 * (PP_CPU_CONV_GRAIN_COL_VALUES / (3 * NARROW_PLANE (1,
              wn)) + 1);
  const ConvCase copy_cases[] = {
    {1, cd - 1, 1, wd, 2, 3, 3, 1, 1, TRUE, CONV_DIRECT, 0},
    {1, cd, 1, wd, 2, 3, 3, 1, 1, TRUE, CONV_DIRECT, 1},
    {1, cn - 1, 1, wn, 2, 3, 3, 1, 1, TRUE, CONV_NARROW, 0},
    {1, cn, 1, wn, 2, 3, 3, 1, 1, TRUE, CONV_NARROW, 1},
  };

  run_conv_cases (SEED + 1, cases, G_N_ELEMENTS (cases));
  run_conv_cases (SEED + 2, copy_cases, G_N_ELEMENTS (copy_cases));
}

/* Bands: one, several with a partial last one, and one row a band where
 * even one row is over the budget; expected_bands checks each count. */
static void
test_conv2d_bands (void)
{
  static const ConvCase cases[] = {
    /* im2col: 3×3 stride 1 unpadded (im2col in every build), stride 2 */
    {1, 512, 2 * IM2COL_BAND_ROWS (512 * 9, 59) + 3, 61, 3, 3, 3, 1, 0,
        TRUE, CONV_IM2COL, ANY_SPLITS},
    {1, 512, 45, 61, 3, 3, 3, 2, 1, FALSE, CONV_IM2COL, ANY_SPLITS},
    /* k_len · wo over PP_CONV2D_COL_MAX_FLOATS: one output row a band
     * (stride 2, 240 → 120 columns) */
    {1, PP_CONV2D_COL_MAX_FLOATS / (9 * 120) + 1, 3, 240, 1, 3, 3, 2, 1,
        FALSE, CONV_IM2COL, ANY_SPLITS},
    /* narrow (im2col without AVX-512): 3 bands of 4 rows, the last partial;
     * 61 wide, 2 bands */
    {1, NARROW_CIN_FOR_ROWS (4, 16), 9, 16, 1, 3, 3, 1, 1, TRUE,
        CONV_NARROW, ANY_SPLITS},
    {1, 512, 17, 61, 3, 3, 3, 1, 1, TRUE, CONV_NARROW, ANY_SPLITS},
    /* narrow: a budget of under two rows, which wrapped around to the
     * whole image before it was clamped first: one row a band */
    {1, PP_CPU_NARROW_BAND_FLOATS / (6 * 16) + 1, 2, 16, 1, 3, 3, 1, 1,
        FALSE, CONV_NARROW, ANY_SPLITS},
    /* direct: 3 bands of 4 rows; one row a band under the lower clamp */
    {1, DIRECT_CIN_FOR_ROWS (4, 32), 9, 32, 2, 3, 3, 1, 1, TRUE,
        CONV_DIRECT, ANY_SPLITS},
    {1, PP_CPU_DIRECT_BAND_FLOATS / (3 * 34) + 1, 3, 32, 1, 3, 3, 1, 1,
        FALSE, CONV_DIRECT, ANY_SPLITS},
  };

  /* The shapes do what their comments say. */
  G_STATIC_ASSERT (NARROW_BAND_ROWS (NARROW_CIN_FOR_ROWS (4, 16), 16) == 4);
  G_STATIC_ASSERT (DIRECT_BAND_ROWS (DIRECT_CIN_FOR_ROWS (4, 32), 32) == 4);
  G_STATIC_ASSERT (NARROW_BAND_ROWS (PP_CPU_NARROW_BAND_FLOATS / (6 * 16)
          + 1, 16) < 0);
  G_STATIC_ASSERT (DIRECT_BAND_ROWS (PP_CPU_DIRECT_BAND_FLOATS / (3 * 34)
          + 1, 32) < 1);
  G_STATIC_ASSERT (IM2COL_BAND_ROWS ((PP_CONV2D_COL_MAX_FLOATS / (9 * 120)
              + 1) * 9, 120) == 0);
  run_conv_cases (SEED + 2, cases, G_N_ELEMENTS (cases));
}

/* group_norm, layer_norm */

static void
run_group_norm (GRand * rng, int n, int c, int hw, int groups, double offset,
    gboolean affine, float eps)
{
  const size_t total = (size_t) n * c * hw;
  const int per = c / groups;
  const size_t count = (size_t) per * hw;
  g_autofree float *x = random_floats (rng, total, 1.0);
  g_autofree float *gamma = affine ? random_floats (rng, c, 1.0) : NULL;
  g_autofree float *beta = affine ? random_floats (rng, c, 1.0) : NULL;
  g_autofree float *y = g_new (float, total);
  g_autofree double *ref = g_new (double, total);
  g_autofree gchar *what = g_strdup_printf ("group_norm n%d c%d hw%d g%d "
      "offset %g%s", n, c, hw, groups, offset, affine ? " affine" : "");
  Paths before;

  /* A large common offset tests that the variance does not cancel. */
  for (size_t i = 0; i < total; i++)
    x[i] += (float) offset;
  before = paths_now ();
  pp_group_norm (be, pp_view_f32 (x, total), pp_view_none (), n, c, hw,
      groups, eps, pp_view_f32 (gamma, c), pp_view_f32 (beta, c), FALSE,
      pp_out_f32 (y, total));
  check_splits (what, &before, loop_splits ((size_t) n * groups,
          PP_CPU_NORM_GRAIN_VALUES / count + 1));
  for (int b = 0; b < n; b++)
    for (int g = 0; g < groups; g++) {
      const size_t first = ((size_t) b * c + g * per) * hw;
      double mean, rstd;

      pp_ref_moments (x + first, count, eps, &mean, &rstd);
      for (int ch = g * per; ch < (g + 1) * per; ch++)
        for (int i = 0; i < hw; i++) {
          const size_t at = ((size_t) b * c + ch) * hw + i;
          const double v = (x[at] - mean) * rstd;

          ref[at] = affine ? v * gamma[ch] + beta[ch] : v;
        }
    }
  check_close (what, y, ref, total, NULL, max_abs (ref, total), TOL_NORM);

  /* With the SiLU: the bytes of the norm and then the silu op, and
   * within the bound of the reference's SiLU. */
  {
    g_autofree float *fused = g_new (float, total);
    g_autofree float *apart = g_memdup2 (y, total * sizeof (float));
    g_autofree gchar *fused_what = g_strconcat (what, ", silu", NULL);

    pp_group_norm (be, pp_view_f32 (x, total), pp_view_none (), n, c, hw,
        groups, eps, pp_view_f32 (gamma, c), pp_view_f32 (beta, c), TRUE,
        pp_out_f32 (fused, total));
    pp_silu (be, pp_out_f32 (apart, total), total);
    check_equal (fused_what, fused, apart, total);
    for (size_t i = 0; i < total; i++)
      ref[i] = pp_ref_silu (ref[i]);
    check_close (fused_what, fused, ref, total, NULL, max_abs (ref, total),
        TOL_NORM);
  }

  /* With a shift per (sample, channel): the bytes of add_channel and the
   * norm apart, out of place and in place. */
  {
    g_autofree float *shift = random_floats (rng, (size_t) n * c, 1.0);
    g_autofree float *apart = g_memdup2 (x, total * sizeof (float));
    g_autofree float *fused = g_new (float, total);
    g_autofree float *in_place = g_memdup2 (x, total * sizeof (float));
    g_autofree gchar *shift_what = g_strconcat (what, ", shift", NULL);

    pp_add_channel (be, pp_out_f32 (apart, total), n, c, hw,
        pp_view_f32 (shift, (size_t) n * c));
    pp_group_norm (be, pp_view_f32 (apart, total), pp_view_none (), n, c,
        hw, groups, eps, pp_view_f32 (gamma, c), pp_view_f32 (beta, c), TRUE,
        pp_out_f32 (apart, total));
    pp_group_norm (be, pp_view_f32 (x, total),
        pp_view_f32 (shift, (size_t) n * c), n, c, hw, groups, eps,
        pp_view_f32 (gamma, c), pp_view_f32 (beta, c), TRUE,
        pp_out_f32 (fused, total));
    check_equal (shift_what, fused, apart, total);
    pp_group_norm (be, pp_view_f32 (in_place, total),
        pp_view_f32 (shift, (size_t) n * c), n, c, hw, groups, eps,
        pp_view_f32 (gamma, c), pp_view_f32 (beta, c), TRUE,
        pp_out_f32 (in_place, total));
    check_equal ("group_norm shifted in place", in_place, apart, total);
  }

  /* In place gives the same result. */
  pp_group_norm (be, pp_view_f32 (x, total), pp_view_none (), n, c, hw,
      groups, eps, pp_view_f32 (gamma, c), pp_view_f32 (beta, c), FALSE,
      pp_out_f32 (x, total));
  check_equal ("group_norm in place", x, y, total);
}

/* The number of groups of @count values each whose loop has @items. */
#define NORM_SPLIT_ITEMS(count) (2 * (PP_CPU_NORM_GRAIN_VALUES / (count) + 1))

static void
test_group_norm (void)
{
  GRand *rng = g_rand_new_with_seed (SEED + 3);

  /* Values per group against NORM_BLOCK and the lanes: fewer than
   * PP_CPU_LANES, within a block, exactly one, one more, many. */
  run_group_norm (rng, 1, 7, 3, 7, 0.0, TRUE, 1e-5f);
  run_group_norm (rng, 2, 12, 35, 4, 0.0, TRUE, 1e-5f);
  run_group_norm (rng, 2, 12, 35, 3, 0.0, FALSE, 1e-6f);
  run_group_norm (rng, 1, 8, PP_CPU_NORM_BLOCK / 4, 2, 0.0, TRUE, 1e-5f);
  run_group_norm (rng, 1, 3, PP_CPU_NORM_BLOCK + 1, 3, 0.0, TRUE, 1e-5f);
  run_group_norm (rng, 1, 8, 1000, 1, 0.0, TRUE, 1e-5f);
  run_group_norm (rng, 2, 16, 777, 8, 100.0, TRUE, 1e-5f);
  /* The split over (sample, group) items, 3·35 values a group: one item
   * short of splitting, and split (by samples too). */
  run_group_norm (rng, 1, 3 * (NORM_SPLIT_ITEMS (105) - 1), 35,
      NORM_SPLIT_ITEMS (105) - 1, 0.5, TRUE, 1e-6f);
  run_group_norm (rng, 2, 3 * NORM_SPLIT_ITEMS (105) / 2, 35,
      NORM_SPLIT_ITEMS (105) / 2, 0.5, TRUE, 1e-6f);
  g_rand_free (rng);
}

static void
run_layer_norm (GRand * rng, int rows, int dim, double offset,
    gboolean with_gamma, gboolean with_beta)
{
  const size_t total = (size_t) rows * dim;
  const float eps = 1e-5f;
  g_autofree float *x = random_floats (rng, total, 1.0);
  g_autofree float *gamma = with_gamma ? random_floats (rng, dim, 1.0) : NULL;
  g_autofree float *beta = with_beta ? random_floats (rng, dim, 1.0) : NULL;
  g_autofree float *y = g_new (float, total);
  g_autofree double *ref = g_new (double, total);
  g_autofree gchar *what = g_strdup_printf ("layer_norm %dx%d offset %g%s%s",
      rows, dim, offset, with_gamma ? " gamma" : "", with_beta ? " beta" : "");
  Paths before;

  for (size_t i = 0; i < total; i++)
    x[i] += (float) offset;
  before = paths_now ();
  pp_layer_norm (be, pp_view_f32 (x, total), rows, dim, eps,
      pp_view_f32 (gamma, dim), pp_view_f32 (beta, dim),
      pp_out_f32 (y, total));
  check_splits (what, &before, loop_splits (rows,
          PP_CPU_NORM_GRAIN_VALUES / dim + 1));
  for (int r = 0; r < rows; r++) {
    double mean, rstd;

    pp_ref_moments (x + (size_t) r * dim, dim, eps, &mean, &rstd);
    for (int i = 0; i < dim; i++) {
      const double v = (x[(size_t) r * dim + i] - mean) * rstd;

      ref[(size_t) r * dim + i] = (gamma ? v * gamma[i] : v)
          + (beta ? beta[i] : 0.0);
    }
  }
  check_close (what, y, ref, total, NULL, max_abs (ref, total), TOL_NORM);
  pp_layer_norm (be, pp_view_f32 (x, total), rows, dim, eps,
      pp_view_f32 (gamma, dim), pp_view_f32 (beta, dim),
      pp_out_f32 (x, total));
  check_equal ("layer_norm in place", x, y, total);
}

static void
test_layer_norm (void)
{
  GRand *rng = g_rand_new_with_seed (SEED + 4);

  /* dim against the lanes and NORM_BLOCK; variance 0 (y = beta); a large
   * offset; each affine combination */
  run_layer_norm (rng, 5, 1, 0.0, TRUE, TRUE);
  run_layer_norm (rng, 4, 9, 0.0, FALSE, FALSE);
  run_layer_norm (rng, 13, 37, 0.0, TRUE, TRUE);
  run_layer_norm (rng, 3, PP_CPU_NORM_BLOCK, 0.0, TRUE, FALSE);
  run_layer_norm (rng, 3, PP_CPU_NORM_BLOCK + 1, 0.0, FALSE, TRUE);
  run_layer_norm (rng, 3, 700, 50.0, TRUE, TRUE);
  /* the split over rows: one row short, and split */
  run_layer_norm (rng, NORM_SPLIT_ITEMS (320) - 1, 320, 0.0, TRUE, TRUE);
  run_layer_norm (rng, NORM_SPLIT_ITEMS (320), 320, 0.0, TRUE, TRUE);
  g_rand_free (rng);
}

/* linear, matmul: GEMMs */

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
  Paths before;

  for (size_t i = 0; i < (size_t) rows * out; i++)
    y[i] = NAN;
  before = paths_now ();
  pp_linear (be, pp_view_f32 (x, (size_t) rows * in), rows, in,
      pp_view_f32 (w, (size_t) out * in), pp_view_f32 (b, out), out,
      pp_out_f32 (y, (size_t) rows * out));
  check_gemm_path (what, &before, rows, out, in);
  for (int r = 0; r < rows; r++)
    for (int o = 0; o < out; o++) {
      double acc = b ? b[o] : 0.0;

      for (int i = 0; i < in; i++)
        acc += (double) x[(size_t) r * in + i] * w[(size_t) o * in + i];
      ref[(size_t) r * out + o] = acc;
    }
  check_dot (what, y, ref, (size_t) rows * out, in);
}

/* k for which an m×n×k product is one FLOP grain short of splitting in
 * two, or just reaches it. */
#define GEMM_K_BELOW(m, n) (PP_CPU_GEMM_GRAIN_FLOPS / ((m) * (n)) - 1)
#define GEMM_K_AT(m, n) (PP_CPU_GEMM_GRAIN_FLOPS / ((m) * (n)) + 1)

static void
test_linear (void)
{
  const int a = 4 * PP_CPU_GEMM_SPLIT_ALIGN;
  GRand *rng = g_rand_new_with_seed (SEED + 5);

  run_linear (rng, 13, 37, 11, TRUE);
  run_linear (rng, 1, 5, 3, FALSE);
  run_linear (rng, 7, 129, 1, TRUE);
  /* 2·GEMM_GRAIN_FLOPS: just below and at, split by rows (rows ≥ out) and
   * by columns */
  run_linear (rng, 2 * a, GEMM_K_BELOW (2 * a, a), a, FALSE);
  run_linear (rng, 2 * a, GEMM_K_AT (2 * a, a), a, TRUE);
  run_linear (rng, a, GEMM_K_AT (a, 2 * a), 2 * a, TRUE);
  /* many FLOPs, but the longer side is only SPLIT_ALIGN (one block) or one
   * more (two) */
  run_linear (rng, PP_CPU_GEMM_SPLIT_ALIGN, PP_CPU_GEMM_GRAIN_FLOPS
      / PP_CPU_GEMM_SPLIT_ALIGN, 3, FALSE);
  run_linear (rng, PP_CPU_GEMM_SPLIT_ALIGN + 1, PP_CPU_GEMM_GRAIN_FLOPS
      / PP_CPU_GEMM_SPLIT_ALIGN, 3, FALSE);
  /* ragged blocks at 2 and 4 threads: 77 rows, 300 rows */
  run_linear (rng, 300, 64, 48, TRUE);
  run_linear (rng, 77, 256, 200, FALSE);
  g_rand_free (rng);
}

/* linear_add: linear into a buffer and add, byte for byte, whatever the
 * split (the shapes of test_linear's splits). */
static void
run_linear_add (GRand * rng, int rows, int in, int out, gboolean with_bias)
{
  const size_t ny = (size_t) rows * out;
  g_autofree float *x = random_floats (rng, (size_t) rows * in, 1.0);
  g_autofree float *w = random_floats (rng, (size_t) out * in, 1.0);
  g_autofree float *b = with_bias ? random_floats (rng, out, 1.0) : NULL;
  g_autofree float *y = random_floats (rng, ny, 1.0);
  g_autofree float *expect = g_memdup2 (y, ny * sizeof (float));
  g_autofree float *product = g_new (float, ny);
  g_autofree gchar *what = g_strdup_printf ("linear_add %dx%d -> %d%s",
      rows, in, out, with_bias ? " bias" : "");

  pp_linear (be, pp_view_f32 (x, (size_t) rows * in), rows, in,
      pp_view_f32 (w, (size_t) out * in), pp_view_f32 (b, out), out,
      pp_out_f32 (product, ny));
  pp_add (be, pp_out_f32 (expect, ny), pp_view_f32 (product, ny), ny);
  pp_linear_add (be, pp_view_f32 (x, (size_t) rows * in), rows, in,
      pp_view_f32 (w, (size_t) out * in), pp_view_f32 (b, out), out,
      pp_out_f32 (y, ny));
  if (memcmp (y, expect, ny * sizeof (float)) != 0)
    g_error ("%s: not linear and add apart, byte for byte", what);
}

static void
test_linear_add (void)
{
  const int a = 4 * PP_CPU_GEMM_SPLIT_ALIGN;
  GRand *rng = g_rand_new_with_seed (SEED + 21);

  run_linear_add (rng, 13, 37, 11, TRUE);
  run_linear_add (rng, 1, 5, 3, FALSE);
  run_linear_add (rng, 2 * a, GEMM_K_AT (2 * a, a), a, TRUE);
  run_linear_add (rng, a, GEMM_K_AT (a, 2 * a), 2 * a, TRUE);
  run_linear_add (rng, 300, 64, 48, TRUE);
  run_linear_add (rng, 77, 256, 200, FALSE);
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
  Paths before = paths_now ();

  pp_matmul (be, ta, tb, m, n, k, pp_view_f32 (a, (size_t) a_rows * lda),
      lda, pp_view_f32 (b, (size_t) b_rows * ldb), ldb, accumulate,
      pp_out_f32 (y, (size_t) m * ldy), ldy);
  check_gemm_path (what, &before, m, n, k);
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
    /* The slack between rows is not y: untouched. */
    for (int j = n; j < ldy; j++)
      g_assert_cmpfloat (y[(size_t) i * ldy + j], ==, y0[(size_t) i * ldy
              + j]);
  }
  check_dot (what, got, ref, (size_t) m * n, k);
}

static void
test_matmul (void)
{
  GRand *rng = g_rand_new_with_seed (SEED + 6);

  /* small (whole), split by columns, split by rows */
  for (int t = 0; t < 4; t++) {
    run_matmul (rng, t & 1, t >> 1, 9, 7, 5, t % 2 == 0);
    run_matmul (rng, t & 1, t >> 1, 64, 200, 64, t % 2 == 1);
    run_matmul (rng, t & 1, t >> 1, 201, 40, 70, t % 2 == 0);
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
  const size_t rows = end - begin;

  for (int r = begin; r < end; r++)
    g_atomic_int_inc (&c->hits[r]);
  pp_linear (be, pp_view_f32 (c->x + (size_t) begin * c->in, rows * c->in),
      end - begin, c->in, pp_view_f32 (c->w, (size_t) c->out * c->in),
      pp_view_none (), c->out,
      pp_out_f32 (c->y + (size_t) begin * c->out, rows * c->out));
}

static void
test_for_rows (void)
{
  const int rows = 1000, in = 64, out = 96;
  GRand *rng = g_rand_new_with_seed (SEED + 7);
  g_autofree float *x = random_floats (rng, (size_t) rows * in, 1.0);
  g_autofree float *w = random_floats (rng, (size_t) out * in, 1.0);
  g_autofree float *y = g_new (float, (size_t) rows * out);
  g_autofree double *ref = g_new (double, (size_t) rows * out);
  g_autofree gint *hits = g_new0 (gint, rows);
  RowsCase c = { hits, x, w, y, in, out };

  /* min_rows from 1 to past rows / 2: split and not */
  for (int min_rows = 1; min_rows <= 2 * rows; min_rows *= 7) {
    const gboolean split = loop_splits (rows, min_rows);
    Paths before = paths_now ();
    guint64 loops;

    memset (hits, 0, rows * sizeof (gint));
    pp_cpu_for_rows (rows, min_rows, rows_linear, &c);
    /* A split region is the one loop on the team: the ops inside run
     * serially on their thread.  One that does not split runs on the
     * caller, and its ops use the team. */
    loops = paths_since (&before, PP_CPU_PATH_LOOP_SPLIT);
    if (loops != (split ? 1 : pp_cpu_parallel_threads () > 1
            && expected_gemm_path (rows, out, in) != PP_CPU_PATH_GEMM_WHOLE))
      g_error ("for_rows min_rows %d: %" G_GUINT64_FORMAT " loops ran on "
          "the team", min_rows, loops);
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
  check_dot ("for_rows linear", y, ref, (size_t) rows * out, in);
  pp_cpu_for_rows (0, 1, rows_linear, &c);
  g_rand_free (rng);
}

/* attention */

static gboolean
attention_fused (int head_dim)
{
  return pp_cpu_avx512_kernels () && head_dim <= PP_CPU_FUSED_MAX_HEAD_DIM;
}

/* Runs one attention on q, k, v (n, lq, lk, heads, head_dim as named) and
 * checks its path, its own thread splits when @splits is not ANY_SPLITS,
 * and its values. */
static void
check_attention (const gchar * what, const float *q, const float *k,
    const float *v, int n, int lq, int lk, int heads, int hd, int splits)
{
  const size_t nq = (size_t) n * lq * heads * hd;
  const size_t nk = (size_t) n * lk * heads * hd;
  const gboolean fused = attention_fused (hd);
  g_autofree float *out = g_new (float, nq);
  g_autofree double *ref = g_new (double, nq);
  g_autofree gchar *where = g_strdup_printf ("%s (%s)", what,
      fused ? "fused" : "GEMM");
  Paths before;
  double max_score;

  for (size_t i = 0; i < nq; i++)
    out[i] = NAN;
  before = paths_now ();
  pp_attention (be, pp_view_f32 (q, nq), pp_view_f32 (k, nk),
      pp_view_f32 (v, nk), n, lq, lk, heads, hd, heads * hd, heads * hd,
      PP_DTYPE_F32, pp_out_f32 (out, nq));
  check_path (where, &before, PP_CPU_PATH_ATTENTION_FUSED, fused);
  check_path (where, &before, PP_CPU_PATH_ATTENTION_BLOCK, fused ? 0
      : (guint64) n * heads * ceil_div (lq, PP_ATTENTION_QUERY_BLOCK));
  if (splits != ANY_SPLITS)
    check_splits (where, &before, splits);
  max_score = pp_ref_attention (q, k, v, n, lq, lk, heads, hd, ref);
  check_close (where, out, ref, nq, NULL, max_abs_float (v, nk)
      * MAX (1.0, max_score), TOL_ATTENTION);
}

static void
run_attention_splits (GRand * rng, int n, int lq, int lk, int heads, int hd,
    double amplitude, int splits)
{
  const size_t nq = (size_t) n * lq * heads * hd;
  const size_t nk = (size_t) n * lk * heads * hd;
  g_autofree float *q = random_floats (rng, nq, amplitude);
  g_autofree float *k = random_floats (rng, nk, amplitude);
  g_autofree float *v = random_floats (rng, nk, 1.0);
  g_autofree gchar *what = g_strdup_printf ("attention n%d lq%d lk%d heads%d "
      "head_dim%d amplitude %g", n, lq, lk, heads, hd, amplitude);

  check_attention (what, q, k, v, n, lq, lk, heads, hd, splits);
}

static void
run_attention (GRand * rng, int n, int lq, int lk, int heads, int hd,
    double amplitude)
{
  run_attention_splits (rng, n, lq, lk, heads, hd, amplitude, ANY_SPLITS);
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
  g_autofree gchar *what = g_strdup_printf ("attention negative scores lq%d "
      "lk%d head_dim%d", lq, lk, hd);

  for (size_t i = 0; i < nq; i++)
    q[i] += 6.5f;
  for (size_t i = 0; i < nk; i++)
    k[i] -= 6.5f;
  check_attention (what, q, k, v, 1, lq, lk, heads, hd, ANY_SPLITS);
}

/* The softmax's minimum chunk of rows for @lk keys on the GEMM path. */
#define SOFTMAX_MIN_ROWS(lk) (PP_CPU_SOFTMAX_GRAIN_SCORES / (lk) + 1)

/* Heads above FUSED_MAX_HEAD_DIM (every SD1.5 and SD-Turbo layer), and
 * every head without the AVX-512 kernels: GEMMs per block of queries. */
static void
test_attention_gemm (void)
{
  const int qb = PP_ATTENTION_QUERY_BLOCK;
  const int lk_split = 200;
  GRand *rng = g_rand_new_with_seed (SEED + 8);

  /* query blocks: one partial, one whole, whole + one row, two whole */
  run_attention (rng, 1, qb - 1, 77, 2, PP_CPU_FUSED_MAX_HEAD_DIM + 1, 1.0);
  run_attention (rng, 1, qb, PP_CPU_SUM_BLOCK + 1, 1, 40, 1.0);
  run_attention (rng, 1, qb + 1, 2 * PP_CPU_SUM_BLOCK + 37, 1, 64, 1.0);
  run_attention (rng, 1, 2 * qb, 5, 1, 80, 1.0);
  /* cross-attention: few queries, text keys; head_dim 160; one key */
  run_attention (rng, 2, 7, 77, 2, 160, 1.0);
  run_attention (rng, 1, 9, 1, 1, 64, 1.0);
  /* softmax rows of exactly PP_CPU_LANES and SUM_BLOCK */
  run_attention (rng, 1, 33, PP_CPU_LANES, 2, 40, 1.0);
  run_attention (rng, 1, 33, PP_CPU_SUM_BLOCK, 2, 40, 1.0);
  /* the softmax's split over rows (its own loop, not the GEMMs'): one row
   * short, and split */
  G_STATIC_ASSERT (2 * SOFTMAX_MIN_ROWS (200) <= PP_ATTENTION_QUERY_BLOCK);
  run_attention_splits (rng, 1, 2 * SOFTMAX_MIN_ROWS (lk_split) - 1,
      lk_split, 1, 64, 1.0, 0);
  run_attention_splits (rng, 1, 2 * SOFTMAX_MIN_ROWS (lk_split), lk_split,
      1, 64, 1.0, pp_cpu_parallel_threads () > 1);
  /* large scores: exp would overflow without subtracting the max */
  run_attention (rng, 1, 33, 29, 2, 64, 30.0);
  run_attention_negative (rng, 13, 77, 40);
  g_rand_free (rng);
}

/* The fused loop's items are groups of FUSED_ROWS query rows of one head;
 * it splits from two minimum chunks of them.  With one head, the fewest
 * query rows that make that many groups. */
#define FUSED_SPLIT_GROUPS (2 * (PP_CPU_FUSED_GRAIN_ROWS / PP_CPU_FUSED_ROWS))
#define FUSED_SPLIT_ROWS ((FUSED_SPLIT_GROUPS - 1) * PP_CPU_FUSED_ROWS + 1)

/* Heads up to FUSED_MAX_HEAD_DIM: the fused path where the AVX-512 kernels
 * run, the GEMM path elsewhere. */
static void
test_attention_fused (void)
{
  const int key_step = PP_CPU_FUSED_KEY_VECS * PP_CPU_FUSED_LANES;
  GRand *rng = g_rand_new_with_seed (SEED + 9);

  /* p·v key by key (head_dim a multiple of the lanes: 32, 16), from the
   * packed values (24, 6, 5, 3, 1), or fused with the exp (8) */
  run_attention (rng, 1, 70, 77, 2, PP_CPU_FUSED_MAX_HEAD_DIM, 1.0);
  run_attention (rng, 2, 9, 200, 3, 16, 1.0);
  run_attention (rng, 1, 21, 77, 2, 24, 1.0);
  run_attention (rng, 2, 300, 37, 3, 5, 1.0);
  run_attention (rng, 1, 33, 29, 2, 6, 1.0);
  run_attention (rng, 1, 2 * PP_ATTENTION_QUERY_BLOCK, 5, 1, 3, 1.0);
  run_attention (rng, 1, 1, 1, 1, 1, 1.0);
  run_attention (rng, 1, 60, 60, 4, 8, 1.0);
  /* keys against the key step (4 vectors): one short (masked), exactly,
   * one more (a single masked vector after it); fewer than one vector */
  run_attention (rng, 1, 13, key_step - 1, 2, 16, 1.0);
  run_attention (rng, 1, 13, key_step, 2, 16, 1.0);
  run_attention (rng, 1, 13, key_step + 1, 2, 16, 1.0);
  run_attention (rng, 1, 13, PP_CPU_FUSED_LANES - 3, 2, 16, 1.0);
  /* fused_softmax past its SUM_BLOCK, for each p·v */
  run_attention (rng, 1, 13, PP_CPU_SUM_BLOCK + 1, 2,
      PP_CPU_FUSED_MAX_HEAD_DIM, 1.0);
  run_attention (rng, 1, 13, 2 * PP_CPU_SUM_BLOCK + 37, 2, 16, 1.0);
  run_attention (rng, 1, 13, PP_CPU_SUM_BLOCK + 1, 2, 24, 1.0);
  /* head_dim 8, exp fused with p·v: row pairs plus a lone row (lq 71, 23:
   * groups of 4 leave 3), keys past several SUM_BLOCKs (1024, 1000: not a
   * multiple of 64 or 256), text length 77, one key. */
  run_attention (rng, 1, 71, 1024, 2, PP_CPU_FUSED_SMALL_HEAD_DIM, 1.0);
  run_attention (rng, 1, 23, 1000, 3, PP_CPU_FUSED_SMALL_HEAD_DIM, 1.0);
  run_attention (rng, 2, 71, 77, 2, PP_CPU_FUSED_SMALL_HEAD_DIM, 1.0);
  run_attention (rng, 1, 5, 1, 2, PP_CPU_FUSED_SMALL_HEAD_DIM, 1.0);
  /* the split over (head, query) rows with one head (whose packing cannot
   * split): one row short, and split; three heads of 13 rows, whose
   * chunks start inside a head and off a group of FUSED_ROWS */
  run_attention_splits (rng, 1, FUSED_SPLIT_ROWS - 1, 77, 1, 16, 1.0,
      attention_fused (16) ? 0 : ANY_SPLITS);
  run_attention_splits (rng, 1, FUSED_SPLIT_ROWS, 77, 1, 16, 1.0,
      attention_fused (16) ? pp_cpu_parallel_threads () > 1 : ANY_SPLITS);
  /* the packing of k and v, one head a chunk: two heads split it (too few
   * rows for the row loop) */
  run_attention_splits (rng, 1, 5, 77, 2, 24, 1.0,
      attention_fused (24) ? pp_cpu_parallel_threads () > 1 : ANY_SPLITS);
  run_attention (rng, 1, 13, 77, 3, 16, 1.0);
  /* large scores into the exp clamp; base-2 exp (fused_exp2) with most
   * 2^(s - max) below the denormals */
  run_attention (rng, 1, 21, 77, 2, 8, 30.0);
  run_attention (rng, 1, 21, 77, 2, 16, 30.0);
  run_attention (rng, 1, 23, 1024, 2, 8, 30.0);
  run_attention (rng, 1, 21, 77, 2, 8, 100.0);
  run_attention (rng, 1, 21, 77, 2, 16, 100.0);
  run_attention_negative (rng, 13, 77, 8);
  run_attention_negative (rng, 13, 77, 16);
  run_attention_negative (rng, 6, 1000, 8);
  g_rand_free (rng);
}

/* element-wise */

typedef double (*RefFunc) (double x);

typedef struct
{
  const gchar *name;
  void (*op) (PpBackend *, PpOut, size_t);
  RefFunc ref;
  size_t grain;
  gboolean scale_by_input;      /* GELU: see TOL_UNARY */
} Unary;

static const Unary unary_ops[] = {
  {"silu", pp_silu, pp_ref_silu, PP_CPU_GRAIN_MATH, FALSE},
  {"relu", pp_relu, pp_ref_relu, PP_CPU_GRAIN_MEMORY, FALSE},
  {"tanh", pp_tanh, tanh, PP_CPU_GRAIN_MATH, FALSE},
  {"gelu", pp_gelu, pp_ref_gelu, PP_CPU_GRAIN_MATH, TRUE},
};

static void
run_unary (GRand * rng, const Unary * u, size_t n)
{
  g_autofree gchar *what = g_strdup_printf ("%s %zu", u->name, n);
  g_autofree float *x = random_floats (rng, n, 12.0);
  g_autofree float *y = NULL;
  g_autofree double *ref = g_new (double, n);
  g_autofree double *scale = g_new (double, n);
  const float fixed[] = { 0.0f, -100.0f, 100.0f };
  Paths before;

  /* Saturation on both sides, where there is room. */
  memcpy (x, fixed, MIN (n, G_N_ELEMENTS (fixed)) * sizeof (float));
  y = g_memdup2 (x, n * sizeof (float));
  before = paths_now ();
  u->op (be, pp_out_f32 (y, n), n);
  check_splits (what, &before, loop_splits (n, u->grain));
  for (size_t i = 0; i < n; i++) {
    ref[i] = u->ref (x[i]);
    scale[i] = u->scale_by_input ? fabs (x[i]) : fabs (ref[i]);
  }
  check_close (what, y, ref, n, scale, 0.0, TOL_UNARY);
}

static void
test_unary (void)
{
  GRand *rng = g_rand_new_with_seed (SEED + 10);

  for (guint o = 0; o < G_N_ELEMENTS (unary_ops); o++) {
    const Unary *u = &unary_ops[o];
    /* Vector tails of 4, 8 and 16 lanes; one element short of the split,
     * and split. */
    const size_t sizes[] = { 1, 3, 7, 15, 17, 1001, 2 * u->grain - 1,
      2 * u->grain
    };

    for (guint i = 0; i < G_N_ELEMENTS (sizes); i++)
      run_unary (rng, u, sizes[i]);
  }
  g_rand_free (rng);

  /* Known values. */
  g_assert_cmpfloat_with_epsilon (pp_math_gelu_erf (1.0f), 0.8413447460685429,
      1e-6);
  g_assert_cmpfloat_with_epsilon (pp_math_silu (1.0f), 0.7310585786300049,
      1e-6);
  g_assert_true (isnan (pp_math_relu (NAN)));
}

/* NaN and ±inf through the vectorised loops, at every position of a
 * vector and in the tail. */
static void
test_unary_nonfinite (void)
{
  const size_t n = 4 * PP_CPU_LANES + 5;
  /* For the one finite input, 1: a few ulps. */
  const float finite_tol = 1e-6f;
  const float special[] = { NAN, INFINITY, -INFINITY, 1.0f };
  /* expected[op][special]: NaN stays NaN; silu(-inf) and gelu(-inf) are
   * -inf · 0 (see pp-ops-math.h) */
  const float expected[][G_N_ELEMENTS (special)] = {
    {NAN, INFINITY, NAN, 0.7310585786f},
    {NAN, INFINITY, 0.0f, 1.0f},
    {NAN, 1.0f, -1.0f, 0.7615941559f},
    {NAN, INFINITY, NAN, 0.8413447461f},
  };

  G_STATIC_ASSERT (G_N_ELEMENTS (expected) == G_N_ELEMENTS (unary_ops));
  for (guint o = 0; o < G_N_ELEMENTS (unary_ops); o++) {
    g_autofree float *x = g_new (float, n);

    for (size_t i = 0; i < n; i++)
      x[i] = special[i % G_N_ELEMENTS (special)];
    unary_ops[o].op (be, pp_out_f32 (x, n), n);
    for (size_t i = 0; i < n; i++) {
      const float e = expected[o][i % G_N_ELEMENTS (special)];
      const gboolean ok = isnan (e) ? isnan (x[i])
          : x[i] == e || fabsf (x[i] - e) <= finite_tol;

      if (!ok)
        g_error ("%s(%g) at %zu: %g, expected %g", unary_ops[o].name,
            special[i % G_N_ELEMENTS (special)], i, x[i], e);
    }
  }
}

static void
run_geglu (GRand * rng, int rows, int d)
{
  const size_t total = (size_t) rows * d;
  g_autofree float *x = random_floats (rng, total * 2, 4.0);
  g_autofree float *y = g_new (float, total);
  g_autofree double *ref = g_new (double, total);
  g_autofree double *scale = g_new (double, total);
  g_autofree gchar *what = g_strdup_printf ("geglu %dx(2x%d)", rows, d);
  Paths before = paths_now ();

  pp_geglu (be, pp_view_f32 (x, total * 2), rows, d, pp_out_f32 (y, total));
  check_splits (what, &before, loop_splits (rows,
          PP_CPU_GRAIN_MATH / d + 1));
  for (int r = 0; r < rows; r++)
    for (int i = 0; i < d; i++) {
      const double value = x[(size_t) r * 2 * d + i];
      const double gate = x[(size_t) r * 2 * d + d + i];

      ref[(size_t) r * d + i] = value * pp_ref_gelu (gate);
      scale[(size_t) r * d + i] = fabs (value * gate);
    }
  check_close (what, y, ref, total, scale, 0.0, TOL_UNARY);
}

/* Rows of @d values whose loop is one row short of splitting. */
#define GEGLU_SPLIT_ROWS(d) (2 * (PP_CPU_GRAIN_MATH / (d) + 1))

static void
test_geglu (void)
{
  GRand *rng = g_rand_new_with_seed (SEED + 11);

  run_geglu (rng, 11, 13);
  run_geglu (rng, GEGLU_SPLIT_ROWS (13) - 1, 13);
  run_geglu (rng, GEGLU_SPLIT_ROWS (13), 13);
  run_geglu (rng, GEGLU_SPLIT_ROWS (160) - 1, 160);
  run_geglu (rng, GEGLU_SPLIT_ROWS (160), 160);
  g_rand_free (rng);
}

static void
run_add_scale (GRand * rng, size_t n)
{
  g_autofree float *a = random_floats (rng, n, 1.0);
  g_autofree float *b = random_floats (rng, n, 1.0);
  g_autofree float *y = g_memdup2 (a, n * sizeof (float));
  g_autofree float *expect = g_new (float, n);
  g_autofree gchar *what = g_strdup_printf ("add, scale %zu", n);
  Paths before = paths_now ();

  pp_add (be, pp_out_f32 (y, n), pp_view_f32 (b, n), n);
  pp_scale (be, pp_out_f32 (y, n), n, -0.375f);
  check_splits (what, &before, 2 * loop_splits (n, PP_CPU_GRAIN_MEMORY));
  for (size_t i = 0; i < n; i++)
    expect[i] = (a[i] + b[i]) * -0.375f;
  check_equal (what, y, expect, n);
}

static void
test_add_scale (void)
{
  const size_t sizes[] = { 1, 7, 15, 103, 2 * PP_CPU_GRAIN_MEMORY - 1,
    2 * PP_CPU_GRAIN_MEMORY
  };
  GRand *rng = g_rand_new_with_seed (SEED + 12);

  for (guint i = 0; i < G_N_ELEMENTS (sizes); i++)
    run_add_scale (rng, sizes[i]);
  g_rand_free (rng);
}

static void
run_add_channel (GRand * rng, int n, int c, int hw)
{
  const size_t total = (size_t) n * c * hw;
  g_autofree float *x = random_floats (rng, total, 1.0);
  g_autofree float *v = random_floats (rng, (size_t) n * c, 1.0);
  g_autofree float *y = g_memdup2 (x, total * sizeof (float));
  g_autofree float *expect = g_new (float, total);
  g_autofree gchar *what = g_strdup_printf ("add_channel %dx%dx%d", n, c,
      hw);
  Paths before = paths_now ();

  pp_add_channel (be, pp_out_f32 (y, total), n, c, hw,
      pp_view_f32 (v, (size_t) n * c));
  check_splits (what, &before, loop_splits ((size_t) n * c,
          PP_CPU_GRAIN_MEMORY / hw + 1));
  for (int b = 0; b < n; b++)
    for (int ch = 0; ch < c; ch++)
      for (int i = 0; i < hw; i++) {
        const size_t at = ((size_t) b * c + ch) * hw + i;

        expect[at] = x[at] + v[b * c + ch];
      }
  check_equal (what, y, expect, total);
}

/* Planes of @hw values whose loop is one plane short of splitting. */
#define PLANE_SPLIT(hw) (2 * (PP_CPU_GRAIN_MEMORY / (hw) + 1))

static void
test_add_channel (void)
{
  GRand *rng = g_rand_new_with_seed (SEED + 13);

  run_add_channel (rng, 2, 3, 17);
  /* planes (sample, channel) one short of the split, and split; planes
   * of more than GRAIN_MEMORY, a chunk of one plane: 1 and 2 planes */
  run_add_channel (rng, 1, PLANE_SPLIT (17) - 1, 17);
  run_add_channel (rng, 2, PLANE_SPLIT (17) / 2, 17);
  run_add_channel (rng, 1, 1, PP_CPU_GRAIN_MEMORY + 1);
  run_add_channel (rng, 1, 2, PP_CPU_GRAIN_MEMORY + 1);
  g_rand_free (rng);
}

/* layout */

/* Whether the transpose of @n matrices [rows, cols] splits. */
static gboolean
transpose_splits (int n, int rows, int cols)
{
  return loop_splits ((size_t) n * ceil_div (rows, PP_CPU_TRANSPOSE_TILE),
      PP_CPU_LAYOUT_GRAIN_VALUES / ((size_t) PP_CPU_TRANSPOSE_TILE * cols)
      + 1);
}

static void
run_transpose (GRand * rng, int n, int c, int hw)
{
  const size_t total = (size_t) n * c * hw;
  g_autofree float *x = random_floats (rng, total, 1.0);
  g_autofree float *nlc = g_new (float, total);
  g_autofree float *back = g_new (float, total);
  g_autofree float *expect = g_new (float, total);
  g_autofree gchar *what = g_strdup_printf ("nchw_to_nlc %dx%dx%d", n, c,
      hw);
  g_autofree gchar *what_back = g_strdup_printf ("nlc_to_nchw %dx%dx%d", n,
      c, hw);
  Paths before = paths_now ();

  pp_nchw_to_nlc (be, pp_view_f32 (x, total), n, c, hw,
      pp_out_f32 (nlc, total));
  check_splits (what, &before, transpose_splits (n, c, hw));
  for (int b = 0; b < n; b++)
    for (int ch = 0; ch < c; ch++)
      for (int i = 0; i < hw; i++)
        expect[((size_t) b * hw + i) * c + ch] =
            x[((size_t) b * c + ch) * hw + i];
  check_equal (what, nlc, expect, total);
  before = paths_now ();
  pp_nlc_to_nchw (be, pp_view_f32 (nlc, total), n, c, hw,
      pp_out_f32 (back, total));
  check_splits (what_back, &before, transpose_splits (n, hw, c));
  check_equal (what_back, back, x, total);
}

/* Source rows whose tile bands leave the loop one item short of the split
 * for @cols columns (with a ragged last band). */
#define TRANSPOSE_SPLIT_ROWS(cols) \
  ((2 * (PP_CPU_LAYOUT_GRAIN_VALUES / (PP_CPU_TRANSPOSE_TILE * (cols)) + 1) \
      - 2) * PP_CPU_TRANSPOSE_TILE + 5)

static void
test_transpose (void)
{
  const int t = PP_CPU_TRANSPOSE_TILE;
  GRand *rng = g_rand_new_with_seed (SEED + 14);

  /* rows and columns below, at and past the tile */
  run_transpose (rng, 2, t - 1, t + 1);
  run_transpose (rng, 1, t, t);
  run_transpose (rng, 2, 37, 70);
  run_transpose (rng, 1, 3, 2 * t + 7);
  /* bands of tile rows (c for nchw_to_nlc): one short of the split and
   * split, 70 columns (hw) */
  run_transpose (rng, 1, TRANSPOSE_SPLIT_ROWS (70), 70);
  run_transpose (rng, 1, TRANSPOSE_SPLIT_ROWS (70) + t, 70);
  /* 320 channels, a 33×31 latent's tokens */
  run_transpose (rng, 2, 320, 1023);
  g_rand_free (rng);
}

static void
test_concat (void)
{
  const int n = 2, ca = 3, cb = 5, hw = 7;
  const size_t total = (size_t) n * (ca + cb) * hw;
  GRand *rng = g_rand_new_with_seed (SEED + 15);
  g_autofree float *a = random_floats (rng, (size_t) n * ca * hw, 1.0);
  g_autofree float *b = random_floats (rng, (size_t) n * cb * hw, 1.0);
  g_autofree float *y = g_new (float, total);
  g_autofree float *expect = g_new (float, total);

  pp_concat_channels (be, pp_view_f32 (a, (size_t) n * ca * hw), ca,
      pp_view_f32 (b, (size_t) n * cb * hw), cb, n, hw,
      pp_out_f32 (y, total));
  for (int s = 0; s < n; s++)
    for (int ch = 0; ch < ca + cb; ch++)
      for (int i = 0; i < hw; i++)
        expect[((size_t) s * (ca + cb) + ch) * hw + i] = ch < ca
            ? a[((size_t) s * ca + ch) * hw + i]
            : b[((size_t) s * cb + ch - ca) * hw + i];
  check_equal ("concat_channels", y, expect, total);
  g_rand_free (rng);
}

/* bytes_to_floats and floats_to_bytes against their formulas (the latter
 * rintf's, clamped), every byte value, special floats and sizes that
 * split across the threads. */
static void
test_bytes_floats (void)
{
  static const float special[] = { 0.5f, 1.5f, 2.5f, 254.5f, 255.5f,
    -0.5f, -0.0f, 0.49999997f, 127.49999f, 255.49998f, 256.0f, -1.0f,
    1e-45f, 3.4e38f, -3.4e38f, INFINITY, -INFINITY, NAN
  };
  const size_t sizes[] = { 1, 255, 3 * PP_CPU_GRAIN_MEMORY + 17 };
  GRand *rng = g_rand_new_with_seed (SEED + 17);

  for (guint k = 0; k < G_N_ELEMENTS (sizes); k++) {
    const size_t n = sizes[k];
    g_autofree guint8 *bytes = g_new (guint8, n);
    g_autofree guint8 *back = g_new (guint8, n);
    g_autofree float *floats = g_new (float, n);
    g_autofree float *x = random_floats (rng, n, 160.0);

    for (size_t i = 0; i < n; i++)
      bytes[i] = (guint8) (i * 7 + 3);
    pp_bytes_to_floats (be, bytes, n, pp_out_f32 (floats, n));
    for (size_t i = 0; i < n; i++)
      if (floats[i] != (float) bytes[i])
        g_error ("bytes_to_floats [%zu]: %g, not %u", i, floats[i], bytes[i]);
    for (size_t i = 0; i < n; i++)
      x[i] = i < G_N_ELEMENTS (special) ? special[i] : x[i] + 120.0f;
    pp_floats_to_bytes (be, pp_view_f32 (x, n), n, back);
    for (size_t i = 0; i < n; i++) {
      const float r = rintf (x[i]);
      const guint8 want = (guint8) (r > 255.f ? 255.f : (r >= 0.f ? r : 0.f));

      if (back[i] != want)
        g_error ("floats_to_bytes [%zu]: %a gave %u, not %u", i, x[i],
            back[i], want);
    }
  }
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
  Paths before = paths_now ();

  pp_upsample_nearest (be, pp_view_f32 (x, (size_t) n * c * h * w), n, c, h,
      w, f, pp_out_f32 (y, total));
  check_splits (what, &before, loop_splits ((size_t) n * c,
          PP_CPU_LAYOUT_GRAIN_VALUES / ((size_t) h * w * f * f) + 1));
  for (int p = 0; p < n * c; p++)
    for (int oy = 0; oy < h * f; oy++)
      for (int ox = 0; ox < w * f; ox++)
        expect[((size_t) p * h * f + oy) * w * f + ox] =
            x[((size_t) p * h + oy / f) * w + ox / f];
  check_equal (what, y, expect, total);
}

/* Planes of h·w·f² output values one short of the split. */
#define UPSAMPLE_SPLIT(out) (2 * (PP_CPU_LAYOUT_GRAIN_VALUES / (out) + 1) - 1)

static void
test_upsample (void)
{
  GRand *rng = g_rand_new_with_seed (SEED + 16);

  run_upsample (rng, 2, 3, 5, 7, 2);
  run_upsample (rng, 1, 2, 3, 4, 3);
  run_upsample (rng, 1, 2, 3, 4, 1);
  run_upsample (rng, 1, UPSAMPLE_SPLIT (5 * 7 * 4), 5, 7, 2);
  run_upsample (rng, 1, UPSAMPLE_SPLIT (5 * 7 * 4) + 1, 5, 7, 2);
  g_rand_free (rng);
}

static void
run_interleave (GRand * rng, int n, int c, int h, int w)
{
  const size_t zh = h + 1, zw = w + 1;
  const size_t n_in = (size_t) n * 4 * c * zh * zw;
  const size_t total = (size_t) n * c * 4 * h * w;
  g_autofree float *z = random_floats (rng, n_in, 1.0);
  g_autofree float *y = g_new (float, total);
  g_autofree float *expect = g_new (float, total);
  g_autofree gchar *what = g_strdup_printf ("interleave_phases %dx%dx%dx%d",
      n, c, h, w);
  Paths before = paths_now ();

  pp_interleave_phases (be, pp_view_f32 (z, n_in), n, c, h, w,
      pp_out_f32 (y, total));
  check_splits (what, &before, loop_splits ((size_t) n * c,
          PP_CPU_LAYOUT_GRAIN_VALUES / ((size_t) 4 * h * w) + 1));
  for (int s = 0; s < n; s++)
    for (int k = 0; k < c; k++)
      for (int oy = 0; oy < 2 * h; oy++)
        for (int ox = 0; ox < 2 * w; ox++) {
          const int a = oy % 2, b = ox % 2;

          expect[(((size_t) s * c + k) * 2 * h + oy) * 2 * w + ox] =
              z[(((size_t) s * 4 + 2 * a + b) * c + k) * zh * zw
              + (size_t) (oy / 2 + a) * zw + ox / 2 + b];
        }
  check_equal (what, y, expect, total);
}

/* Every output value is one of z's, put where its phase says; split over
 * output planes like the upsampling. */
static void
test_interleave (void)
{
  GRand *rng = g_rand_new_with_seed (SEED + 22);

  run_interleave (rng, 1, 1, 1, 1);
  run_interleave (rng, 2, 3, 5, 7);
  run_interleave (rng, 1, UPSAMPLE_SPLIT (5 * 7 * 4), 5, 7);
  run_interleave (rng, 2, UPSAMPLE_SPLIT (5 * 7 * 4) + 1, 5, 7);
  g_rand_free (rng);
}

/* timestep embedding */

static void
check_embedding (float t, int dim, gboolean flip, float shift)
{
  const int half = dim / 2;
  g_autofree float *y = g_new (float, dim);
  g_autofree double *ref = g_new (double, dim);
  g_autofree double *scale = g_new (double, dim);
  g_autofree gchar *what = g_strdup_printf ("timestep_embedding t=%g dim %d "
      "%s shift %g", t, dim, flip ? "[cos,sin]" : "[sin,cos]", shift);

  for (int i = 0; i < dim; i++)
    y[i] = NAN;
  pp_timestep_embedding (be, t, dim, flip, shift, pp_out_f32 (y, dim));
  for (int k = 0; k < half; k++) {
    /* Closed form: f_k = 10000^(-k / (half - shift)). */
    const double f = pow (10000.0, -(double) k / (half - shift));

    ref[flip ? half + k : k] = sin (t * f);
    ref[flip ? k : half + k] = cos (t * f);
    scale[k] = scale[half + k] = 1.0 + fabs (t * f);
  }
  if (dim % 2) {
    ref[dim - 1] = 0.0;
    scale[dim - 1] = 1.0;
  }
  check_close (what, y, ref, dim, scale, 0.0, TOL_EMBEDDING);
}

static void
test_timestep_embedding (void)
{
  float y[8];

  /* t = 0: sin 0 = 0, cos 0 = 1, exactly. */
  pp_timestep_embedding (be, 0.0f, 8, TRUE, 0.0f,
      pp_out_f32 (y, G_N_ELEMENTS (y)));
  for (int i = 0; i < 4; i++) {
    g_assert_cmpfloat (y[i], ==, 1.0f);
    g_assert_cmpfloat (y[4 + i], ==, 0.0f);
  }
  /* dim 8, shift 0: frequencies 1, 0.1, 0.01, 0.001. */
  pp_timestep_embedding (be, 1.0f, 8, FALSE, 0.0f,
      pp_out_f32 (y, G_N_ELEMENTS (y)));
  g_assert_cmpfloat_with_epsilon (y[0], sin (1.0), 1e-7);
  g_assert_cmpfloat_with_epsilon (y[1], sin (0.1), 1e-7);
  g_assert_cmpfloat_with_epsilon (y[3], sin (0.001), 1e-7);
  g_assert_cmpfloat_with_epsilon (y[7], cos (0.001), 1e-7);

  check_embedding (357.0f, 8, TRUE, 0.0f);
  check_embedding (357.0f, 8, FALSE, 0.0f);
  check_embedding (999.0f, 320, TRUE, 0.0f);
  check_embedding (0.5f, 32, FALSE, 1.0f);
  check_embedding (42.0f, 7, TRUE, 0.0f);       /* odd: trailing 0 */
  check_embedding (42.0f, 1, FALSE, 0.0f);      /* no frequency */
}

/* The vectorisable exp and erf of pp-ops-math.h against libm in double,
 * on a dense sweep, and their non-finite inputs. */
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
  /* Non-finite inputs (see pp-ops-math.h). */
  g_assert_true (isnan (pp_math_exp (NAN)));
  g_assert_cmpfloat (pp_math_exp (-INFINITY), ==, 0.0f);
  g_assert_true (isinf (pp_math_exp (INFINITY)));
  g_assert_true (isnan (pp_math_erf (NAN)));
  g_assert_cmpfloat (pp_math_erf (INFINITY), ==, 1.0f);
  g_assert_cmpfloat (pp_math_erf (-INFINITY), ==, -1.0f);
  g_assert_cmpfloat (pp_math_sigmoid (INFINITY), ==, 1.0f);
  g_assert_cmpfloat (pp_math_sigmoid (-INFINITY), ==, 0.0f);
  g_assert_true (isnan (pp_math_sigmoid (NAN)));
  g_assert_true (isnan (pp_math_silu (NAN)));
  g_assert_true (isnan (pp_math_gelu_erf (NAN)));
  g_assert_true (isinf (pp_math_gelu_erf (INFINITY)));
  g_assert_true (isnan (pp_math_tanh (NAN)));
}

/* Views */

/* A 16-bit copy of @x (n values) as @dtype, and @x rounded to it in
 * place. */
static guint16 *
narrow_floats (float *x, size_t n, PpDType dtype)
{
  guint16 *h = g_new (guint16, MAX (n, 1));

  for (size_t i = 0; i < n; i++) {
    h[i] = dtype == PP_DTYPE_F16 ? pp_f32_to_f16 (x[i])
        : pp_f32_to_bf16 (x[i]);
    x[i] = dtype == PP_DTYPE_F16 ? pp_f16_to_f32 (h[i])
        : pp_bf16_to_f32 (h[i]);
  }
  return h;
}

/* Every op that reads views, given 16-bit views, computes exactly what it
 * computes on F32 views of the same values (the glue widens them for the
 * same kernels): what cpu-strict, which stores 16-bit weights, owes cpu,
 * which stores rounded float32 copies.  Views longer than what an op
 * reads are fine. */
static void
run_views_widened (GRand * rng, PpDType dtype)
{
  const int n = 2, cin = 16, h = 9, w = 16, cout = 24, k = 3, hw = h * w;
  const int rows = 37, m = 24, mk = 40;
  const size_t nx = (size_t) n * cin * hw, ny = (size_t) n * cout * hw;
  /* x's values as rows of cin·k·k inputs for linear */
  const int in = cin * k * k, lin_rows = (int) (nx / in);
  const size_t nw = (size_t) cout * cin * k * k, extra = 7;
  const gchar *name = pp_dtype_name (dtype);
  g_autofree float *x = random_floats (rng, nx, 1.0);
  g_autofree float *wt = random_floats (rng, nw + extra, 0.5);
  g_autofree float *bias = random_floats (rng, cout, 1.0);
  g_autofree float *a = random_floats (rng, (size_t) m * mk, 1.0);
  g_autofree guint16 *wt16 = narrow_floats (wt, nw + extra, dtype);
  g_autofree guint16 *bias16 = narrow_floats (bias, cout, dtype);
  g_autofree guint16 *a16 = narrow_floats (a, (size_t) m * mk, dtype);
  const size_t n_out = MAX (ny, (size_t) rows * cout);
  g_autofree float *got = g_new (float, n_out);
  g_autofree float *want = g_new (float, n_out);
  const PpView xv = pp_view_f32 (x, nx);
  const PpOut got_out = pp_out_f32 (got, n_out);
  const PpOut want_out = pp_out_f32 (want, n_out);
  g_autofree gchar *what = NULL;

  /* conv2d: weight and bias (a 3×3 direct kernel repacks the weights). */
  pp_conv2d (be, xv, n, cin, h, w, pp_view (wt16, dtype, nw + extra),
      pp_view (bias16, dtype, cout), cout, k, k, 1, 1, pp_view_none (), FALSE,
      got_out);
  pp_conv2d (be, xv, n, cin, h, w, pp_view_f32 (wt, nw),
      pp_view_f32 (bias, cout), cout, k, k, 1, 1, pp_view_none (), FALSE,
      want_out);
  what = g_strdup_printf ("conv2d, %s views", name);
  check_equal (what, got, want, ny);
  /* linear: the same weights as [cout, cin·9]. */
  pp_linear (be, xv, lin_rows, in, pp_view (wt16, dtype, nw),
      pp_view (bias16, dtype, cout), cout, got_out);
  pp_linear (be, xv, lin_rows, in, pp_view_f32 (wt, nw),
      pp_view_f32 (bias, cout), cout, want_out);
  g_free (what);
  what = g_strdup_printf ("linear, %s views", name);
  check_equal (what, got, want, (size_t) lin_rows * cout);
  /* matmul: a 16-bit a (a weight times an activation), then b too. */
  pp_matmul (be, FALSE, TRUE, m, rows, mk, pp_view (a16, dtype,
          (size_t) m * mk), mk, pp_view_f32 (x, (size_t) rows * mk), mk,
      FALSE, got_out, rows);
  pp_matmul (be, FALSE, TRUE, m, rows, mk, pp_view_f32 (a, (size_t) m * mk),
      mk, pp_view_f32 (x, (size_t) rows * mk), mk, FALSE, want_out, rows);
  g_free (what);
  what = g_strdup_printf ("matmul, %s a", name);
  check_equal (what, got, want, (size_t) m * rows);
  pp_matmul (be, TRUE, FALSE, rows, m, mk, pp_view_f32 (x, (size_t) rows * mk),
      rows, pp_view (a16, dtype, (size_t) m * mk), m, FALSE, got_out, m);
  pp_matmul (be, TRUE, FALSE, rows, m, mk, pp_view_f32 (x, (size_t) rows * mk),
      rows, pp_view_f32 (a, (size_t) m * mk), m, FALSE, want_out, m);
  g_free (what);
  what = g_strdup_printf ("matmul, %s b", name);
  check_equal (what, got, want, (size_t) rows * m);
  /* group_norm and layer_norm: gamma and beta (the bias as both). */
  pp_group_norm (be, xv, pp_view_none (), n, cin, hw, 4, 1e-5f,
      pp_view (bias16, dtype, cin), pp_view (bias16 + 1, dtype, cin), FALSE,
      got_out);
  pp_group_norm (be, xv, pp_view_none (), n, cin, hw, 4, 1e-5f,
      pp_view_f32 (bias, cin), pp_view_f32 (bias + 1, cin), FALSE, want_out);
  g_free (what);
  what = g_strdup_printf ("group_norm, %s views", name);
  check_equal (what, got, want, nx);
  pp_layer_norm (be, xv, rows, cout - 1, 1e-5f, pp_view_none (),
      pp_view (bias16, dtype, cout), got_out);
  pp_layer_norm (be, xv, rows, cout - 1, 1e-5f, pp_view_none (),
      pp_view_f32 (bias, cout), want_out);
  g_free (what);
  what = g_strdup_printf ("layer_norm, %s views", name);
  check_equal (what, got, want, (size_t) rows * (cout - 1));
  /* add and add_channel: activations updated in place. */
  memcpy (got, x, nx * sizeof (float));
  memcpy (want, x, nx * sizeof (float));
  pp_add (be, got_out, pp_view (wt16, dtype, nw + extra), nw);
  pp_add (be, want_out, pp_view_f32 (wt, nw), nw);
  pp_add_channel (be, got_out, 1, cout, hw, pp_view (bias16, dtype, cout));
  pp_add_channel (be, want_out, 1, cout, hw, pp_view_f32 (bias, cout));
  g_free (what);
  what = g_strdup_printf ("add, add_channel, %s views", name);
  check_equal (what, got, want, nx);
}

static void
test_views_widened (void)
{
  GRand *rng = g_rand_new_with_seed (SEED + 20);

  run_views_widened (rng, PP_DTYPE_F16);
  run_views_widened (rng, PP_DTYPE_BF16);
  g_rand_free (rng);
}

/* A view an op cannot read ends the process (ops return nothing; a crash
 * beats garbage), with a message naming the op, the parameter and what is
 * wrong. */
static void
test_views_refused_dtype (void)
{
  if (g_test_subprocess ()) {
    const guint8 weight[9] = { 0 };
    float x[9] = { 0 }, y[1];

    pp_conv2d (be, pp_view_f32 (x, G_N_ELEMENTS (x)), 1, 1, 3, 3,
        pp_view (weight, PP_DTYPE_U8, 9), pp_view_none (), 1, 3, 3, 1, 0,
        pp_view_none (), FALSE, pp_out_f32 (y, G_N_ELEMENTS (y)));
    return;
  }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed ();
  g_test_trap_assert_stderr ("*conv2d: parameter weight is U8*the cpu "
      "backend has no conv2d kernel for it*");
}

/* Activations are checked against the dtypes the backend's ops take. */
static void
test_views_refused_act_dtype (void)
{
  if (g_test_subprocess ()) {
    guint8 x[4] = { 0 };

    pp_silu (be, pp_out (x, PP_DTYPE_U8, G_N_ELEMENTS (x)),
        G_N_ELEMENTS (x));
    return;
  }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed ();
  g_test_trap_assert_stderr ("*silu: activation x is U8*the cpu backend's "
      "ops take activations in*");
}

/* The class of bug of an f16 bias read as float32: reading past the end
 * of what it was given. */
static void
test_views_refused_short (void)
{
  if (g_test_subprocess ()) {
    float x[2 * 3 * 4] = { 0 }, v[5] = { 0 };

    pp_add_channel (be, pp_out_f32 (x, G_N_ELEMENTS (x)), 2, 3, 4,
        pp_view_f32 (v, G_N_ELEMENTS (v)));
    return;
  }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed ();
  g_test_trap_assert_stderr ("*add_channel: parameter v has 5 elements (F32)"
      " on the cpu backend; the op reads 6*");
}

/* The same for an output: writing past the end of what it was given. */
static void
test_views_refused_short_out (void)
{
  if (g_test_subprocess ()) {
    float x[2 * 3] = { 0 }, w[4 * 3] = { 0 }, y[2 * 4 - 1];

    pp_linear (be, pp_view_f32 (x, G_N_ELEMENTS (x)), 2, 3,
        pp_view_f32 (w, G_N_ELEMENTS (w)), pp_view_none (), 4,
        pp_out_f32 (y, G_N_ELEMENTS (y)));
    return;
  }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed ();
  g_test_trap_assert_stderr ("*linear: parameter y has 7 elements (F32) on "
      "the cpu backend; the op uses 8*");
}

static void
test_views_refused_absent (void)
{
  if (g_test_subprocess ()) {
    float b[4] = { 0 }, y[4];

    pp_matmul (be, FALSE, FALSE, 2, 2, 2, pp_view_none (), 2,
        pp_view_f32 (b, 4), 2, FALSE, pp_out_f32 (y, G_N_ELEMENTS (y)), 2);
    return;
  }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed ();
  g_test_trap_assert_stderr ("*matmul: parameter a is absent*reads 4 "
      "elements*");
}

/* Only an optional activation may be absent (lcm_step's noise, on the last
 * step): a required one is refused like a weight. */
static void
test_views_refused_absent_act (void)
{
  if (g_test_subprocess ()) {
    float x[4] = { 0 };
    const PpLcmCoeffs coeffs = { 0 };

    pp_lcm_step (be, pp_out_f32 (x, G_N_ELEMENTS (x)), pp_view_none (),
        pp_view_none (), G_N_ELEMENTS (x), &coeffs);
    return;
  }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed ();
  g_test_trap_assert_stderr ("*lcm_step: parameter eps is absent*uses 4 "
      "elements*");
}

/* The table and the wrappers agree. */
static void
test_table (void)
{
  float a[3] = { -1.0f, 0.5f, 2.0f }, b[3] = { -1.0f, 0.5f, 2.0f };

  g_assert_cmpstr (pp_backend_name (be), ==, "cpu");
  be->ops->relu (be, pp_out_f32 (a, 3), 3);
  pp_relu (be, pp_out_f32 (b, 3), 3);
  check_equal ("table relu", a, b, 3);
  g_assert_cmpfloat (a[0], ==, 0.0f);
}

/* The profile's bytes (PpOpProfile.bytes): what each call's views hold,
 * trimmed to what the op uses, an absent bias none, 16-bit views at two
 * bytes; nothing while profiling is off. */
static void
test_profile_bytes (void)
{
  enum { N = 1000, ROWS = 3, IN = 5, OUT = 4 };
  g_autofree float *y = g_new0 (float, N), *x = g_new0 (float, 2 * N);
  g_autofree guint16 *w16 = g_new0 (guint16, OUT * IN);
  float xl[ROWS * IN] = { 0 }, w[OUT * IN] = { 0 }, yl[ROWS * OUT];
  PpOpProfile add, linear;

  pp_ops_reset_flop_count ();
  pp_ops_set_profiling (TRUE);
  /* x holds twice what the add reads. */
  pp_add (be, pp_out_f32 (y, N), pp_view_f32 (x, 2 * N), N);
  pp_linear (be, pp_view_f32 (xl, ROWS * IN), ROWS, IN,
      pp_view_f32 (w, OUT * IN), pp_view_none (), OUT,
      pp_out_f32 (yl, ROWS * OUT));
  pp_linear (be, pp_view_f32 (xl, ROWS * IN), ROWS, IN,
      pp_view (w16, PP_DTYPE_F16, OUT * IN), pp_view_f32 (w, OUT), OUT,
      pp_out_f32 (yl, ROWS * OUT));
  pp_ops_set_profiling (FALSE);
  pp_add (be, pp_out_f32 (y, N), pp_view_f32 (x, N), N);
  pp_ops_get_profile (PP_OP_ADD, &add);
  pp_ops_get_profile (PP_OP_LINEAR, &linear);
  g_assert_cmpuint (add.calls, ==, 1);
  g_assert_cmpuint (add.bytes, ==, 2 * N * sizeof (float));
  g_assert_cmpuint (linear.calls, ==, 2);
  g_assert_cmpuint (linear.bytes, ==, (ROWS * IN + OUT * IN + ROWS * OUT)
      * sizeof (float) + (ROWS * IN + OUT + ROWS * OUT) * sizeof (float)
      + OUT * IN * sizeof (guint16));
  pp_ops_reset_flop_count ();
  pp_ops_get_profile (PP_OP_ADD, &add);
  g_assert_cmpuint (add.bytes, ==, 0);
}

/* The profiled calls by shape: one op's calls of the same FLOPs and bytes
 * form one group, another size another, each with its calls and time;
 * calls inside pp_for_rows (no time of their own on a host) and calls
 * while profiling is off form none, and a reset clears them. */
static void
rows_add (int begin, int end, gpointer data)
{
  float *y = data;

  pp_add (be, pp_out_f32 (y + begin, end - begin), pp_view_f32 (y + begin,
          end - begin), end - begin);
}

static const PpOpShape *
find_shape (GArray * shapes, PpOp op, guint64 bytes)
{
  for (guint i = 0; i < shapes->len; i++) {
    const PpOpShape *s = &g_array_index (shapes, PpOpShape, i);

    if (s->op == op && s->bytes == bytes)
      return s;
  }
  return NULL;
}

static void
test_profile_shapes (void)
{
  enum { N = 1000, ROWS = 3, IN = 5, OUT = 4 };
  g_autofree float *y = g_new0 (float, N), *x = g_new0 (float, N);
  float xl[ROWS * IN] = { 0 }, w[OUT * IN] = { 0 }, yl[ROWS * OUT];
  g_autoptr (GArray) shapes = NULL;
  const PpOpShape *big, *small, *linear, *rows;

  pp_ops_reset_flop_count ();
  pp_ops_set_profiling (TRUE);
  pp_add (be, pp_out_f32 (y, N), pp_view_f32 (x, N), N);
  pp_add (be, pp_out_f32 (y, N / 2), pp_view_f32 (x, N / 2), N / 2);
  pp_add (be, pp_out_f32 (y, N), pp_view_f32 (x, N), N);
  pp_linear (be, pp_view_f32 (xl, ROWS * IN), ROWS, IN,
      pp_view_f32 (w, OUT * IN), pp_view_none (), OUT,
      pp_out_f32 (yl, ROWS * OUT));
  pp_for_rows (be, N, rows_add, y);
  pp_ops_set_profiling (FALSE);
  pp_add (be, pp_out_f32 (y, N), pp_view_f32 (x, N), N);

  shapes = pp_ops_get_shapes ();
  /* The adds of two sizes, the linear and the region. */
  g_assert_cmpuint (shapes->len, ==, 4);
  big = find_shape (shapes, PP_OP_ADD, 2 * N * sizeof (float));
  small = find_shape (shapes, PP_OP_ADD, N * sizeof (float));
  linear = find_shape (shapes, PP_OP_LINEAR, (ROWS * IN + OUT * IN
          + ROWS * OUT) * sizeof (float));
  rows = find_shape (shapes, PP_OP_FOR_ROWS, 0);
  g_assert_nonnull (big);
  g_assert_nonnull (small);
  g_assert_nonnull (linear);
  g_assert_nonnull (rows);
  g_assert_cmpuint (big->calls, ==, 2);
  g_assert_cmpuint (small->calls, ==, 1);
  g_assert_cmpuint (linear->calls, ==, 1);
  g_assert_cmpuint (linear->flops, ==, 2 * ROWS * IN * OUT);
  g_assert_cmpuint (big->flops, ==, 0);
  g_assert_cmpuint (rows->calls, ==, 1);
  g_assert_cmpfloat (big->seconds, >=, 0);
  g_assert_cmpfloat (big->device_seconds, ==, 0);
  g_array_unref (g_steal_pointer (&shapes));

  pp_ops_reset_flop_count ();
  shapes = pp_ops_get_shapes ();
  g_assert_cmpuint (shapes->len, ==, 0);
}

int
main (int argc, char **argv)
{
  be = pp_backend_cpu ();
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/kernels/ops/paths", test_paths);
  g_test_add_func ("/kernels/ops/table", test_table);
  g_test_add_func ("/kernels/ops/profile-bytes", test_profile_bytes);
  g_test_add_func ("/kernels/ops/profile-shapes", test_profile_shapes);
  g_test_add_func ("/kernels/ops/math", test_math);
  g_test_add_func ("/kernels/ops/conv2d", test_conv2d);
  g_test_add_func ("/kernels/ops/conv2d-kernels", test_conv2d_kernels);
  g_test_add_func ("/kernels/ops/conv2d-bands", test_conv2d_bands);
  g_test_add_func ("/kernels/ops/group-norm", test_group_norm);
  g_test_add_func ("/kernels/ops/layer-norm", test_layer_norm);
  g_test_add_func ("/kernels/ops/linear", test_linear);
  g_test_add_func ("/kernels/ops/linear-add", test_linear_add);
  g_test_add_func ("/kernels/ops/matmul", test_matmul);
  g_test_add_func ("/kernels/ops/for-rows", test_for_rows);
  g_test_add_func ("/kernels/ops/attention-gemm", test_attention_gemm);
  g_test_add_func ("/kernels/ops/attention-fused", test_attention_fused);
  g_test_add_func ("/kernels/ops/unary", test_unary);
  g_test_add_func ("/kernels/ops/unary-nonfinite", test_unary_nonfinite);
  g_test_add_func ("/kernels/ops/geglu", test_geglu);
  g_test_add_func ("/kernels/ops/add-scale", test_add_scale);
  g_test_add_func ("/kernels/ops/add-channel", test_add_channel);
  g_test_add_func ("/kernels/ops/transpose", test_transpose);
  g_test_add_func ("/kernels/ops/concat", test_concat);
  g_test_add_func ("/kernels/ops/bytes-floats", test_bytes_floats);
  g_test_add_func ("/kernels/ops/upsample", test_upsample);
  g_test_add_func ("/kernels/ops/interleave-phases", test_interleave);
  g_test_add_func ("/kernels/ops/timestep-embedding",
      test_timestep_embedding);
  g_test_add_func ("/kernels/ops/views/widened", test_views_widened);
  g_test_add_func ("/kernels/ops/views/refused-dtype",
      test_views_refused_dtype);
  g_test_add_func ("/kernels/ops/views/refused-act-dtype",
      test_views_refused_act_dtype);
  g_test_add_func ("/kernels/ops/views/refused-short",
      test_views_refused_short);
  g_test_add_func ("/kernels/ops/views/refused-short-out",
      test_views_refused_short_out);
  g_test_add_func ("/kernels/ops/views/refused-absent",
      test_views_refused_absent);
  g_test_add_func ("/kernels/ops/views/refused-absent-act",
      test_views_refused_absent_act);
  return g_test_run ();
}
