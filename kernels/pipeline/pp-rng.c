/* ppdiffuse — PCG32 and Box–Muller. */
#include "pp-rng.h"

#include <math.h>

#define PCG_MULTIPLIER 6364136223846793005ULL
#define PP_TWO_PI 6.283185307179586476925286766559

void
pp_rng_init (PpRng * rng, guint64 seed, guint64 stream)
{
  rng->state = 0;
  rng->inc = (stream << 1u) | 1u;
  pp_rng_next_u32 (rng);
  rng->state += seed;
  pp_rng_next_u32 (rng);
}

guint32
pp_rng_next_u32 (PpRng * rng)
{
  guint64 old = rng->state;
  guint32 xorshifted, rot;

  rng->state = old * PCG_MULTIPLIER + rng->inc;
  xorshifted = (guint32) (((old >> 18u) ^ old) >> 27u);
  rot = (guint32) (old >> 59u);
  return (xorshifted >> rot) | (xorshifted << ((-rot) & 31));
}

/* Uniform in (0, 1]: never 0, so the logarithm below is finite. */
static double
uniform (PpRng * rng)
{
  return ((pp_rng_next_u32 (rng) >> 8) + 1) / 16777216.0;
}

void
pp_rng_fill_normal (PpRng * rng, gfloat * out, gsize n)
{
  for (gsize i = 0; i < n; i += 2) {
    double r = sqrt (-2.0 * log (uniform (rng)));
    double a = PP_TWO_PI * uniform (rng);
    out[i] = (gfloat) (r * cos (a));
    if (i + 1 < n)
      out[i + 1] = (gfloat) (r * sin (a));
  }
}
