/* Tests of the 16-bit storage dtypes (kernels/pp-dtype-math.h):
 *   - values numpy (astype float16) and PyTorch (.to(bfloat16)) give for
 *     inputs chosen at the edges: ties, subnormals, overflow, specials;
 *   - every float16 widened, against its value from the format's formula;
 *   - narrowing to float16 and to bfloat16 against a reference that finds
 *     the nearest representable value by search and arithmetic (no bit
 *     tricks), on every midpoint between neighbours and its two float32
 *     neighbours, on every float16/bfloat16 value, and on a million random
 *     float32 bit patterns. */
#include "pp-dtype-math.h"

#include <glib.h>
#include <math.h>

/* float32 bits, numpy's float16 bits, PyTorch's bfloat16 bits (made with
 * numpy 1.24 and PyTorch 1.13). */
static const uint32_t expected[][3] = {
  {0x00000000u, 0x0000u, 0x0000u},      /* 0.0 */
  {0x80000000u, 0x8000u, 0x8000u},      /* -0.0 */
  {0x3f800000u, 0x3c00u, 0x3f80u},      /* 1.0 */
  {0xbf800000u, 0xbc00u, 0xbf80u},      /* -1.0 */
  {0x3dcccccdu, 0x2e66u, 0x3dcdu},      /* 0.1 */
  {0x3eaaaaabu, 0x3555u, 0x3eabu},      /* 1/3 */
  {0x3f2aaaabu, 0x3955u, 0x3f2bu},      /* 2/3 */
  {0x477fe000u, 0x7bffu, 0x4780u},      /* 65504, float16's largest */
  {0x477feffdu, 0x7bffu, 0x4780u},      /* 65519.99 */
  {0x477ff000u, 0x7c00u, 0x4780u},      /* 65520: the tie goes to inf */
  {0x47800000u, 0x7c00u, 0x4780u},      /* 65536 */
  {0xc788b800u, 0xfc00u, 0xc789u},      /* -70000 */
  {0x3727c5acu, 0x00a8u, 0x3728u},      /* 1e-5, a float16 subnormal */
  {0x38800000u, 0x0400u, 0x3880u},      /* 2^-14, smallest normal */
  {0x387fc000u, 0x03ffu, 0x3880u},      /* largest subnormal */
  {0x33800000u, 0x0001u, 0x3380u},      /* 2^-24, smallest subnormal */
  {0x33000000u, 0x0000u, 0x3300u},      /* 2^-25: tie to even, 0 */
  {0x33000001u, 0x0001u, 0x3300u},      /* just above 2^-25 */
  {0x322bcc77u, 0x0000u, 0x322cu},      /* 1e-8 */
  {0xb22bcc77u, 0x8000u, 0xb22cu},      /* -1e-8 */
  {0x3f802000u, 0x3c01u, 0x3f80u},      /* 1 + 2^-10 */
  {0x3f801000u, 0x3c00u, 0x3f80u},      /* 1 + 2^-11: tie, to even */
  {0x3f803000u, 0x3c02u, 0x3f80u},      /* 1 + 3·2^-11: tie, to even */
  {0x45001000u, 0x6800u, 0x4500u},      /* 2049 */
  {0x45003000u, 0x6802u, 0x4500u},      /* 2051 */
  {0x40490fdbu, 0x4248u, 0x4049u},      /* pi */
  {0xc02df854u, 0xc170u, 0xc02eu},      /* -e */
  {0x7f800000u, 0x7c00u, 0x7f80u},      /* inf */
  {0xff800000u, 0xfc00u, 0xff80u},      /* -inf */
  {0x7f7fffffu, 0x7c00u, 0x7f80u},      /* FLT_MAX: bfloat16 overflows */
  {0xff7fc99eu, 0xfc00u, 0xff80u},      /* -3.4e38 */
  {0x00800000u, 0x0000u, 0x0080u},      /* FLT_MIN */
  {0x000116c2u, 0x0000u, 0x0001u},      /* 1e-40, a float32 subnormal */
  {0x3f808000u, 0x3c04u, 0x3f80u},      /* 1 + 2^-8: bfloat16 tie */
  {0x3f80c000u, 0x3c06u, 0x3f81u},      /* 1 + 3·2^-9: bfloat16 tie */
  {0x3f804000u, 0x3c02u, 0x3f80u},      /* 1 + 2^-9 */
  {0x437f8000u, 0x5bfcu, 0x4380u},      /* 255.5 */
  {0x43808000u, 0x5c04u, 0x4380u},      /* 257 */
  {0x501502f9u, 0x7c00u, 0x5015u},      /* 1e10 */
  {0x47f12065u, 0x7c00u, 0x47f1u},      /* 123456.789 */
};

static void
test_reference_values (void)
{
  for (guint i = 0; i < G_N_ELEMENTS (expected); i++) {
    float x = pp_dtype_f32_from_bits (expected[i][0]);

    g_assert_cmphex (pp_f32_to_f16 (x), ==, expected[i][1]);
    g_assert_cmphex (pp_f32_to_bf16 (x), ==, expected[i][2]);
  }
}

/* A NaN stays a NaN, quiet, its sign kept; infinities stay. */
static void
test_specials (void)
{
  const uint32_t nans[] = { 0x7fc00000u, 0xffc00000u, 0x7f800001u,
    0x7fa00000u, 0xff800001u, 0x7fffffffu
  };

  for (guint i = 0; i < G_N_ELEMENTS (nans); i++) {
    float x = pp_dtype_f32_from_bits (nans[i]);
    uint16_t h = pp_f32_to_f16 (x), b = pp_f32_to_bf16 (x);

    g_assert_true ((h & 0x7c00u) == 0x7c00u && (h & 0x0200u) != 0);
    g_assert_true ((b & 0x7f80u) == 0x7f80u && (b & 0x0040u) != 0);
    g_assert_cmpuint (h >> 15, ==, nans[i] >> 31);
    g_assert_cmpuint (b >> 15, ==, nans[i] >> 31);
    g_assert_true (isnan (pp_f16_to_f32 (h)));
    g_assert_true (isnan (pp_bf16_to_f32 (b)));
  }
}

/* float16 @h from the format's definition, in double. */
static double
f16_value (uint16_t h)
{
  int sign = h >> 15, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  double v;

  if (exp == 0x1f)
    return mant ? NAN : (sign ? -INFINITY : INFINITY);
  v = exp == 0 ? ldexp (mant, -24) : ldexp (1024 + mant, exp - 25);
  return sign ? -v : v;
}

static void
test_f16_widening (void)
{
  for (guint h = 0; h <= 0xffffu; h++) {
    double want = f16_value ((uint16_t) h);
    float got = pp_f16_to_f32 ((uint16_t) h);

    if (isnan (want)) {
      g_assert_true (isnan (got));
      continue;
    }
    g_assert_cmpfloat ((double) got, ==, want);
    g_assert_cmpint (signbit (got) != 0, ==, (h >> 15) != 0);
    /* and back, exactly */
    g_assert_cmphex (pp_f32_to_f16 (got), ==, h);
  }
}

/* Nearest float16 to finite @x by search over the non-negative finite
 * values (which grow with their bits), ties to the even bit pattern;
 * magnitudes from 65520 (halfway above 65504) are infinity. */
static uint16_t
f16_nearest (double x)
{
  uint16_t sign = signbit (x) ? 0x8000u : 0;
  double a = fabs (x);
  guint lo = 0, hi = 0x7bff;

  if (a >= 65520.0)
    return sign | 0x7c00u;
  while (lo < hi) {             /* the first value >= a */
    guint mid = (lo + hi) / 2;

    if (f16_value ((uint16_t) mid) < a)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo > 0) {
    double above = f16_value ((uint16_t) lo) - a;
    double below = a - f16_value ((uint16_t) (lo - 1));

    if (below < above || (below == above && ((lo - 1) & 1u) == 0))
      lo--;
  }
  return sign | (uint16_t) lo;
}

/* Nearest bfloat16 to finite @x: of the two bfloat16 around it, the
 * nearer by arithmetic, ties to the even one; infinity past FLT_MAX's
 * rounding. */
static uint16_t
bf16_nearest (float x)
{
  uint32_t bits = pp_dtype_f32_bits (x);
  uint16_t down = (uint16_t) (bits >> 16), up = down + 1;
  double a = fabs ((double) x);
  double below = a - fabs ((double) pp_bf16_to_f32 (down));
  double above;

  if ((up & 0x7fffu) == 0x7f80u)        /* above the largest: infinity */
    above = ldexp (1.0, 128) - a;
  else
    above = fabs ((double) pp_bf16_to_f32 (up)) - a;
  if (below < above || (below == above && (down & 1u) == 0))
    return down;
  return up;
}

static void
check_narrowing (float x)
{
  if (isnan (x))
    return;
  if (isinf (x)) {
    g_assert_cmphex (pp_f32_to_f16 (x), ==, signbit (x) ? 0xfc00u : 0x7c00u);
    g_assert_cmphex (pp_f32_to_bf16 (x), ==, signbit (x) ? 0xff80u : 0x7f80u);
    return;
  }
  if (pp_f32_to_f16 (x) != f16_nearest (x))
    g_error ("float16 of %a (0x%08x): 0x%04x, nearest is 0x%04x", x,
        pp_dtype_f32_bits (x), pp_f32_to_f16 (x), f16_nearest (x));
  if (pp_f32_to_bf16 (x) != bf16_nearest (x))
    g_error ("bfloat16 of %a (0x%08x): 0x%04x, nearest is 0x%04x", x,
        pp_dtype_f32_bits (x), pp_f32_to_bf16 (x), bf16_nearest (x));
}

/* @x and its two float32 neighbours. */
static void
check_around (float x)
{
  check_narrowing (x);
  check_narrowing (nextafterf (x, INFINITY));
  check_narrowing (nextafterf (x, -INFINITY));
}

static void
test_f16_narrowing (void)
{
  for (guint h = 0; h < 0x7bffu; h++) {
    double v = f16_value ((uint16_t) h), next = f16_value ((uint16_t) h + 1);
    /* Midpoints need one bit more than float16 has: exact in float32. */
    float mid = (float) ((v + next) / 2);

    g_assert_cmpfloat ((double) mid, ==, (v + next) / 2);
    check_around ((float) v);
    check_around (-(float) v);
    check_around (mid);
    check_around (-mid);
  }
  check_around (65520.0f);
  check_around (-65520.0f);
}

static void
test_bf16_narrowing (void)
{
  for (guint b = 0; b < 0x7f80u; b++) {
    uint32_t bits = (uint32_t) b << 16;

    check_around (pp_dtype_f32_from_bits (bits));
    check_around (pp_dtype_f32_from_bits (bits | 0x8000u));    /* midpoint */
    check_around (pp_dtype_f32_from_bits (bits | 0x80000000u));
    check_around (pp_dtype_f32_from_bits (bits | 0x80008000u));
  }
  g_assert_cmphex (pp_f32_to_bf16 (pp_dtype_f32_from_bits (0x7f7f8000u)),
      ==, 0x7f80u);             /* the tie above the largest, to inf */
}

static void
test_random_bits (void)
{
  GRand *rand = g_rand_new_with_seed (16);

  for (guint i = 0; i < 1000000; i++)
    check_narrowing (pp_dtype_f32_from_bits (g_rand_int (rand)));
  g_rand_free (rand);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/dtype/reference-values", test_reference_values);
  g_test_add_func ("/dtype/specials", test_specials);
  g_test_add_func ("/dtype/f16-widening", test_f16_widening);
  g_test_add_func ("/dtype/f16-narrowing", test_f16_narrowing);
  g_test_add_func ("/dtype/bf16-narrowing", test_bf16_narrowing);
  g_test_add_func ("/dtype/random-bits", test_random_bits);
  return g_test_run ();
}
