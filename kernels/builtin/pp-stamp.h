/* ppdiffuse — builtin:stamp, a model that proves the step schedule.
 *
 * Step k maps every channel value v (0..255) of channel c to
 *   (a(k) * v + b(k, c)) mod 256,  a(k) = 2 (k mod 128) + 3,
 *   b(k, c) = (37 k + 101 c + 11) mod 256.
 * Each map is a bijection and no two of them commute, so the output of a
 * frame equals the composition f(S-1) ∘ … ∘ f(0) of its own input only when
 * every step ran exactly once and in order.
 *
 * The live parameter mark=m (0..255, default 0) adds m to every step:
 *   (a(k) * v + b(k, c) + m) mod 256,
 * so that a test can tell which settings computed a frame. */
#pragma once

#include <glib.h>

#define PP_STAMP_A(k)    (2u * ((k) % 128u) + 3u)
#define PP_STAMP_B(k, c) ((37u * (k) + 101u * (c) + 11u) % 256u)

#define PP_STAMP_MARK_MAX 255u

static inline guint
pp_stamp_apply (guint step, guint channel, guint value, guint mark)
{
  return (PP_STAMP_A (step) * value + PP_STAMP_B (step, channel) + mark)
      % 256u;
}
