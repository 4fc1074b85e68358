/* ppdiffuse — float32 ↔ float16 and float32 ↔ bfloat16, bit by bit.
 *
 * The storage dtypes of weights and activations on backends that keep them
 * in 16 bits (compute stays float32).  Plain C (no GLib) so that gcc and
 * nvcc compile the same text, like pp-ops-math.h: under nvcc every function
 * is also a device function.
 *
 * Narrowing rounds to nearest, ties to even (IEEE 754's default, as
 * numpy's astype(float16) and PyTorch's .to(bfloat16) do):
 *   - float16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; magnitudes
 *     of 65520 and more (halfway above the largest finite, 65504) become
 *     infinity; below 2^-14 they become subnormals (multiples of 2^-24),
 *     and below 2^-25 zero, the sign kept.
 *   - bfloat16: the top 16 bits of the float32, rounded on the 16 bits
 *     dropped; the exponent range is float32's, so only values within half
 *     a bfloat16 ulp of FLT_MAX or above overflow to infinity.
 *   - A NaN stays a NaN (quiet, its sign and top payload bits kept; a
 *     payload lost in narrowing becomes the quiet bit); ±inf stays ±inf.
 * Widening is exact.
 *
 * On the device, float16's finite values and infinities take the GPU's
 * own conversions (one instruction each, IEEE 754's rounding to nearest
 * even: the same bits), and a NaN the bits the portable path gives it,
 * chosen by a select: no branch on the value. */
#pragma once

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#include <cuda_fp16.h>
#define PP_DTYPE_FN static inline __host__ __device__
#else
#define PP_DTYPE_FN static inline
#endif

#define PP_F16_EXP_MASK 0x7c00u
#define PP_F16_MANT_MASK 0x03ffu
#define PP_F16_QUIET 0x0200u
#define PP_F32_EXP_MASK 0x7f800000u
#define PP_F32_MANT_MASK 0x007fffffu

PP_DTYPE_FN uint32_t
pp_dtype_f32_bits (float x)
{
  uint32_t bits;

  memcpy (&bits, &x, sizeof bits);
  return bits;
}

PP_DTYPE_FN float
pp_dtype_f32_from_bits (uint32_t bits)
{
  float x;

  memcpy (&x, &bits, sizeof x);
  return x;
}

/* @value shifted right by @shift (1…31), rounded to nearest, ties to
 * even. */
PP_DTYPE_FN uint32_t
pp_dtype_shift_round_even (uint32_t value, unsigned shift)
{
  uint32_t kept = value >> shift;
  uint32_t rest = value & ((1u << shift) - 1u);
  uint32_t halfway = 1u << (shift - 1);

  if (rest > halfway || (rest == halfway && (kept & 1u)))
    kept++;
  return kept;
}

PP_DTYPE_FN uint16_t
pp_f32_to_f16 (float x)
{
  uint32_t bits = pp_dtype_f32_bits (x);
  uint16_t sign = (uint16_t) ((bits >> 16) & 0x8000u);
  uint32_t exp = (bits & PP_F32_EXP_MASK) >> 23;
  uint32_t mant = bits & PP_F32_MANT_MASK;
  int e;

#ifdef __CUDA_ARCH__
  {
    /* A select, not a branch: a branch on a loaded value would hold every
     * later load of a kernel back until that one arrived. */
    const uint16_t fast = __half_as_ushort (__float2half_rn (x));
    const uint16_t nan = sign | PP_F16_EXP_MASK | PP_F16_QUIET
        | (uint16_t) (mant >> 13);

    return (bits & 0x7fffffffu) > PP_F32_EXP_MASK ? nan : fast;
  }
#endif

  if (exp == 0xffu) {
    if (mant == 0)
      return sign | PP_F16_EXP_MASK;
    return sign | PP_F16_EXP_MASK | PP_F16_QUIET | (uint16_t) (mant >> 13);
  }
  /* Unbiased exponent; float32 subnormals are far below float16's. */
  e = (int) exp - 127;
  if (e > 15)
    return sign | PP_F16_EXP_MASK;
  if (e >= -14) {
    /* Normal: 13 mantissa bits dropped.  A carry out of the mantissa
     * steps the exponent, and out of the largest exponent gives inf. */
    uint32_t normal = ((uint32_t) (e + 15) << 10) | (mant >> 13);
    uint32_t rest = mant & 0x1fffu;

    if (rest > 0x1000u || (rest == 0x1000u && (normal & 1u)))
      normal++;
    return sign | (uint16_t) normal;
  }
  if (e < -25)
    return sign;
  /* Subnormal: the significand (hidden bit made explicit, 24 bits for
   * 1.m × 2^e) in units of 2^-24 is significand >> (-e - 1). */
  return sign | (uint16_t) pp_dtype_shift_round_even (mant | 0x800000u,
      (unsigned) (-e - 1));
}

PP_DTYPE_FN float
pp_f16_to_f32 (uint16_t h)
{
  uint32_t sign = (uint32_t) (h & 0x8000u) << 16;
  uint32_t exp = (h & PP_F16_EXP_MASK) >> 10;
  uint32_t mant = h & PP_F16_MANT_MASK;

#ifdef __CUDA_ARCH__
  {
    /* A select, as in pp_f32_to_f16. */
    const float fast = __half2float (__ushort_as_half (h));
    const float nan = pp_dtype_f32_from_bits (sign | PP_F32_EXP_MASK
        | (mant << 13));

    return (h & 0x7fffu) > PP_F16_EXP_MASK ? nan : fast;
  }
#endif
  if (exp == 0x1fu)
    return pp_dtype_f32_from_bits (sign | PP_F32_EXP_MASK | (mant << 13));
  if (exp == 0) {
    int shift = 0;

    if (mant == 0)
      return pp_dtype_f32_from_bits (sign);
    /* Subnormal: normalise, so that the leading 1 becomes the hidden
     * bit. */
    while (!(mant & 0x400u)) {
      mant <<= 1;
      shift++;
    }
    return pp_dtype_f32_from_bits (sign
        | ((uint32_t) (127 - 15 + 1 - shift) << 23)
        | ((mant & PP_F16_MANT_MASK) << 13));
  }
  return pp_dtype_f32_from_bits (sign | ((exp + 127 - 15) << 23)
      | (mant << 13));
}

PP_DTYPE_FN uint16_t
pp_f32_to_bf16 (float x)
{
  uint32_t bits = pp_dtype_f32_bits (x);

  if ((bits & PP_F32_EXP_MASK) == PP_F32_EXP_MASK
      && (bits & PP_F32_MANT_MASK) != 0)
    return (uint16_t) ((bits >> 16) | 0x0040u);
  /* The carry of the rounding runs into the exponent on its own, up to
   * infinity. */
  return (uint16_t) pp_dtype_shift_round_even (bits, 16);
}

PP_DTYPE_FN float
pp_bf16_to_f32 (uint16_t b)
{
  return pp_dtype_f32_from_bits ((uint32_t) b << 16);
}
