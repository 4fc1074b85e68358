/* kernels/cuda-emu: the CUDA backend's own kernels (the .cu files of
 * kernels/cuda) on the CPU, through the emulated runtime of
 * include/cuda_runtime.h: their index arithmetic, reductions, barriers
 * and 16-bit rounding, checked where no GPU and no CUDA toolkit is.
 *
 * Every entry point of pp-cuda-kernels.h and pp-cuda-convert.h runs on
 * small, odd shapes (not multiples of 32; split group norms of one to 32
 * slices; channels first and last; the grid-stride loops gone round
 * twice), in both thread orders, on buffers of their exact size
 * (emu-check.h).  References: the formulas of pp-ops-math.h and
 * pp-dtype-math.h and the CPU ops (pp-cpu-ops.h), bit for bit, where the
 * kernels promise their results; float64 (pp-ops-reference.h) within
 * bounds for the norms and the softmax.  And the promise of
 * pp-cuda-kernels.h for 16-bit activations: each kernel runs on float32
 * buffers, then on 16-bit ones holding the same values (inputs are drawn
 * exactly representable in both 16-bit types), and every 16-bit output
 * is the float32 output rounded, bit for bit.
 *
 * Not here: the loops past the grid's caps of 65535 rows, items or tiles
 * (the norms', the softmax's, the transposes'): seconds to minutes of
 * emulated barriers for each launch. */
#include "emu-check.h"
#include "emu-faults.h"
#include "pp-cpu-ops.h"
#include "pp-cuda-common.cuh"
#include "pp-cuda-convert.h"
#include "pp-cuda-kernels.h"
#include "pp-dtype-math.h"
#include "pp-ops-math.h"
#include "pp-ops-reference.h"

#include <math.h>

/* More elements than a grid-stride launch has threads (the element-wise
 * kernels' and the conversions' caps): the loops go round twice. */
#define PAST_GRID (PP_CUDA_MAX_BLOCKS * PP_CUDA_THREADS + 333)
#define EPS 1e-5f

/* ---- Values -------------------------------------------------------- */

static GRand *rng;

/* A value in [lo, hi) that float16 and bfloat16 both hold exactly (8
 * significant bits, float16's exponent range), so that every storage
 * holds the same input. */
static float
exact_value (float lo, float hi)
{
  for (;;) {
    const float v = pp_bf16_to_f32 (pp_f32_to_bf16 ((float)
            g_rand_double_range (rng, lo, hi)));

    if (pp_f16_to_f32 (pp_f32_to_f16 (v)) == v)
      return v;
  }
}

static std::vector<float>
exact_values (size_t n, float lo, float hi)
{
  std::vector<float> v (n);

  for (float &x : v)
    x = exact_value (lo, hi);
  return v;
}

/* Any float in [lo, hi). */
static std::vector<float>
float_values (size_t n, double lo, double hi)
{
  std::vector<float> v (n);

  for (float &x : v)
    x = (float) g_rand_double_range (rng, lo, hi);
  return v;
}

static std::vector<double>
as_double (const std::vector<float> &v)
{
  return std::vector<double> (v.begin (), v.end ());
}

/* [n, c, hw] laid out channels last, [n, hw, c]. */
template <typename T> static std::vector<T>
channels_last (const std::vector<T> &x, int n, int c, size_t hw)
{
  std::vector<T> y (x.size ());

  for (int s = 0; s < n; s++)
    for (int ch = 0; ch < c; ch++)
      for (size_t p = 0; p < hw; p++)
        y[((size_t) s * hw + p) * c + ch] = x[((size_t) s * c + ch) * hw + p];
  return y;
}

/* ---- Element-wise -------------------------------------------------- */

static void
test_fill (void)
{
  for (size_t n : { (size_t) 1, (size_t) 1001, (size_t) PAST_GRID }) {
    const std::vector<Arg> args = { out ("x", n) };
    const std::string what = strf ("fill n=%zu", n);
    auto r = run_typed (what, args, [&] (const Run &b) {
          return pp_cuda_fill (b.f (0), -2.5f, n, NULL); });

    if (r)
      expect_bits (what, args, *r, 0, std::vector<float> (n, -2.5f));
  }
}

static const struct
{
  PpCudaUnary op;
  const char *name;
  float (*f) (float);
} unaries[] = {
  { PP_CUDA_SILU, "silu", pp_math_silu },
  { PP_CUDA_RELU, "relu", pp_math_relu },
  { PP_CUDA_TANH, "tanh", pp_math_tanh },
  { PP_CUDA_GELU, "gelu", pp_math_gelu_erf },
  { PP_CUDA_QUICK_GELU, "quick_gelu", pp_math_quick_gelu },
};

/* The element size of storage @t. */
static size_t
elem_size (PpCudaType t)
{
  return t == PP_CUDA_F32 ? 4 : 2;
}

static void *
elem_at (void *p, PpCudaType t, size_t i)
{
  return (uint8_t *) p + i * elem_size (t);
}

/* The element-wise kernels have a vector path (PP_CUDA_VEC elements a
 * thread, pp_cuda_load8) for sizes of whole vectors on aligned buffers:
 * the odd sizes take the scalar one, the even the vector one; each gives
 * the same bytes. */
static void
test_unary (void)
{
  for (size_t n : { (size_t) 777, (size_t) 1000 })
  for (const auto &u : unaries) {
    const std::vector<Arg> args = { inout ("x", exact_values (n, -6, 6)) };
    const std::string what = strf ("unary %s n=%zu", u.name, n);
    auto r = run_typed (what, args, [&] (const Run &b) {
          return pp_cuda_unary (u.op, b.p (0), b.t (0), n, NULL); },
        { { F16 }, { BF16 } });
    std::vector<float> want (n);

    for (size_t i = 0; i < n; i++)
      want[i] = u.f (args[0].values[i]);
    if (r)
      expect_bits (what, args, *r, 0, want);
  }
  {
    float x = 1.0f;

    if (pp_cuda_unary ((PpCudaUnary) 99, &x, PP_CUDA_F32, 1, NULL)
        != cudaErrorInvalidValue)
      failf ("unary: an unknown op is not refused");
  }
}

static void
test_geglu (void)
{
  const struct { size_t rows; int d; } shapes[] = { { 7, 77 }, { 9, 40 } };

  for (const auto &shape : shapes) {
  const size_t rows = shape.rows;
  const int d = shape.d;
  const std::vector<Arg> args = { in ("x", exact_values (rows * 2 * d, -3,
              3)), out ("y", rows * d) };
  const std::string what = strf ("geglu rows=%zu d=%d", rows, d);
  auto r = run_typed (what, args, [&] (const Run &b) {
        return pp_cuda_geglu (b.p (0), rows, d, b.p (1), b.t (0), NULL); },
      { { F16, F16 }, { BF16, BF16 } });
  std::vector<float> want (rows * d);
  const std::vector<float> &x = args[0].values;

  for (size_t row = 0; row < rows; row++)
    for (int j = 0; j < d; j++)
      want[row * d + j] = pp_math_geglu (x[row * 2 * d + j],
          x[row * 2 * d + d + j]);
  if (r)
    expect_bits (what, args, *r, 1, want);
  }
}

static void
test_add (void)
{
  /* Odd, whole vectors, and whole vectors past the grid (the vector
   * loop goes round twice). */
  for (size_t n : { (size_t) 1003, (size_t) 1000,
          (size_t) PP_CUDA_VEC * PAST_GRID }) {
    const std::vector<Arg> args = { inout ("y", exact_values (n, -4, 4)),
      in ("x", exact_values (n, -4, 4)) };
    const std::string what = strf ("add n=%zu", n);
    auto r = run_typed (what, args, [&] (const Run &b) {
          return pp_cuda_add (b.p (0), b.t (0), b.p (1), b.t (1), n, NULL); },
        n > 1003 * 8 ? std::vector<Types> { { F16, BF16 } }
        : std::vector<Types> { { F16, F32 }, { BF16, F16 }, { F32, BF16 },
          { F16, BF16 }, { BF16, BF16 } });
    std::vector<float> want (n);

    for (size_t i = 0; i < n; i++)
      want[i] = args[0].values[i] + args[1].values[i];
    if (r)
      expect_bits (what, args, *r, 0, want);
  }
  {
    /* Whole vectors from an element past an aligned start: not aligned,
     * so the scalar path; the element before is left alone. */
    const size_t n = 1001;
    const std::vector<Arg> args = { inout ("y", exact_values (n, -4, 4)),
      in ("x", exact_values (n, -4, 4)) };
    auto r = run_typed ("add unaligned", args, [&] (const Run &b) {
          return pp_cuda_add (elem_at (b.p (0), b.t (0), 1), b.t (0),
              elem_at (b.p (1), b.t (1), 1), b.t (1), n - 1, NULL); },
        { { F16, F16 }, { BF16, F32 } });
    std::vector<float> want (n);

    want[0] = args[0].values[0];
    for (size_t i = 1; i < n; i++)
      want[i] = args[0].values[i] + args[1].values[i];
    if (r)
      expect_bits ("add unaligned", args, *r, 0, want);
  }
}

static void
test_scale_affine (void)
{
  const size_t n = 1001;
  const float s = 0.37f, mul = 1.7f, add = -0.3f;
  const std::vector<Arg> args = { inout ("x", exact_values (n, -4, 4)) };
  std::vector<float> want (n);
  std::unique_ptr<Run> r;

  r = run_typed ("scale", args, [&] (const Run &b) {
        return pp_cuda_scale (b.p (0), b.t (0), n, s, NULL); },
      { { F16 }, { BF16 } });
  for (size_t i = 0; i < n; i++)
    want[i] = args[0].values[i] * s;
  if (r)
    expect_bits ("scale", args, *r, 0, want);

  r = run_typed ("affine", args, [&] (const Run &b) {
        return pp_cuda_affine (b.p (0), b.t (0), n, mul, add, NULL); },
      { { F16 }, { BF16 } });
  for (size_t i = 0; i < n; i++) {
    /* Two roundings: this file is built without contraction. */
    const float m = args[0].values[i] * mul;

    want[i] = m + add;
  }
  if (r)
    expect_bits ("affine", args, *r, 0, want);
}

static void
test_axpby (void)
{
  const size_t n = 999;
  const float a = 0.8f;

  for (float bcoef : { 0.0f, -1.3f }) {
    /* With b = 0, y's NaNs must not leak in. */
    const std::vector<Arg> args = {
      inout ("y", bcoef == 0.0f ? std::vector<float> (n, NAN)
          : float_values (n, -3, 3)),
      in ("x", float_values (n, -3, 3)),
    };
    const std::string what = strf ("axpby b=%g", bcoef);
    auto r = run_typed (what, args, [&] (const Run &b) {
          return pp_cuda_axpby (b.f (0), a, b.f (1), bcoef, n, NULL); });
    std::vector<float> want (n);

    for (size_t i = 0; i < n; i++) {
      const float ax = a * args[1].values[i];
      const float by = bcoef * args[0].values[i];

      want[i] = bcoef == 0.0f ? ax : ax + by;
    }
    if (r)
      expect_bits (what, args, *r, 0, want);
  }
}

static void
test_lcm_step (void)
{
  const size_t n = 1001;

  for (int last = 0; last < 2; last++) {
    const PpLcmCoeffs c = { 0.9f, 0.43f, 0.97f, 0.02f, 0.8f, 0.6f, last };
    const std::vector<Arg> args = { inout ("x", float_values (n, -3, 3)),
      in ("eps", float_values (n, -3, 3)),
      in ("noise", float_values (n, -3, 3)) };
    const std::string what = strf ("lcm_step last=%d", last);
    auto r = run_typed (what, args, [&] (const Run &b) {
          return pp_cuda_lcm_step (b.f (0), b.f (1), last ? NULL : b.f (2),
              n, c, NULL); });
    std::vector<float> want (n);

    for (size_t i = 0; i < n; i++)
      want[i] = pp_math_lcm_step (&c, args[0].values[i], args[1].values[i],
          last ? 0.0f : args[2].values[i]);
    if (r)
      expect_bits (what, args, *r, 0, want);
  }
}

static void
test_timestep_embedding (void)
{
  for (int dim : { 1, 4, 320, 321, 2 * PAST_GRID + 1 })
    for (int flip = 0; flip < 2; flip++) {
      const float t = 999.0f, shift = flip ? 0.0f : 1.0f;
      const std::vector<Arg> args = { out ("y", dim) };
      const std::string what = strf ("timestep_embedding dim=%d flip=%d",
          dim, flip);
      auto r = run_typed (what, args, [&] (const Run &b) {
            return pp_cuda_timestep_embedding (t, dim, flip, shift, b.f (0),
                NULL); });
      std::vector<float> want (dim);

      pp_cpu_timestep_embedding (t, dim, flip, shift, want.data ());
      if (r)
        expect_bits (what, args, *r, 0, want);
    }
}

static void
test_row_bias (void)
{
  const size_t rows = 9;
  const int cols = 37;
  const std::vector<Arg> args = { inout ("y", exact_values (rows * cols, -2,
              2)), in ("bias", exact_values (cols, -1, 1)) };
  auto r = run_typed ("add_row_bias", args, [&] (const Run &b) {
        return pp_cuda_add_row_bias (b.f (0), rows, cols, b.p (1), b.t (1),
            NULL); }, { { F32, F16 }, { F32, BF16 } });
  std::vector<float> want (rows * cols);

  for (size_t i = 0; i < rows * cols; i++)
    want[i] = args[0].values[i] + args[1].values[i % cols];
  if (r)
    expect_bits ("add_row_bias", args, *r, 0, want);
}

static void
test_channel_bias (void)
{
  /* Channels first; rows of channels (hw 1, channels last) of an odd
   * count, and of whole vectors. */
  const struct { int n, c; size_t hw; } shapes[] = { { 2, 5, 37 },
    { 37, 5, 1 }, { 37, 40, 1 } };

  for (const auto &shape : shapes) {
  const int n = shape.n, c = shape.c;
  const size_t hw = shape.hw, total = (size_t) n * c * hw;
  std::vector<float> x = exact_values (total, -2, 2);
  const std::vector<float> bias = exact_values (c, -1, 1);
  std::vector<float> want (total);

  /* -0 stays -0 without a bias (x + 0 would not), and through the relu. */
  for (size_t i = 0; i < total; i += 7)
    x[i] = -0.0f;
  for (int with = 0; with < 4; with++) {
    const int with_bias = with & 1, relu = with >> 1;
    const std::vector<Arg> args = { in ("x", x), out ("y", total),
      in ("bias", bias) };
    const std::string what = strf ("channel_bias n=%d c=%d hw=%zu%s%s", n, c,
        hw, with_bias ? "" : " no bias", relu ? " relu" : "");
    auto r = run_typed (what, args, [&] (const Run &b) {
          return pp_cuda_channel_bias (b.p (0), b.t (0), b.p (1), b.t (1), n,
              c, hw, with_bias ? b.p (2) : NULL, b.t (2), relu, NULL); },
        { { F16, F16, F32 }, { BF16, F32, F16 }, { F32, BF16, BF16 },
          { F16, BF16, F16 } });

    for (size_t i = 0; i < total; i++) {
      const float v = with_bias ? x[i] + bias[(i / hw) % c] : x[i];

      want[i] = relu ? pp_math_relu (v) : v;
    }
    if (r)
      expect_bits (what, args, *r, 1, want);
  }
  {
    /* In place (x = y, of one type). */
    const std::vector<Arg> args = { inout ("x", x), in ("bias", bias) };
    auto r = run_typed ("channel_bias in place", args, [&] (const Run &b) {
          return pp_cuda_channel_bias (b.p (0), b.t (0), b.p (0), b.t (0), n,
              c, hw, b.p (1), b.t (1), 0, NULL); },
        { { F16, BF16 }, { BF16, F32 } });

    for (size_t i = 0; i < total; i++)
      want[i] = x[i] + bias[(i / hw) % c];
    if (r)
      expect_bits ("channel_bias in place", args, *r, 0, want);
  }
  /* A residual of y's type after the bias, before the relu; with and
   * without the bias, out of place and in place. */
  const std::vector<float> res = exact_values (total, -2, 2);

  for (int with = 0; with < 4; with++) {
    const int with_bias = with & 1, relu = with >> 1;
    const std::vector<Arg> args = { in ("x", x), out ("y", total),
      in ("bias", bias), in ("res", res) };
    const std::string what = strf ("channel_bias n=%d c=%d hw=%zu residual"
        "%s%s", n, c, hw, with_bias ? "" : " no bias", relu ? " relu" : "");
    auto r = run_typed (what, args, [&] (const Run &b) {
          return pp_cuda_channel_bias_residual (b.p (0), b.t (0), b.p (1),
              b.t (1), n, c, hw, with_bias ? b.p (2) : NULL, b.t (2),
              b.p (3), relu, NULL); },
        { { F16, F16, F32, F16 }, { BF16, F32, F16, F32 },
          { F32, BF16, BF16, BF16 } });

    for (size_t i = 0; i < total; i++) {
      const float v = (with_bias ? x[i] + bias[(i / hw) % c] : x[i]) + res[i];

      want[i] = relu ? pp_math_relu (v) : v;
    }
    if (r)
      expect_bits (what, args, *r, 1, want);
  }
  {
    const std::vector<Arg> args = { inout ("x", x), in ("bias", bias),
      in ("res", res) };
    auto r = run_typed ("channel_bias residual in place", args,
        [&] (const Run &b) {
          return pp_cuda_channel_bias_residual (b.p (0), b.t (0), b.p (0),
              b.t (0), n, c, hw, b.p (1), b.t (1), b.p (2), 1, NULL); },
        { { F16, BF16, F16 }, { BF16, F32, BF16 } });

    for (size_t i = 0; i < total; i++)
      want[i] = pp_math_relu (x[i] + bias[(i / hw) % c] + res[i]);
    if (r)
      expect_bits ("channel_bias residual in place", args, *r, 0, want);
  }
  }
}

static void
test_narrow_2d (void)
{
  const size_t rows = 5, cols = 33, ld = 40;
  /* Any float: the kernel rounds them. */
  const std::vector<Arg> args = { in ("x", float_values (rows * ld, -70000,
              70000)), out ("y", rows * cols) };
  std::vector<float> want (rows * cols);

  for (size_t r = 0; r < rows; r++)
    for (size_t j = 0; j < cols; j++)
      want[r * cols + j] = args[0].values[r * ld + j];
  for (Storage y : { F16, BF16 }) {
    const std::string what = strf ("narrow_2d rows=%zu cols=%zu ld=%zu",
        rows, cols, ld);
    auto r = run_checked (what, args, { F32, y }, [&] (const Run &b) {
          return pp_cuda_narrow_2d (b.f (0), rows, cols, ld, b.p (1),
              b.t (1), NULL); });

    if (r)
      expect_bits (what, args, *r, 1, want);
  }
  {
    float x = 0.0f, y;

    if (pp_cuda_narrow_2d (&x, 1, 1, 1, &y, PP_CUDA_F32, NULL)
        != cudaErrorInvalidValue)
      failf ("narrow_2d: a float32 output is not refused");
  }
}

static void
test_bytes (void)
{
  const size_t n = 1000;
  std::vector<float> bytes (n), floats = float_values (n, -20, 280);
  std::vector<uint8_t> want_bytes (n);
  std::unique_ptr<Run> r;

  for (size_t i = 0; i < n; i++)
    bytes[i] = (float) (i * 7 % 256);
  /* Ties round to even; NaN and the ends clamp. */
  floats[0] = NAN;
  floats[1] = 2.5f;
  floats[2] = 3.5f;
  floats[3] = -INFINITY;
  floats[4] = INFINITY;
  floats[5] = 254.5f;
  {
    const std::vector<Arg> args = { in ("x", bytes), out ("y", n) };

    r = run_checked ("bytes_to_floats", args, { U8, F32 },
        [&] (const Run &b) {
          return pp_cuda_bytes_to_floats ((const uint8_t *) b.p (0), n,
              b.f (1), NULL); });
    if (r)
      expect_bits ("bytes_to_floats", args, *r, 1, bytes);
  }
  {
    const std::vector<Arg> args = { in ("x", floats), out ("y", n) };
    std::vector<float> want (n);

    pp_cpu_floats_to_bytes (floats.data (), n, want_bytes.data ());
    for (size_t i = 0; i < n; i++)
      want[i] = want_bytes[i];
    r = run_checked ("floats_to_bytes", args, { F32, U8 },
        [&] (const Run &b) {
          return pp_cuda_floats_to_bytes (b.f (0), n, (uint8_t *) b.p (1),
              NULL); });
    if (r)
      expect_bits ("floats_to_bytes", args, *r, 1, want);
  }
}

/* ---- Norms --------------------------------------------------------- */

/* The double reference of a group norm of [n, c, hw] channels first;
 * gamma, beta NULL for 1 and 0. */
static std::vector<double>
group_norm_reference (const std::vector<float> &x, int n, int c, size_t hw,
    int groups, const float *gamma, const float *beta, bool silu)
{
  const size_t count = (size_t) (c / groups) * hw;
  std::vector<double> y (x.size ());

  for (size_t item = 0; item < (size_t) n * groups; item++) {
    const size_t first = item * count;
    double mean, rstd;

    pp_ref_moments (x.data () + first, count, EPS, &mean, &rstd);
    for (size_t i = 0; i < count; i++) {
      const int ch = (int) (item % groups) * (c / groups) + (int) (i / hw);
      const double v = (x[first + i] - mean) * rstd
          * (gamma ? gamma[ch] : 1.0) + (beta ? beta[ch] : 0.0);

      y[first + i] = silu ? pp_ref_silu (v) : v;
    }
  }
  return y;
}

/* Group norm ways: the split kernels channels first or last, or one block
 * per group (no partials). */
enum Way
{
  SPLIT,
  SPLIT_NHWC,
  /* Channels last, eight channels a thread where c allows. */
  VECTOR_NHWC,
  WHOLE,
  /* Channels last, eight channels a thread where c allows, two launches:
   * one pass of sums combined by the last tile to finish. */
  TICKET_NHWC,
  /* The same sums in one cooperative launch, the tiles meeting. */
  GRID_NHWC,
};

static const char *const way_names[] = { "split", "split nhwc", "vector nhwc",
  "whole", "ticket nhwc", "grid nhwc"
};

/* Whether @way's kernels take a channels-last x and y. */
static bool
nhwc_way (Way way)
{
  return way == SPLIT_NHWC || way == VECTOR_NHWC || way == TICKET_NHWC
      || way == GRID_NHWC;
}

/* The ticket and grid kernels' counts: the emulation's device memory is
 * the host's.  The ticket way's n counts 0 before each call; the grid
 * way's pairs (a sample's count, 0 before each call, then its
 * generation) as the way's calls before left them, as in a backend
 * whose norms take different numbers of samples: after a case, every
 * count as before it (checked), but the grid kernel's generations, one
 * more a launch. */
static unsigned ticket_counts[128];

/* Bounds of the float32 group and layer norms against float64, for
 * values of order 1: float32 steps and a sum of a few hundred terms per
 * thread. */
#define NORM_ABS 2e-6
#define NORM_REL 2e-6

struct GroupNormShape
{
  int n, c;
  size_t hw;
  int groups;
  const char *why;
};

static const GroupNormShape group_norm_shapes[] = {
  { 2, 8, 3001, 4, "3 slices of 2001, 2001 and 2000 values" },
  { 1, 4, 16411, 1, "32 slices, the most" },
  { 3, 10, 999, 5, "one slice" },
  { 1, 6, 7, 3, "fewer values than threads" },
  /* Channels last: two channels a thread, tiles of 4 or 5 pixels. */
  { 1, 1040, 13, 8, "2 channels a thread, 3 tiles channels last" },
  /* A UNet's 32 groups, 3 channels each, tiles of uneven pixels. */
  { 2, 96, 1111, 32, "tiles of 42 or 43 pixels channels last" },
  /* SD's widest norm (an up block's concatenation): 3 channels a thread,
   * the last thread's third past c. */
  { 2, 2560, 9, 32, "3 channels a thread channels last" },
  /* A UNet's 10 channels a group: the vector kernels' eight channels of a
   * thread span two groups; 40 threads a pixel, 8 pixels at once. */
  { 2, 320, 67, 32, "10 channels a group, 8 pixels a pass (vector)" },
  /* The most channels: 384 vector threads, a pixel a pass. */
  { 1, 3072, 5, 32, "3072 channels, a pixel a pass (vector)" },
};

/* One group norm case: @x channels first; run the @way way, in place or
 * not, with or without gamma and beta, and with @shift [n, c] added to
 * the channels first when it is not empty (float32, as the op hands it
 * over; the last argument).  Returns the float32 run (y at 0 in place,
 * else at 4), or NULL. */
static std::unique_ptr<Run>
group_norm_case (const GroupNormShape &s, Way way, bool in_place,
    bool params, bool silu, const std::vector<float> &x,
    const std::vector<float> &gamma, const std::vector<float> &beta,
    const std::vector<float> &shift, const std::vector<Types> &typings,
    double abs, double rel)
{
  const int splits = pp_cuda_group_norm_splits (s.n, s.c, s.hw, s.groups);
  const bool nhwc = nhwc_way (way);
  const int layout = way == VECTOR_NHWC ? PP_CUDA_GROUP_NHWC_VECTOR
      : way == TICKET_NHWC ? PP_CUDA_GROUP_NHWC_TICKET
      : way == GRID_NHWC ? PP_CUDA_GROUP_NHWC_GRID
      : nhwc ? PP_CUDA_GROUP_NHWC : PP_CUDA_GROUP_NCHW;
  const size_t partials = way == WHOLE ? 1
      : pp_cuda_group_norm_partials (s.n, s.c, s.hw, s.groups, nhwc);
  const std::vector<float> laid = nhwc ? channels_last (x, s.n, s.c, s.hw)
      : x;
  const size_t total = x.size ();
  std::vector<Arg> args = { in_place ? inout ("x", laid) : in ("x", laid),
    in ("gamma", gamma), in ("beta", beta), scratch ("partials", partials) };
  const std::string what = strf ("group_norm n=%d c=%d hw=%zu groups=%d "
      "(%s, splits %d, tiles %d, ticket tiles %d, grid tiles %d) "
      "%s%s%s%s%s", s.n, s.c, s.hw, s.groups, s.why, splits,
      pp_cuda_group_norm_tiles (s.n, s.c, s.hw, s.groups),
      pp_cuda_group_norm_ticket_tiles (s.n, s.c, s.hw, s.groups),
      pp_cuda_group_norm_grid_tiles (PP_CUDA_F32, s.n, s.c, s.hw, s.groups),
      way_names[way], in_place ? " in place" : "",
      params ? "" : " no gamma, beta", silu ? " silu" : "",
      shift.empty () ? "" : " shifted");
  const size_t y = in_place ? 0 : 4;
  const size_t at_shift = in_place ? 4 : 5;
  std::vector<float> shifted = x;
  std::vector<double> want;

  /* The vector way takes every multiple of 8 channels (the emulation's
   * buffers lie on 16 bytes), the tiles the rest. */
  const bool vector = way == VECTOR_NHWC && s.c % 8 == 0;
  /* The grid way where each sample has a tile resident, else the ticket
   * kernels. */
  const bool grid = way == GRID_NHWC && s.c % 8 == 0
      && pp_cuda_group_norm_grid_tiles (PP_CUDA_F32, s.n, s.c, s.hw,
      s.groups) > 0;
  const bool ticket = (way == TICKET_NHWC || way == GRID_NHWC)
      && s.c % 8 == 0 && !grid;
  const unsigned long grid_runs = emu_kernel_runs ("group_norm_grid_");
  const unsigned long ticket_stats_runs = emu_kernel_runs
      ("group_norm_ticket_stats");
  const unsigned long ticket_apply_runs = emu_kernel_runs
      ("group_norm_ticket_apply");
  const unsigned long ticket_runs = emu_kernel_runs ("group_norm_ticket_");
  const unsigned long vector_runs = emu_kernel_runs ("group_norm_vec_");
  const unsigned long combine_runs = emu_kernel_runs
      ("group_norm_nhwc_combine");

  if (!in_place)
    args.push_back (out ("y", total));
  if (!shift.empty ())
    args.push_back (in ("shift", shift));
  if (way != GRID_NHWC)
    memset (ticket_counts, 0, sizeof ticket_counts);
  const std::vector<unsigned> counts_before (ticket_counts, ticket_counts
      + G_N_ELEMENTS (ticket_counts));
  auto r = run_typed (what, args, [&] (const Run &b) {
        return pp_cuda_group_norm (b.p (0),
            shift.empty () ? NULL : b.p (at_shift),
            shift.empty () ? PP_CUDA_F32 : b.t (at_shift), b.t (0), s.n, s.c,
            s.hw,
            s.groups, EPS, params ? b.p (1) : NULL, b.t (1),
            params ? b.p (2) : NULL, b.t (2), silu, layout,
            way == WHOLE ? NULL : b.f (3), ticket_counts, b.p (y),
            NULL); },
      typings);
  /* The kernels' float32 sums, normalised in float64. */
  for (size_t i = 0; i < total && !shift.empty (); i++)
    shifted[i] = x[i] + shift[i / (s.c * s.hw) * s.c + i / s.hw % s.c];
  want = group_norm_reference (shifted, s.n, s.c, s.hw, s.groups,
      params ? gamma.data () : NULL, params ? beta.data () : NULL, silu);
  if (nhwc)
    want = channels_last (want, s.n, s.c, s.hw);
  if (r)
    expect_near (what, args, *r, y, want, abs, rel);
  if ((emu_kernel_runs ("group_norm_vec_") > vector_runs) != vector)
    failf ("%s: the vector kernels %s", what.c_str (), vector ? "did not run"
        : "ran");
  /* The ticket way: its stats and apply kernels, no combine kernel, and
   * every count back at 0. */
  if (ticket && (emu_kernel_runs ("group_norm_ticket_stats")
          == ticket_stats_runs
          || emu_kernel_runs ("group_norm_ticket_apply") == ticket_apply_runs
          || emu_kernel_runs ("group_norm_nhwc_combine") != combine_runs))
    failf ("%s: not the ticket kernels alone", what.c_str ());
  if (!ticket && emu_kernel_runs ("group_norm_ticket_") != ticket_runs)
    failf ("%s: the ticket kernels ran", what.c_str ());
  /* The grid way: its one kernel alone; each sample's generation moved
   * on once a launch. */
  if (grid && (emu_kernel_runs ("group_norm_grid_") == grid_runs
          || emu_kernel_runs ("group_norm_nhwc_combine") != combine_runs))
    failf ("%s: not the grid kernel alone", what.c_str ());
  if (!grid && emu_kernel_runs ("group_norm_grid_") != grid_runs)
    failf ("%s: the grid kernel ran", what.c_str ());
  for (size_t i = 0; i < G_N_ELEMENTS (ticket_counts); i++) {
    const bool generation = grid && i % 2 == 1 && i < 2 * (size_t) s.n;
    const unsigned moved = generation ? (unsigned) (emu_kernel_runs
        ("group_norm_grid_") - grid_runs) : 0;

    if (ticket_counts[i] != counts_before[i] + moved)
      failf ("%s: count %zu is %u, where it was %u before %u launches",
          what.c_str (), i, ticket_counts[i], counts_before[i], moved);
  }
  return r;
}

/* A group norm case's values: x, gamma, beta and a shift [n, c]. */
struct GroupNormValues
{
  std::vector<float> x, gamma, beta, shift;
};

static GroupNormValues
group_norm_values (const GroupNormShape &s)
{
  return { exact_values ((size_t) s.n * s.c * s.hw, -3, 5),
    exact_values (s.c, 0.5f, 1.5f), exact_values (s.c, -0.5f, 0.5f),
    exact_values ((size_t) s.n * s.c, -1, 1) };
}

static void
test_group_norm (void)
{
  for (size_t k = 0; k < G_N_ELEMENTS (group_norm_shapes); k++) {
    const GroupNormShape &s = group_norm_shapes[k];
    const GroupNormValues v = group_norm_values (s);
    const std::vector<float> &x = v.x, &gamma = v.gamma, &beta = v.beta,
        &shift = v.shift;

    for (Way way : { SPLIT, SPLIT_NHWC, VECTOR_NHWC, WHOLE, TICKET_NHWC,
            GRID_NHWC }) {
      /* x, gamma, beta, partials, y. */
      group_norm_case (s, way, false, true, k % 2 == 0, x, gamma, beta, {},
          { { F16, F32, BF16, F32, F16 }, { BF16, F16, F16, F32, BF16 } },
          NORM_ABS, NORM_REL);
      /* x (and y), gamma, beta, partials. */
      group_norm_case (s, way, true, k < 2, k % 2 == 1, x, gamma, beta, {},
          { { F16, BF16, F32, F32 } }, NORM_ABS, NORM_REL);
      /* x, gamma, beta, partials, y, shift: channels last the values are
       * shifted as they are loaded, whatever x's type; channels first
       * the sum goes through y, whose type rounds it (the op hands those
       * kernels float32).  The shift is read in its own type (a 16-bit
       * one is a 16-bit projection's output). */
      group_norm_case (s, way, false, true, k % 2 == 1, x, gamma, beta,
          shift, nhwc_way (way)
          ? std::vector<Types> { { F16, F32, BF16, F32, F16, F32 },
            { BF16, F16, F16, F32, BF16, F16 },
            { F16, F32, F32, F32, F16, BF16 } }
          : std::vector<Types> { { F32, F32, F32, F32, F32, F16 } },
          NORM_ABS, NORM_REL);
      group_norm_case (s, way, true, true, k % 2 == 0, x, gamma, beta,
          shift, nhwc_way (way)
          ? std::vector<Types> { { F16, BF16, F32, F32, F32 },
            { BF16, F32, F32, F32, BF16 } }
          : std::vector<Types> { { F32, F32, F32, F32, BF16 } },
          NORM_ABS, NORM_REL);
    }
  }
  /* The channels-last kernels with tiles of other sizes
   * (PPDIFFUSE_CUDA_GROUP_NORM_TILE): more tiles, and fewer (the widest
   * shapes one tile a sample), shifted, in 16 bits. */
  for (int tile : { 512, 32768 }) {
    pp_cuda_set_group_norm_tile (tile);
    for (const GroupNormShape &s : group_norm_shapes) {
      const GroupNormValues v = group_norm_values (s);

      for (Way way : { SPLIT_NHWC, VECTOR_NHWC, TICKET_NHWC, GRID_NHWC })
        group_norm_case (s, way, false, true, true, v.x, v.gamma, v.beta,
            v.shift, { { F16, F32, BF16, F32, F16, F32 } }, NORM_ABS,
            NORM_REL);
    }
  }
  pp_cuda_set_group_norm_tile (0);
  {
    /* Channels last needs the split kernels. */
    float x[8] = { 0 };

    if (pp_cuda_group_norm (x, NULL, PP_CUDA_F32, PP_CUDA_F32, 1, 2, 4, 1,
            EPS, NULL,
            PP_CUDA_F32, NULL, PP_CUDA_F32, 0, 1, NULL, NULL, x, NULL)
        != cudaErrorInvalidValue)
      failf ("group_norm: channels last without partials is not refused");
    /* Nor past the channels-last kernels' reach: more channels than a
     * block's threads take, more groups than a block holds. */
    if (pp_cuda_group_norm_tiles (1, 3073, 4, 1) != 0
        || pp_cuda_group_norm_tiles (1, 2050, 4, 1025) != 0
        || pp_cuda_group_norm_partials (1, 3073, 4, 1, 1) != 0
        || pp_cuda_group_norm (x, NULL, PP_CUDA_F32, PP_CUDA_F32, 1, 3073,
            4, 1, EPS,
            NULL, PP_CUDA_F32, NULL, PP_CUDA_F32, 0, 1, x, NULL, x, NULL)
        != cudaErrorInvalidValue)
      failf ("group_norm: 3073 channels or 1025 groups channels last are "
          "not refused");
  }
}

/* The ticket kernels at a UNet's size: 128 tiles (16 a lane, eight
 * lanes a group, as the last block combines them), three chunks of
 * pixels a thread; a 64×64×320 norm in 128 tiles too, an 8×8×1280 one in
 * 16 of a chunk a thread; none for channels not a multiple of 8. */
static void
test_group_norm_ticket (void)
{
  const GroupNormShape s = { 1, 64, 40000, 32,
    "128 tiles of 312 or 313 pixels, 5 a thread" };
  const GroupNormValues v = group_norm_values (s);

  if (pp_cuda_group_norm_ticket_tiles (s.n, s.c, s.hw, s.groups) != 128
      || pp_cuda_group_norm_ticket_tiles (1, 320, 4096, 32) != 128
      || pp_cuda_group_norm_ticket_tiles (1, 1280, 64, 32) != 16
      || pp_cuda_group_norm_ticket_tiles (1, 12, 64, 4) != 0
      || pp_cuda_group_norm_ticket_tiles (1, 3080, 4, 8) != 0)
    failf ("group_norm_ticket_tiles: not 128 tiles for 64 channels of 40000 "
        "pixels or 320 of 4096, 16 for 1280 of 64, none for 12 channels or "
        "past 3072");
  group_norm_case (s, TICKET_NHWC, false, true, true, v.x, v.gamma, v.beta,
      v.shift, { { BF16, F32, F16, F32, BF16, F16 } }, NORM_ABS, NORM_REL);
  group_norm_case (s, TICKET_NHWC, true, true, false, v.x, v.gamma, v.beta,
      {}, { { F16, F32, F32, F32 } }, NORM_ABS, NORM_REL);
  /* Four samples (a count each); more groups than a block's threads (a
   * lane a group, two and three rounds of them). */
  for (const GroupNormShape &t : { GroupNormShape { 4, 320, 300, 32,
        "four samples, 10 channels a group" }, GroupNormShape { 2, 512, 50,
        512, "512 groups of a channel, 256 threads" }, GroupNormShape { 1,
        3072, 7, 1024, "1024 groups of 3 channels, 384 threads" } }) {
    const GroupNormValues w = group_norm_values (t);

    group_norm_case (t, TICKET_NHWC, false, true, true, w.x, w.gamma,
        w.beta, w.shift, { { F16, F32, F16, F32, F16, F16 } }, NORM_ABS,
        NORM_REL);
  }
}

/* The grid kernel: its tiles (the ticket statistics', at most the
 * emulated device's 4 SMs' resident blocks shared among the samples), the
 * ticket kernels' bytes where its tiles are theirs, many chunks of pixels
 * a thread where they are fewer, and the ticket kernels where a sample
 * would not have a tile resident. */
static void
test_group_norm_grid (void)
{
  /* 240 threads for 320 channels: 8 blocks an SM, 32 in all. */
  if (pp_cuda_group_norm_grid_tiles (PP_CUDA_F32, 1, 320, 4096, 32) != 32
      || pp_cuda_group_norm_grid_tiles (PP_CUDA_F16, 4, 320, 4096, 32) != 8
      || pp_cuda_group_norm_grid_tiles (PP_CUDA_BF16, 1, 1280, 64, 32) != 16
      || pp_cuda_group_norm_grid_tiles (PP_CUDA_F32, 33, 320, 16, 32) != 0
      || pp_cuda_group_norm_grid_tiles (PP_CUDA_F32, 1, 12, 64, 4) != 0)
    failf ("group_norm_grid_tiles: not 32 tiles for 320 channels of 4096 "
        "pixels, 8 a sample of 4, the ticket way's 16 for 1280 channels of "
        "64 pixels, none for 33 samples of 320 channels or 12 channels");
  /* The ticket way's tiles: the same bytes. */
  for (const GroupNormShape &t : { GroupNormShape { 1, 1280, 64, 32,
        "an 8x8 norm of 1280 channels, 16 tiles either way" },
        GroupNormShape { 2, 512, 50, 512, "512 groups of a channel, 4 tiles "
        "either way" } }) {
    const GroupNormValues w = group_norm_values (t);
    const size_t y = 4;

    if (pp_cuda_group_norm_grid_tiles (PP_CUDA_F32, t.n, t.c, t.hw,
            t.groups) != pp_cuda_group_norm_ticket_tiles (t.n, t.c, t.hw,
            t.groups))
      failf ("group_norm_grid_tiles: %s: not the ticket way's tiles", t.why);
    for (bool silu : { false, true }) {
      const std::unique_ptr<Run> a = group_norm_case (t, TICKET_NHWC, false,
          true, silu, w.x, w.gamma, w.beta, w.shift,
          { { F16, F32, F16, F32, F16, F16 } }, NORM_ABS, NORM_REL);
      const std::unique_ptr<Run> b = group_norm_case (t, GRID_NHWC, false,
          true, silu, w.x, w.gamma, w.beta, w.shift,
          { { BF16, F32, F16, F32, BF16, F16 } }, NORM_ABS, NORM_REL);

      if (a && b && first_difference ((*a)[y], (*b)[y]) >= 0)
        failf ("group_norm %s: the grid way's y[%td] is not the ticket "
            "way's", t.why, first_difference ((*a)[y], (*b)[y]));
    }
  }
  /* Fewer tiles than the ticket way's: 32 tiles of 1250 pixels, 39 or 40
   * a thread; four samples of 8 tiles; in place and shifted. */
  for (const GroupNormShape &t : { GroupNormShape { 1, 64, 40000, 32,
        "32 tiles of 1250 pixels, 10 chunks a thread" }, GroupNormShape { 4,
        320, 300, 32, "four samples, 8 tiles each" }, GroupNormShape { 1,
        3072, 7, 1024, "1024 groups of 3 channels, 384 threads" } }) {
    const GroupNormValues w = group_norm_values (t);

    group_norm_case (t, GRID_NHWC, false, true, true, w.x, w.gamma, w.beta,
        w.shift, { { F16, F32, BF16, F32, F16, F16 } }, NORM_ABS, NORM_REL);
    group_norm_case (t, GRID_NHWC, true, true, false, w.x, w.gamma, w.beta,
        {}, { { BF16, F32, F32, F32 } }, NORM_ABS, NORM_REL);
  }
  /* 33 samples: the ticket kernels (group_norm_case checks which ran). */
  {
    const GroupNormShape t = { 33, 320, 16, 32, "33 samples, past the "
      "device's resident blocks" };
    const GroupNormValues w = group_norm_values (t);

    group_norm_case (t, GRID_NHWC, false, true, true, w.x, w.gamma, w.beta,
        w.shift, { { F16, F32, F16, F32, F16, F16 } }, NORM_ABS, NORM_REL);
  }
}

/* Values ±1 about ±1e4 (sample by sample): the normalised values hold
 * float32's precision (the mean as hi + lo). */
static void
test_group_norm_offset (void)
{
  const GroupNormShape s = group_norm_shapes[0];
  const std::vector<float> ones (s.c, 1.0f), zeros (s.c, 0.0f);
  std::vector<float> x ((size_t) s.n * s.c * s.hw);

  for (size_t i = 0; i < x.size (); i++)
    x[i] = (float) (g_rand_double_range (rng, -1, 1)
        + (i / ((size_t) s.c * s.hw) % 2 ? -1e4 : 1e4));
  for (Way way : { SPLIT, SPLIT_NHWC, VECTOR_NHWC, WHOLE, TICKET_NHWC,
          GRID_NHWC })
    group_norm_case (s, way, false, false, false, x, ones, zeros, {}, {},
        1e-6, 0);
}

static const char *const layer_norm_ways[] = { "", " by block",
  " by vectors", " by octets", " by width"
};

static void
layer_norm_case (size_t rows, int dim, bool in_place, bool params,
    int way, const std::vector<float> &x,
    const std::vector<Types> &typings, double abs, double rel)
{
  const std::vector<float> gamma = exact_values (dim, 0.5f, 1.5f);
  const std::vector<float> beta = exact_values (dim, -0.5f, 0.5f);
  std::vector<Arg> args = { in_place ? inout ("x", x) : in ("x", x),
    in ("gamma", gamma), in ("beta", beta) };
  const std::string what = strf ("layer_norm rows=%zu dim=%d%s%s%s", rows,
      dim, layer_norm_ways[way], in_place ? " in place" : "",
      params ? "" : " no gamma, beta");
  const size_t y = in_place ? 0 : 3;
  std::vector<double> want (rows * dim);
  /* By vectors: rows of a multiple of 8 values up to 1536. */
  const bool wide = way == PP_CUDA_LAYER_NORM_WIDTH
      && dim >= PP_CUDA_LAYER_NORM_OCTET_FROM;
  const bool vector = (way == PP_CUDA_LAYER_NORM_VECTOR
      || (way == PP_CUDA_LAYER_NORM_WIDTH && !wide)) && dim % 8 == 0
      && dim <= 1536;
  /* By octets: rows of a multiple of 8 values up to 4096; by width, those
   * of 1024 values or more. */
  const bool octet = (way == PP_CUDA_LAYER_NORM_OCTET || wide)
      && dim % 8 == 0 && dim <= 4096;
  const unsigned long vector_runs = emu_kernel_runs ("layer_norm_vec_");
  const unsigned long octet_runs = emu_kernel_runs ("layer_norm_octet_");

  if (!in_place)
    args.push_back (out ("y", rows * dim));
  auto r = run_typed (what, args, [&] (const Run &b) {
        return pp_cuda_layer_norm (b.p (0), b.t (0), rows, dim, EPS,
            params ? b.p (1) : NULL, b.t (1), params ? b.p (2) : NULL,
            b.t (2), b.p (y), way, NULL); }, typings);
  for (size_t row = 0; row < rows; row++) {
    double mean, rstd;

    pp_ref_moments (x.data () + row * dim, dim, EPS, &mean, &rstd);
    for (int i = 0; i < dim; i++)
      want[row * dim + i] = (x[row * dim + i] - mean) * rstd
          * (params ? gamma[i] : 1.0) + (params ? beta[i] : 0.0);
  }
  if (r)
    expect_near (what, args, *r, y, want, abs, rel);
  if ((emu_kernel_runs ("layer_norm_vec_") > vector_runs) != vector)
    failf ("%s: the vector kernel %s", what.c_str (), vector ? "did not run"
        : "ran");
  if ((emu_kernel_runs ("layer_norm_octet_") > octet_runs) != octet)
    failf ("%s: the octet kernel %s", what.c_str (), octet ? "did not run"
        : "ran");
}

static void
test_layer_norm (void)
{
  const size_t rows = 5;

  /* A warp a row with 16 and 48 values a lane, and a block a row past
   * 1536 (or when asked: PPDIFFUSE_CUDA_LAYER_NORM=block); by vectors
   * (PPDIFFUSE_CUDA_LAYER_NORM=vector) 2, 3, 5 and 6 groups of eight a
   * lane for the multiples of 8 (320, 640, 1000 and 1280, 1536), as the
   * warp kernel elsewhere. */
  for (int way : { PP_CUDA_LAYER_NORM_WARP, PP_CUDA_LAYER_NORM_BLOCK,
          PP_CUDA_LAYER_NORM_VECTOR, PP_CUDA_LAYER_NORM_OCTET,
          PP_CUDA_LAYER_NORM_WIDTH })
    for (int dim : { 1, 8, 31, 77, 320, 640, 1000, 1280, 1281, 1536, 1600,
            4096, 4104 }) {
      const std::vector<float> x = exact_values (rows * dim, -3, 5);

      layer_norm_case (rows, dim, false, true, way, x,
          { { F16, F32, BF16, F16 }, { BF16, BF16, F16, BF16 } }, NORM_ABS,
          NORM_REL);
      layer_norm_case (rows, dim, true, dim % 2 == 0, way, x,
          { { F16, BF16, F32 } }, NORM_ABS, NORM_REL);
    }
  /* By octets, many rows: 12 rows a block of 320 values (84 blocks, the
   * last of 4), 3 of 1280 (26 blocks, the last of 2), 64 of 8. */
  for (const auto &[many, dim] : { std::pair<size_t, int> { 1000, 320 },
          { 77, 1280 }, { 1000, 8 } }) {
    const std::vector<float> x = exact_values (many * dim, -3, 5);

    layer_norm_case (many, dim, false, true, PP_CUDA_LAYER_NORM_OCTET, x,
        { { BF16, F16, F32, BF16 } }, NORM_ABS, NORM_REL);
  }
  {
    /* About 1e4, as test_group_norm_offset. */
    std::vector<float> x = float_values (rows * 1000, -1, 1);

    for (float &v : x)
      v += 1e4f;
    for (int way : { PP_CUDA_LAYER_NORM_WARP, PP_CUDA_LAYER_NORM_BLOCK,
            PP_CUDA_LAYER_NORM_VECTOR, PP_CUDA_LAYER_NORM_OCTET })
      layer_norm_case (rows, 1000, false, false, way, x, {}, 1e-6, 0);
  }
}

static void
test_group_norm_splits (void)
{
  for (const GroupNormShape &s : group_norm_shapes) {
    const int splits = pp_cuda_group_norm_splits (s.n, s.c, s.hw, s.groups);
    const int tiles = pp_cuda_group_norm_tiles (s.n, s.c, s.hw, s.groups);

    if (splits < 1 || splits > PP_CUDA_GROUP_MAX_SPLITS)
      failf ("group_norm_splits (%d, %d, %zu, %d) = %d", s.n, s.c, s.hw,
          s.groups, splits);
    /* Each tile a pixel at least. */
    if (tiles < 1 || (size_t) tiles > s.hw)
      failf ("group_norm_tiles (%d, %d, %zu, %d) = %d", s.n, s.c, s.hw,
          s.groups, tiles);
  }
  /* A UNet's first norm: 512 tiles of 8 pixels, 512 blocks a sample. */
  if (pp_cuda_group_norm_tiles (1, 320, 4096, 32) != 512)
    failf ("group_norm_tiles: 320 channels of 4096 pixels are not cut "
        "512 ways");
  /* Tiles of at least 8192 values (PPDIFFUSE_CUDA_GROUP_NORM_TILE): 160
   * of 25.6 pixels; then the default again. */
  pp_cuda_set_group_norm_tile (8192);
  if (pp_cuda_group_norm_tiles (1, 320, 4096, 32) != 160)
    failf ("group_norm_tiles: tiles of 8192 values cut 320 channels of "
        "4096 pixels %d ways, not 160",
        pp_cuda_group_norm_tiles (1, 320, 4096, 32));
  pp_cuda_set_group_norm_tile (0);
  if (pp_cuda_group_norm_tiles (1, 320, 4096, 32) != 512)
    failf ("group_norm_tiles: the default tile not taken back");
  /* Past gridDim.y, or a group of 2^32 values: none (the whole kernel). */
  if (pp_cuda_group_norm_splits (65536, 32, 1, 1) != 0
      || pp_cuda_group_norm_splits (1, 1, (size_t) 1 << 32, 1) != 0)
    failf ("group_norm_splits: a shape past the split kernels' reach "
        "gets splits");
  if (pp_cuda_group_norm_splits (1, 4, 16411, 1) != PP_CUDA_GROUP_MAX_SPLITS)
    failf ("group_norm_splits: a group of 65644 values is not cut %d ways",
        PP_CUDA_GROUP_MAX_SPLITS);
}

/* ---- Layout -------------------------------------------------------- */

static void
test_upsample (void)
{
  /* Channels of an odd count, and of whole vectors (channels last: the
   * vector path). */
  for (int c : { 3, 16 })
  for (int f : { 2, 3 }) {
    const int n = 2, h = 5, w = 7;
    const std::vector<float> x = exact_values ((size_t) n * c * h * w, -2, 2);
    const size_t total = (size_t) n * c * h * f * w * f;
    std::vector<float> want (total);

    pp_cpu_upsample_nearest (x.data (), n, c, h, w, f, want.data ());
    for (int nhwc = 0; nhwc < 2; nhwc++) {
      const std::vector<Arg> args = { in ("x", nhwc ? channels_last (x, n, c,
                  (size_t) h * w) : x), out ("y", total) };
      const std::string what = strf ("upsample_nearest n=%d c=%d h=%d w=%d "
          "factor=%d%s", n, c, h, w, f, nhwc ? " nhwc" : "");
      auto r = run_typed (what, args, [&] (const Run &b) {
            return pp_cuda_upsample_nearest (b.p (0), b.t (0), n, c, h, w, f,
                nhwc, b.p (1), NULL); }, { { F16, F16 }, { BF16, BF16 } });

      if (r)
        expect_bits (what, args, *r, 1, nhwc ? channels_last (want, n, c,
                (size_t) h * f * w * f) : want);
    }
  }
}

static void
test_resize_bilinear (void)
{
  const int c = 3, h = 17, w = 23;

  for (auto size : { std::pair<int, int> (40, 9), { 17, 23 }, { 5, 50 } }) {
    const int ho = size.first, wo = size.second;
    const std::vector<Arg> args = { in ("x", float_values ((size_t) c * h * w,
                -2, 2)), out ("y", (size_t) c * ho * wo) };
    const std::string what = strf ("resize_bilinear c=%d %dx%d to %dx%d",
        c, h, w, ho, wo);
    auto r = run_typed (what, args, [&] (const Run &b) {
          return pp_cuda_resize_bilinear (b.f (0), c, h, w, b.f (1), ho, wo,
              NULL); });
    std::vector<float> want ((size_t) c * ho * wo);

    /* The same formula; a CPU build may fuse its multiply-adds. */
    pp_cpu_resize_bilinear (args[0].values.data (), c, h, w, want.data (),
        ho, wo);
    if (r)
      expect_near (what, args, *r, 1, as_double (want), 4e-7, 0);
  }
}

static void
test_concat (void)
{
  const int n = 2, ca = 3, cb = 4;
  const size_t hw = 37;
  const std::vector<Arg> args = { in ("a", exact_values (n * ca * hw, -2, 2)),
    in ("b", exact_values (n * cb * hw, -2, 2)),
    out ("y", n * (ca + cb) * hw) };
  auto r = run_typed ("concat_channels", args, [&] (const Run &b) {
        return pp_cuda_concat_channels (b.p (0), ca, b.p (1), cb, n, hw,
            b.p (2), b.t (0), NULL); },
      { { F16, F16, F16 }, { BF16, BF16, BF16 } });
  std::vector<float> want (n * (ca + cb) * hw);

  pp_cpu_concat_channels (args[0].values.data (), ca,
      args[1].values.data (), cb, n, hw, want.data ());
  if (r)
    expect_bits ("concat_channels", args, *r, 2, want);
}

static void
test_transpose (void)
{
  const struct
  {
    int n, rows, cols;
  } shapes[] = { { 1, 1, 1 }, { 2, 33, 65 }, { 3, 31, 7 }, { 1, 100, 40 },
    { 4, 40, 9 } };

  for (const auto &s : shapes) {
    const size_t total = (size_t) s.n * s.rows * s.cols;
    const std::vector<float> x = exact_values (total, -3, 3);
    const std::vector<float> bias = exact_values (s.cols, -1, 1);
    std::vector<float> want (total);

    {
      const std::vector<Arg> args = { in ("x", x), out ("y", total) };
      const std::string what = strf ("transpose n=%d rows=%d cols=%d", s.n,
          s.rows, s.cols);
      auto r = run_typed (what, args, [&] (const Run &b) {
            return pp_cuda_transpose (b.f (0), s.n, s.rows, s.cols, b.f (1),
                NULL); });

      pp_cpu_nchw_to_nlc (x.data (), s.n, s.rows, s.cols, want.data ());
      if (r)
        expect_bits (what, args, *r, 1, want);
    }
    {
      const std::vector<Arg> args = { in ("x", x), out ("y", total) };
      const std::string what = strf ("transpose_narrow n=%d rows=%d "
          "cols=%d", s.n, s.rows, s.cols);
      auto r = run_typed (what, args, [&] (const Run &b) {
            return pp_cuda_transpose_narrow (b.p (0), s.n, s.rows, s.cols,
                b.p (1), b.t (0), NULL); },
          { { F16, F16 }, { BF16, BF16 } });

      if (r)
        expect_bits (what, args, *r, 1, want);
    }
    for (int with = 0; with < 4; with++) {
      const int with_bias = with & 1, relu = with >> 1;
      const std::vector<Arg> args = { in ("x", x), in ("bias", bias),
        out ("y", total) };
      const std::string what = strf ("transpose_typed n=%d rows=%d cols=%d"
          "%s%s", s.n, s.rows, s.cols, with_bias ? "" : " no bias",
          relu ? " relu" : "");
      auto r = run_typed (what, args, [&] (const Run &b) {
            return pp_cuda_transpose_typed (b.p (0), b.t (0), s.n, s.rows,
                s.cols, with_bias ? b.p (1) : NULL, b.t (1), relu, b.p (2),
                b.t (2), NULL); },
          { { F16, F32, BF16 }, { BF16, F16, F32 }, { F32, BF16, F16 },
            { F16, F16, F16 } });

      for (int k = 0; k < s.n; k++)
        for (int row = 0; row < s.rows; row++)
          for (int col = 0; col < s.cols; col++) {
            const float v = x[((size_t) k * s.rows + row) * s.cols + col];

            const float vb = with_bias ? v + bias[col] : v;

            want[((size_t) k * s.cols + col) * s.rows + row] = relu
                ? pp_math_relu (vb) : vb;
          }
      if (r)
        expect_bits (what, args, *r, 2, want);
    }
  }
}

/* A 3×3 convolution of an upsampling's four output phases, interleaved:
 * channels first, channels last one value a thread (3 channels) and
 * eight (8, 16). */
static void
test_interleave_phases (void)
{
  const struct
  {
    int n, c, h, w;
  } shapes[] = { { 1, 1, 1, 1 }, { 2, 3, 5, 7 }, { 1, 8, 4, 6 },
    { 2, 16, 3, 3 } };

  for (const auto &s : shapes) {
    const size_t zh = s.h + 1, zw = s.w + 1, zhw = zh * zw;
    const size_t hw = (size_t) 4 * s.h * s.w;
    const size_t n_in = (size_t) s.n * 4 * s.c * zhw;
    const size_t total = (size_t) s.n * s.c * hw;
    const std::vector<float> z = exact_values (n_in, -3, 3);
    std::vector<float> want (total);

    for (int k = 0; k < s.n; k++)
      for (int ch = 0; ch < s.c; ch++)
        for (int oy = 0; oy < 2 * s.h; oy++)
          for (int ox = 0; ox < 2 * s.w; ox++) {
            const int a = oy % 2, b = ox % 2;

            want[(((size_t) k * s.c + ch) * 2 * s.h + oy) * 2 * s.w + ox] =
                z[(((size_t) k * 4 + 2 * a + b) * s.c + ch) * zhw
                + (size_t) (oy / 2 + a) * zw + ox / 2 + b];
          }
    for (int nhwc = 0; nhwc < 2; nhwc++) {
      const std::vector<Arg> args = { in ("z", nhwc ? channels_last (z, s.n,
              4 * s.c, zhw) : z), out ("y", total) };
      const std::string what = strf ("interleave_phases n=%d c=%d %dx%d%s",
          s.n, s.c, s.h, s.w, nhwc ? " channels last" : "");
      auto r = run_typed (what, args, [&] (const Run &b) {
            return pp_cuda_interleave_phases (b.p (0), b.t (0), s.n, s.c,
                s.h, s.w, nhwc, b.p (1), NULL); },
          { { F16, F16 }, { BF16, BF16 } });

      if (r)
        expect_bits (what, args, *r, 1, nhwc ? channels_last (want, s.n,
                s.c, hw) : want);
    }
  }
}

/* A convolution's channels padded with zeros, channels last, and taken
 * back: from and into both layouts, past the last channel and (a
 * filter's output channels) past the last sample. */
/* A convolution's patches as rows, channels last: 3×3 with and without
 * padding, stride 2 (a downsampler's, odd sizes), 1×3, two samples; the
 * 16-bit values copied as they are, zeros past the edges. */
static void
test_im2col (void)
{
  const struct
  {
    int n, h, w, c, kh, kw, stride, pad;
  } shapes[] = { { 1, 5, 6, 8, 3, 3, 1, 1 }, { 2, 4, 4, 16, 3, 3, 1, 0 },
    { 1, 7, 5, 8, 3, 3, 2, 1 }, { 2, 3, 6, 24, 1, 3, 1, 1 },
    { 1, 2, 2, 8, 1, 1, 1, 0 } };

  for (const auto &s : shapes) {
    const int ho = pp_conv2d_out_size (s.h, s.kh, s.stride, s.pad);
    const int wo = pp_conv2d_out_size (s.w, s.kw, s.stride, s.pad);
    const size_t cols = (size_t) s.kh * s.kw * s.c;
    const size_t rows = (size_t) s.n * ho * wo;
    const std::vector<float> x = exact_values ((size_t) s.n * s.h * s.w
        * s.c, -3, 3);
    const std::vector<Arg> args = { in ("x", x), out ("a", rows * cols) };
    const std::string what = strf ("im2col_nhwc n=%d %dx%d c=%d kernel "
        "%dx%d stride %d pad %d", s.n, s.h, s.w, s.c, s.kh, s.kw, s.stride,
        s.pad);
    std::vector<float> want (rows * cols, 0.0f);

    for (size_t r = 0; r < rows; r++)
      for (size_t col = 0; col < cols; col++) {
        const int b = (int) (r / ((size_t) ho * wo));
        const int oy = (int) (r / wo % ho), ox = (int) (r % wo);
        const int tap = (int) (col / s.c), ch = (int) (col % s.c);
        const int iy = oy * s.stride - s.pad + tap / s.kw;
        const int ix = ox * s.stride - s.pad + tap % s.kw;

        if (iy >= 0 && iy < s.h && ix >= 0 && ix < s.w)
          want[r * cols + col] = x[(((size_t) b * s.h + iy) * s.w + ix) * s.c
              + ch];
      }
    for (const Types &types : { Types { F16, F16 }, Types { BF16, BF16 } }) {
      const std::unique_ptr<Run> r = run_checked (what, args, types,
          [&] (const Run &b) {
            return pp_cuda_im2col_nhwc (b.p (0), s.n, s.h, s.w, s.c, s.kh,
                s.kw, s.stride, s.pad, ho, wo, b.p (1), NULL); });

      if (r)
        expect_bits (what, args, *r, 1, want);
    }
  }
  /* Refused: channels not whole vectors, x off 16 bytes. */
  {
    Mem x (F16, 64), a (F16, 1024);

    if (pp_cuda_im2col_nhwc (x.data (), 1, 2, 2, 12, 3, 3, 1, 1, 2, 2,
            a.data (), NULL) != cudaErrorInvalidValue
        || pp_cuda_im2col_nhwc ((const char *) x.data () + 2, 1, 2, 2, 8, 3,
            3, 1, 1, 2, 2, a.data (), NULL) != cudaErrorInvalidValue)
      failf ("im2col_nhwc: 12 channels or an x off 16 bytes not refused");
  }
}

static void
test_pad_channels (void)
{
  const struct
  {
    int n, c;
    size_t hw;
    int n_pad, c_pad;
  } shapes[] = { { 1, 3, 37, 1, 8 }, { 2, 4, 5, 2, 8 }, { 2, 9, 6, 2, 16 },
    { 3, 5, 9, 8, 8 }, { 2, 8, 7, 2, 8 }, { 1, 1, 1, 1, 8 } };

  for (const auto &s : shapes) {
    const size_t total = (size_t) s.n * s.c * s.hw;
    const size_t padded = (size_t) s.n_pad * s.hw * s.c_pad;
    const std::vector<float> x = exact_values (total, -3, 3);

    for (int nhwc = 0; nhwc < 2; nhwc++) {
      const std::vector<float> xl = nhwc ? channels_last (x, s.n, s.c, s.hw)
          : x;
      const std::vector<Arg> args = { in ("x", xl), out ("y", padded) };
      const std::string what = strf ("pad_channels n=%d c=%d hw=%zu → "
          "%d×%d%s", s.n, s.c, s.hw, s.n_pad, s.c_pad,
          nhwc ? " from channels last" : "");
      std::vector<float> want (padded, 0.0f);
      auto r = run_typed (what, args, [&] (const Run &b) {
            return pp_cuda_pad_channels (b.p (0), b.t (0), nhwc, s.n, s.c,
                s.hw, b.p (1), b.t (1), s.n_pad, s.c_pad, NULL); },
          { { F32, F16 }, { F16, F16 }, { BF16, BF16 }, { F16, BF16 } });

      for (int k = 0; k < s.n; k++)
        for (int ch = 0; ch < s.c; ch++)
          for (size_t p = 0; p < s.hw; p++)
            want[((size_t) k * s.hw + p) * s.c_pad + ch]
                = x[((size_t) k * s.c + ch) * s.hw + p];
      if (r)
        expect_bits (what, args, *r, 1, want);
    }
  }
  /* Refused: channels not padded to whole vectors, fewer than given. */
  {
    Mem x (F16, 64), y (F16, 64);

    g_assert_cmpint (pp_cuda_pad_channels (x.data (), PP_CUDA_F16, 0, 1, 3,
            4, y.data (), PP_CUDA_F16, 1, 12, NULL), ==,
        cudaErrorInvalidValue);
    g_assert_cmpint (pp_cuda_pad_channels (x.data (), PP_CUDA_F16, 0, 1, 9,
            4, y.data (), PP_CUDA_F16, 1, 8, NULL), ==,
        cudaErrorInvalidValue);
    g_assert_cmpint (pp_cuda_unpad_channels (x.data (), PP_CUDA_F16, 1, 4,
            4, y.data (), PP_CUDA_F16, 0, 3, NULL, PP_CUDA_F16, NULL, 0,
            NULL), ==, cudaErrorInvalidValue);
  }
}

static void
test_unpad_channels (void)
{
  const struct
  {
    int n, c;
    size_t hw;
    int c_pad;
  } shapes[] = { { 1, 3, 37, 8 }, { 2, 4, 5, 8 }, { 2, 9, 6, 16 },
    { 2, 8, 7, 8 } };

  for (const auto &s : shapes) {
    const size_t total = (size_t) s.n * s.c * s.hw;
    const size_t padded = (size_t) s.n * s.hw * s.c_pad;
    std::vector<float> x = exact_values (padded, -2, 2);
    const std::vector<float> bias = exact_values (s.c, -1, 1);
    const std::vector<float> res = exact_values (total, -2, 2);

    /* -0 stays -0 without a bias, and through the relu. */
    for (size_t i = 0; i < padded; i += 5)
      x[i] = -0.0f;
    for (int with = 0; with < 16; with++) {
      const int with_bias = with & 1, relu = (with >> 1) & 1;
      const int with_res = (with >> 2) & 1, nhwc = with >> 3;
      const std::vector<float> rl = nhwc ? channels_last (res, s.n, s.c, s.hw)
          : res;
      const std::vector<Arg> args = { in ("x", x), out ("y", total),
        in ("bias", bias), in ("res", rl) };
      const std::string what = strf ("unpad_channels n=%d %d of %d channels "
          "hw=%zu%s%s%s%s", s.n, s.c, s.c_pad, s.hw, nhwc ? " channels last"
          : "", with_bias ? "" : " no bias", with_res ? " residual" : "",
          relu ? " relu" : "");
      std::vector<float> want (total);
      auto r = run_typed (what, args, [&] (const Run &b) {
            return pp_cuda_unpad_channels (b.p (0), b.t (0), s.n, s.c_pad,
                s.hw, b.p (1), b.t (1), nhwc, s.c, with_bias ? b.p (2)
                : NULL, b.t (2), with_res ? b.p (3) : NULL, relu, NULL); },
          { { F16, F16, F16, F16 }, { BF16, F32, F16, F32 },
            { F16, BF16, BF16, BF16 } });

      for (int k = 0; k < s.n; k++)
        for (int ch = 0; ch < s.c; ch++)
          for (size_t p = 0; p < s.hw; p++) {
            const size_t i = nhwc ? ((size_t) k * s.hw + p) * s.c + ch
                : ((size_t) k * s.c + ch) * s.hw + p;
            const float v = x[((size_t) k * s.hw + p) * s.c_pad + ch];
            float sum = with_bias ? v + bias[ch] : v;

            if (with_res)
              sum += rl[i];
            want[i] = relu ? pp_math_relu (sum) : sum;
          }
      if (r)
        expect_bits (what, args, *r, 1, want);
    }
    if (s.c != s.c_pad)
      continue;
    /* In place: y is x, channels last, of one type. */
    const std::vector<float> rl = channels_last (res, s.n, s.c, s.hw);
    const std::vector<Arg> args = { inout ("x", x), in ("bias", bias),
      in ("res", rl) };
    auto r = run_typed ("unpad_channels in place", args, [&] (const Run &b) {
          return pp_cuda_unpad_channels (b.p (0), b.t (0), s.n, s.c_pad,
              s.hw, b.p (0), b.t (0), 1, s.c, b.p (1), b.t (1), b.p (2), 1,
              NULL); },
        { { F16, BF16, F16 }, { BF16, F32, BF16 } });
    std::vector<float> want (padded);

    for (size_t i = 0; i < padded; i++)
      want[i] = pp_math_relu (x[i] + bias[i % s.c] + rl[i]);
    if (r)
      expect_bits ("unpad_channels in place", args, *r, 0, want);
  }
}

static void
test_add_channel (void)
{
  const int n = 2, c = 5;
  const size_t hw = 41;
  const std::vector<Arg> args = { inout ("x", exact_values (n * c * hw, -2,
              2)), in ("v", exact_values (n * c, -1, 1)) };
  auto r = run_typed ("add_channel", args, [&] (const Run &b) {
        return pp_cuda_add_channel (b.p (0), b.t (0), n, c, hw, b.p (1),
            b.t (1), NULL); },
      { { F16, F32 }, { BF16, BF16 }, { F32, F16 } });
  std::vector<float> want = args[0].values;

  pp_cpu_add_channel (want.data (), n, c, hw, args[1].values.data ());
  if (r)
    expect_bits ("add_channel", args, *r, 0, want);
}

/* ---- Softmax ------------------------------------------------------- */

/* The keys row @r sees (all, or causally those up to its query). */
static int
softmax_keys (int cols, bool causal, int period, int row0, size_t r)
{
  return causal ? MIN (cols, row0 + (int) (r % period) + 1) : cols;
}

static void
softmax_case (size_t rows, int cols, bool causal, int period, int row0)
{
  const std::vector<float> s = float_values (rows * cols, -20, 20);
  const std::string what = strf ("softmax rows=%zu cols=%d%s", rows, cols,
      causal ? strf (" causal period=%d row0=%d", period, row0).c_str ()
      : "");
  const std::vector<Arg> args = { inout ("s", s) };
  auto r = run_typed (what, args, [&] (const Run &b) {
        return causal ? pp_cuda_softmax_rows_causal (b.f (0), rows, cols,
            period, row0, NULL) : pp_cuda_softmax_rows (b.f (0), rows, cols,
            NULL); });
  std::vector<double> want (rows * cols);
  /* The exponentials and the narrowed probabilities: bit for bit. */
  std::vector<float> exps = s;

  for (size_t row = 0; row < rows; row++) {
    const int keys = softmax_keys (cols, causal, period, row0, row);
    const float *x = s.data () + row * cols;
    float m = -INFINITY;
    double sum = 0.0;

    for (int j = 0; j < keys; j++)
      m = fmaxf (m, x[j]);
    for (int j = 0; j < keys; j++) {
      sum += exp ((double) x[j] - m);
      exps[row * cols + j] = pp_math_exp (x[j] - m);
    }
    for (int j = 0; j < cols; j++)
      want[row * cols + j] = j < keys ? exp ((double) x[j] - m) / sum : 0.0;
  }
  if (!r)
    return;
  /* pp_math_exp within 1e-7 and a float sum of the row. */
  expect_near (what, args, *r, 0, want, 1e-9, 2e-6);
  for (Storage p : { F16, BF16 }) {
    const std::vector<Arg> nargs = { inout ("s", s), out ("p", rows * cols) };
    const std::string nwhat = what + " narrow";
    auto nr = run_checked (nwhat, nargs, { F32, p }, [&] (const Run &b) {
          return pp_cuda_softmax_rows_narrow (b.f (0), rows, cols, causal,
              period, row0, b.p (1), b.t (1), NULL); });
    std::vector<float> probs (rows * cols);

    for (size_t j = 0; j < rows * cols; j++)
      probs[j] = (*r)[0].get (j);
    if (nr) {
      expect_bits (nwhat, nargs, *nr, 0, exps);
      expect_bits (nwhat, nargs, *nr, 1, probs);
    }
  }
}

static void
test_softmax (void)
{
  for (int cols : { 1, 77, 255, 257, 1000 }) {
    softmax_case (5, cols, false, 1, 0);
    softmax_case (5, cols, true, 3, 0);
    softmax_case (5, cols, true, 2, 4);
  }
  {
    float s = 0.0f, p;

    if (pp_cuda_softmax_rows_narrow (&s, 1, 1, 0, 1, 0, &p, PP_CUDA_F32,
            NULL) != cudaErrorInvalidValue)
      failf ("softmax_rows_narrow: float32 probabilities are not refused");
  }
}

/* ---- Conversions --------------------------------------------------- */

static void
test_convert (void)
{
  const size_t n = PAST_GRID;
  std::vector<uint32_t> bits (n), half (1 << 16);
  std::vector<float> from_bits (n), from_half (half.size ());

  /* Random floats of every exponent (NaNs, infinities, subnormals), and
   * every 16-bit pattern. */
  for (size_t i = 0; i < n; i++) {
    bits[i] = g_rand_int (rng);
    from_bits[i] = pp_dtype_f32_from_bits (bits[i]);
  }
  for (size_t i = 0; i < half.size (); i++)
    half[i] = (uint32_t) i;
  for (Storage y : { F16, BF16 }) {
    const std::string what = strf ("f32_to_%s n=%zu", storage_names[y], n);
    const std::vector<Arg> args = { in_bits ("x", bits), out ("y", n) };
    auto r = run_checked (what, args, { F32, y }, [&] (const Run &b) {
          return y == F16 ? pp_cuda_f32_to_f16 (b.f (0),
              (uint16_t *) b.p (1), n, NULL) : pp_cuda_f32_to_bf16 (b.f (0),
              (uint16_t *) b.p (1), n, NULL); });

    if (r)
      expect_bits (what, args, *r, 1, from_bits);
  }
  for (Storage x16 : { F16, BF16 }) {
    const std::string what = strf ("%s_to_f32", storage_names[x16]);
    const std::vector<Arg> args = { in_bits ("x", half),
      out ("y", half.size ()) };
    auto r = run_checked (what, args, { x16, F32 }, [&] (const Run &b) {
          return x16 == F16 ? pp_cuda_f16_to_f32 ((uint16_t *) b.p (0),
              b.f (1), half.size (), NULL)
              : pp_cuda_bf16_to_f32 ((uint16_t *) b.p (0), b.f (1),
              half.size (), NULL); });

    for (size_t i = 0; i < half.size (); i++)
      from_half[i] = widened (x16, half[i]);
    if (r)
      expect_bits (what, args, *r, 1, from_half);
  }
}

/* ---- The emulation itself ------------------------------------------ */

/* A read of shared memory that no barrier orders differs between the
 * thread orders; with the barrier, both give the sums. */
static void
test_emu_missing_barrier (void)
{
  const int blocks = 3, threads = 96;
  const std::vector<Arg> args = { in ("x", exact_values (blocks * threads,
              -1, 1)), out ("y", blocks) };
  std::vector<double> sums (blocks, 0.0);

  for (int i = 0; i < blocks * threads; i++)
    sums[i / threads] += args[0].values[i];
  for (int barrier = 0; barrier < 2; barrier++) {
    std::unique_ptr<Run> runs[2];
    bool differ;

    if (!run_both_orders ("block sum", args, { F32, F32 },
            [&] (const Run &b) {
              return emu_faults_block_sum (b.f (0), blocks, threads, barrier,
                  b.f (1)); }, runs))
      continue;
    differ = first_difference ((*runs[0])[1], (*runs[1])[1]) >= 0;
    if (barrier && differ)
      failf ("a block sum with its barrier differs between the orders");
    else if (barrier)
      expect_near ("block sum", args, *runs[0], 1, sums, 1e-5, 0);
    else if (!differ)
      failf ("a block sum without its barrier agrees between the orders");
  }
}

/* A write past the end of a buffer: AddressSanitizer stops the test, the
 * guard bytes show it elsewhere. */
static void
test_emu_overrun (void)
{
#ifdef EMU_ASAN
  g_test_skip ("AddressSanitizer reports an overrun itself");
#else
  const size_t n = 1001;
  Mem y (F32, n);

  g_assert_cmpint (emu_faults_overrun ((float *) y.data (), n), ==,
      cudaSuccess);
  g_assert_false (y.guards_intact ());
#endif
}

/* A shuffle in a partial warp stops the test, naming the kernel. */
static void
test_emu_partial_warp (void)
{
  if (g_test_subprocess ()) {
    float x[48] = { 0 }, y[1];

    emu_faults_block_sum (x, 1, 48, 1, y);
    return;
  }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed ();
  g_test_trap_assert_stderr ("*block_sum_kernel*partial warp*");
}

/* So does a barrier that some threads of the block have left before. */
static void
test_emu_early_exit (void)
{
  if (g_test_subprocess ()) {
    float y[64];

    emu_faults_early_exit (y, 64, 40);
    return;
  }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed ();
  g_test_trap_assert_stderr ("*early_exit_kernel*deadlock*");
}

/* Blocks of a cooperative launch that wait for each other
 * (pp_cuda_blocks_meet): in either order each sees every block's write
 * before the meeting after it, the count back at 0 and the generation one
 * more a meeting; more blocks than the device holds at once refused; a
 * meeting in a launch that is not cooperative, or one that waits for a
 * block that does not exist, named. */
static void
test_emu_blocks_meet (void)
{
  const int blocks = 8, threads = 64, rounds = 3;

  for (bool descending : { false, true }) {
    unsigned counts[2] = { 0, 5 }, slots[3 * 8], seen[8] = { 0 };

    memset (slots, 0xff, sizeof slots);
    emu_set_descending (descending);
    if (emu_faults_meet (counts, blocks, threads, rounds, 1, blocks, slots,
            seen) != cudaSuccess)
      failf ("a cooperative launch of %d blocks refused", blocks);
    emu_set_descending (false);
    for (int b = 0; b < blocks; b++)
      if (seen[b] != (unsigned) (blocks * rounds))
        failf ("block %d saw %u of its %d meetings' %d writes (%s)", b,
            seen[b], rounds, blocks, descending ? "descending" : "ascending");
    if (counts[0] != 0 || counts[1] != 5 + rounds)
      failf ("after %d meetings the count is %u and the generation %u",
          rounds, counts[0], counts[1]);
  }
  {
    const int most = emu_resident_blocks (threads);
    std::vector<unsigned> slots (most + 1), seen (most + 1);
    unsigned counts[2] = { 0, 0 };

    if (emu_faults_meet (counts, most + 1, threads, 1, 1, most + 1,
            slots.data (), seen.data ()) != cudaErrorCooperativeLaunchTooLarge)
      failf ("a cooperative launch of %d blocks, where the device holds %d, "
          "not refused", most + 1, most);
  }
}

/* Blocks that wait for each other in a launch that is not cooperative
 * (@cooperative 0), or for a ninth block of eight: the process ends,
 * naming the kernel and why. */
static void
meet_fault (int cooperative, const char *why)
{
  if (g_test_subprocess ()) {
    unsigned counts[2] = { 0, 0 }, slots[8], seen[8] = { 0 };

    emu_faults_meet (counts, 8, 64, 1, cooperative, cooperative ? 9 : 8,
        slots, seen);
    return;
  }
  g_test_trap_subprocess (NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
  g_test_trap_assert_failed ();
  g_test_trap_assert_stderr (why);
}

static void
test_emu_meet_not_cooperative (void)
{
  meet_fault (0, "*meet_kernel*not cooperative*");
}

static void
test_emu_meet_missing_block (void)
{
  meet_fault (1, "*meet_kernel*deadlock: 8 blocks wait for a word*");
}

/* The driver's limits on a launch. */
static void
test_emu_launch_limits (void)
{
  const struct
  {
    unsigned grid[3], block[3];
  } invalid[] = {
    { { 1, 65536, 1 }, { 32, 1, 1 } },
    { { 1, 1, 65536 }, { 32, 1, 1 } },
    { { 0x80000000u, 1, 1 }, { 32, 1, 1 } },
    { { 0, 1, 1 }, { 32, 1, 1 } },
    { { 1, 1, 1 }, { 1025, 1, 1 } },
    { { 1, 1, 1 }, { 32, 32, 2 } },
    { { 1, 1, 1 }, { 1, 1, 65 } },
    { { 1, 1, 1 }, { 0, 1, 1 } },
  };

  for (const auto &l : invalid)
    if (emu_faults_launch (l.grid[0], l.grid[1], l.grid[2], l.block[0],
            l.block[1], l.block[2]) != cudaErrorInvalidConfiguration)
      failf ("launch grid (%u,%u,%u) block (%u,%u,%u) not refused",
          l.grid[0], l.grid[1], l.grid[2], l.block[0], l.block[1],
          l.block[2]);
  if (emu_faults_launch (3, 2, 2, 32, 4, 2) != cudaSuccess)
    failf ("a valid launch refused");
}

int
main (int argc, char **argv)
{
  int status;

  g_test_init (&argc, &argv, NULL);
  rng = g_rand_new_with_seed (20240611);
  g_test_add_func ("/kernels/cuda-emu/emu/missing-barrier",
      test_emu_missing_barrier);
  g_test_add_func ("/kernels/cuda-emu/emu/overrun", test_emu_overrun);
  g_test_add_func ("/kernels/cuda-emu/emu/partial-warp",
      test_emu_partial_warp);
  g_test_add_func ("/kernels/cuda-emu/emu/early-exit", test_emu_early_exit);
  g_test_add_func ("/kernels/cuda-emu/emu/launch-limits",
      test_emu_launch_limits);
  g_test_add_func ("/kernels/cuda-emu/emu/blocks-meet",
      test_emu_blocks_meet);
  g_test_add_func ("/kernels/cuda-emu/emu/meet-not-cooperative",
      test_emu_meet_not_cooperative);
  g_test_add_func ("/kernels/cuda-emu/emu/meet-missing-block",
      test_emu_meet_missing_block);
  g_test_add_func ("/kernels/cuda-emu/fill", test_fill);
  g_test_add_func ("/kernels/cuda-emu/unary", test_unary);
  g_test_add_func ("/kernels/cuda-emu/geglu", test_geglu);
  g_test_add_func ("/kernels/cuda-emu/add", test_add);
  g_test_add_func ("/kernels/cuda-emu/scale-affine", test_scale_affine);
  g_test_add_func ("/kernels/cuda-emu/axpby", test_axpby);
  g_test_add_func ("/kernels/cuda-emu/lcm-step", test_lcm_step);
  g_test_add_func ("/kernels/cuda-emu/timestep-embedding",
      test_timestep_embedding);
  g_test_add_func ("/kernels/cuda-emu/row-bias", test_row_bias);
  g_test_add_func ("/kernels/cuda-emu/channel-bias", test_channel_bias);
  g_test_add_func ("/kernels/cuda-emu/narrow-2d", test_narrow_2d);
  g_test_add_func ("/kernels/cuda-emu/bytes", test_bytes);
  g_test_add_func ("/kernels/cuda-emu/group-norm-splits",
      test_group_norm_splits);
  g_test_add_func ("/kernels/cuda-emu/group-norm", test_group_norm);
  g_test_add_func ("/kernels/cuda-emu/group-norm-ticket",
      test_group_norm_ticket);
  g_test_add_func ("/kernels/cuda-emu/group-norm-grid",
      test_group_norm_grid);
  g_test_add_func ("/kernels/cuda-emu/group-norm-offset",
      test_group_norm_offset);
  g_test_add_func ("/kernels/cuda-emu/layer-norm", test_layer_norm);
  g_test_add_func ("/kernels/cuda-emu/upsample", test_upsample);
  g_test_add_func ("/kernels/cuda-emu/resize-bilinear",
      test_resize_bilinear);
  g_test_add_func ("/kernels/cuda-emu/concat", test_concat);
  g_test_add_func ("/kernels/cuda-emu/transpose", test_transpose);
  g_test_add_func ("/kernels/cuda-emu/add-channel", test_add_channel);
  g_test_add_func ("/kernels/cuda-emu/interleave-phases",
      test_interleave_phases);
  g_test_add_func ("/kernels/cuda-emu/im2col", test_im2col);
  g_test_add_func ("/kernels/cuda-emu/pad-channels", test_pad_channels);
  g_test_add_func ("/kernels/cuda-emu/unpad-channels", test_unpad_channels);
  g_test_add_func ("/kernels/cuda-emu/softmax", test_softmax);
  g_test_add_func ("/kernels/cuda-emu/convert", test_convert);
  status = g_test_run ();
  g_rand_free (rng);
  return status;
}
