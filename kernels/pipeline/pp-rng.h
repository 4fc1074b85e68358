/* ppdiffuse — the documented, seeded noise generator.
 *
 * Noise must be reproducible across ranks, processes and runs: the element's
 * output for a frame has to equal ppdiffuse-tool's for the same settings.
 * So noise is a pure function of (seed, stream): PCG32 (O'Neill, the
 * XSH-RR 64/32 variant, multiplier 6364136223846793005) seeded with
 * state = seed, increment = 2·stream + 1, advanced once; standard normals
 * come from pairs of uniforms u1, u2 ∈ (0,1] (24-bit mantissas) through
 * Box–Muller: √(−2 ln u1)·cos(2π u2), √(−2 ln u1)·sin(2π u2). */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct
{
  guint64 state;
  guint64 inc;
} PpRng;

void    pp_rng_init        (PpRng * rng, guint64 seed, guint64 stream);
guint32 pp_rng_next_u32    (PpRng * rng);
/* Fills @out with @n standard normal samples. */
void    pp_rng_fill_normal (PpRng * rng, gfloat * out, gsize n);

/* Streams used by the pipeline: the initial noise and the noise added after
 * step k (LCM) must not share a stream. */
#define PP_RNG_STREAM_INIT 0
#define PP_RNG_STREAM_STEP(k) (1 + (guint64) (k))

G_END_DECLS
