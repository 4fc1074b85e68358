/* ppdiffuse — element-wise formulas shared by the CPU ops and a later CUDA
 * backend.  Plain C (no GLib) so that gcc and nvcc compile the same text:
 * under nvcc every function is also a device function.
 *
 * exp and erf are written out (polynomials, no calls, no branches) rather
 * than taken from libm: that lets a compiler vectorise the loops that use
 * them, which libm's expf/erff prevent, and it makes every backend compute
 * the same values.  Both are accurate to about 1e-7 (a float ulp near 1).
 *
 * Non-finite inputs: a NaN gives NaN everywhere; e^-inf = 0, e^+inf = inf,
 * erf(±inf) = ±1, sigmoid(±inf) = 1, 0; SiLU and GELU of -inf are NaN
 * (-inf · 0), as PyTorch's formulas give. */
#pragma once

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define PP_MATH_FN static inline __host__ __device__
#else
#define PP_MATH_FN static inline
#endif

/* 1/√2 as a float literal: M_SQRT1_2 is POSIX, not C11. */
#define PP_MATH_SQRT1_2_F 0.70710678118654752440f
/* The slope of quick GELU's sigmoid (CLIP, transformers' "quick_gelu"). */
#define PP_MATH_QUICK_GELU_SCALE 1.702f
/* max_period of the sinusoidal timestep embedding (as in diffusers). */
#define PP_MATH_TIMESTEP_MAX_PERIOD 10000.0f

/* pp_math_exp clamps its argument to this range, which keeps the 2^n of
 * the range reduction within what the code below can build: e^x is
 * exactly 0 for x below about -87 (never a denormal, which would cost a
 * microcode assist per vector on x86) and +inf above about 88.7, like
 * expf; so e^-inf = 0 and e^+inf = +inf.  A NaN stays NaN. */
#define PP_MATH_EXP_MIN (-87.5f)
#define PP_MATH_EXP_MAX 89.0f

/* e^x = 2^n · e^r with n = round(x / ln 2) and |r| ≤ ln2 / 2; ln 2 is
 * split in a part with few mantissa bits (n·hi is exact) and the rest.
 * e^r = 1 + r + r²·q(r), q of degree 4 fitted here (Lawson's minimax
 * iteration in double) to a relative error of 3e-9, far below float
 * rounding. */
PP_MATH_FN float
pp_math_exp (float x)
{
  const float log2e = 1.44269504088896341f;
  const float ln2_hi = 0.693359375f;
  const float ln2_lo = -2.12194440e-4f;
  /* Adding 1.5·2^23 rounds to the nearest integer n, which then sits in
   * the low mantissa bits of the sum: its bits are those of the magic
   * number plus n. */
  const float round_magic = 12582912.0f;
  const uint32_t round_magic_bits = 0x4b400000u;
  /* 2^n as 2·2^(n-1), n in [-126, 128] after the clamp: the exponent field
   * n - 1 + 127 is 0 (the float 0) at the bottom and 254 at the top, where
   * 2·2^127·e^r overflows to inf exactly when e^x does. */
  const uint32_t exponent_bias = 126;
  float t, n, r, q, half_scale;
  uint32_t bits;

  /* A NaN fails both comparisons and flows through as a NaN r.  n never
   * goes through a float-to-integer conversion, whose result for a NaN is
   * undefined behaviour (clang folds e^NaN to a number): its bits are
   * unsigned integer arithmetic, defined for any input. */
  x = x < PP_MATH_EXP_MIN ? PP_MATH_EXP_MIN : x;
  x = x > PP_MATH_EXP_MAX ? PP_MATH_EXP_MAX : x;
  t = x * log2e + round_magic;
  n = t - round_magic;
  r = (x - n * ln2_hi) - n * ln2_lo;
  q = 1.3814542234e-3f;
  q = q * r + 8.3687077076e-3f;
  q = q * r + 4.1668388160e-2f;
  q = q * r + 1.6666520711e-1f;
  q = q * r + 4.9999993450e-1f;
  memcpy (&bits, &t, sizeof bits);
  bits = (bits - round_magic_bits + exponent_bias) << 23;
  memcpy (&half_scale, &bits, sizeof half_scale);
  return ((q * r * r + r + 1.0f) * 2.0f) * half_scale;
}

/* erfc(|x|) for the erf below: Abramowitz & Stegun 7.1.26,
 * erfc(a) ≈ t·(a1 + t·(a2 + …)) · e^(-a²), t = 1 / (1 + p·a), absolute
 * error ≤ 1.5e-7. */
PP_MATH_FN float
pp_math_erfc_abs (float x)
{
  const float a = fabsf (x);
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float poly = 1.061405429f;

  poly = poly * t - 1.453152027f;
  poly = poly * t + 1.421413741f;
  poly = poly * t - 0.284496736f;
  poly = poly * t + 0.254829592f;
  return poly * t * pp_math_exp (-a * a);
}

/* 1 + erf(x), computed without cancellation for negative x. */
PP_MATH_FN float
pp_math_one_plus_erf (float x)
{
  const float q = pp_math_erfc_abs (x);

  return x < 0.0f ? q : 2.0f - q;
}

PP_MATH_FN float
pp_math_erf (float x)
{
  return pp_math_one_plus_erf (x) - 1.0f;
}

PP_MATH_FN float
pp_math_relu (float x)
{
  /* Written so that a NaN passes through instead of turning into 0. */
  return x < 0.0f ? 0.0f : x;
}

PP_MATH_FN float
pp_math_sigmoid (float x)
{
  return 1.0f / (1.0f + pp_math_exp (-x));
}

/* x·sigmoid(x).  Written as x·(1/(1+e)), not x/(1+e): gcc would otherwise
 * keep a second vector division for the clamped branch of the exp. */
PP_MATH_FN float
pp_math_silu (float x)
{
  return x * pp_math_sigmoid (x);
}

/* Once per image in the TAESD decoder: libm's tanhf is accurate near 0,
 * where 1 - 2/(e^2x + 1) would cancel. */
PP_MATH_FN float
pp_math_tanh (float x)
{
  return tanhf (x);
}

/* Exact GELU: 0.5·x·(1 + erf(x/√2)), not the tanh approximation. */
PP_MATH_FN float
pp_math_gelu_erf (float x)
{
  return 0.5f * x * pp_math_one_plus_erf (x * PP_MATH_SQRT1_2_F);
}

/* CLIP's quick GELU: x·sigmoid(1.702·x). */
PP_MATH_FN float
pp_math_quick_gelu (float x)
{
  return x * pp_math_sigmoid (PP_MATH_QUICK_GELU_SCALE * x);
}

/* A value as an 8-bit pixel: rounded to the nearest integer, ties to even
 * (rintf's in the default rounding mode), clamped to 0…255, NaN to 0.
 * Clamped first (which gives what clamping the rounded value gives, for
 * every float), then rounded by adding and subtracting 1.5·2^23, which
 * leaves a float below 2^22 no fraction bits: no libm call, and a loop a
 * compiler vectorises.  (Where floats are evaluated in a wider type, as
 * on x87, rintf.) */
PP_MATH_FN uint8_t
pp_math_to_byte (float v)
{
  v = v >= 0.0f ? v : 0.0f;
  v = v <= 255.0f ? v : 255.0f;
#if defined(__CUDA_ARCH__) || FLT_EVAL_METHOD == 0
  v = (v + 12582912.0f) - 12582912.0f;
#else
  v = rintf (v);
#endif
  return (uint8_t) v;
}

/* GEGLU of one (value, gate) pair: value·gelu(gate). */
PP_MATH_FN float
pp_math_geglu (float value, float gate)
{
  return value * pp_math_gelu_erf (gate);
}

/* Frequency k (0 ≤ k < half) of the sinusoidal timestep embedding:
 * exp(-ln(max_period)·k / (half - freq_shift)), in float32 steps like the
 * PyTorch reference so that both round the same way (libm here: it runs
 * once per step, and the argument reaches -9.2). */
PP_MATH_FN float
pp_math_timestep_freq (int k, int half, float freq_shift)
{
  const float neg_log_period = -logf (PP_MATH_TIMESTEP_MAX_PERIOD);

  return expf (neg_log_period * (float) k / ((float) half - freq_shift));
}

/* The scalars of one latent-consistency step (diffusers LCMScheduler): with
 * x the sample and ε̂ the noise prediction at ᾱ = sa², the denoised
 * x̂0 = (x − sb·ε̂)/sa, the boundary-condition mix d = c_out·x̂0 + c_skip·x,
 * and the next sample na·d + nb·ε (fresh noise ε), or d on the last step
 * (last non-zero). */
typedef struct
{
  float sa, sb, c_out, c_skip, na, nb;
  int last;
} PpLcmCoeffs;

PP_MATH_FN float
pp_math_lcm_step (const PpLcmCoeffs * c, float x, float eps, float noise)
{
  const float x0 = (x - c->sb * eps) / c->sa;
  const float d = c->c_out * x0 + c->c_skip * x;

  return c->last ? d : c->na * d + c->nb * noise;
}

/* The temporal feature bank's formulas (kernels/models/pp-feature-bank.h,
 * the ops row_norms, bank_fuse, bank_merge_dest and bank_merge).
 *
 * 1 / a row's norm, 0 for a zero row: a candidate's score, its dot product
 * with a row times this, orders the candidates as their cosines do. */
PP_MATH_FN float
pp_math_inverse_norm (float norm)
{
  return norm > 0.0f ? 1.0f / norm : 0.0f;
}

/* The cosine of two rows of dot product @dot and norms @na, @nb, in
 * double; 0 where either row is zero. */
PP_MATH_FN double
pp_math_cosine (float dot, float na, float nb)
{
  return na == 0.0f || nb == 0.0f ? 0.0 : dot / ((double) na * nb);
}

/* A fused value: (1 − @strength)·@y + @strength·@banked, in double. */
PP_MATH_FN float
pp_math_blend (float y, float banked, double strength)
{
  return (float) ((1.0 - strength) * y + strength * banked);
}

/* The @k-th row kept when @r of a merge's rows go (rows 0, 2, …, 2r − 2):
 * the odd rows below 2r, then every row from 2r (every row when @r is 0).
 * They are also the destinations a merged row may go to. */
PP_MATH_FN int
pp_math_bank_kept (int k, int r)
{
  return k < r ? 2 * k + 1 : k + r;
}
