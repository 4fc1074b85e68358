#include "pp-error.h"

/* Not G_DEFINE_QUARK, whose lazy static is written without a barrier:
 * threads that fail at once (a worker's load beside its digest) would
 * race on it. */
GQuark
pp_error_quark (void)
{
  static gsize quark;

  if (g_once_init_enter (&quark))
    g_once_init_leave (&quark,
        (gsize) g_quark_from_static_string ("ppdiffuse-error-quark"));
  return (GQuark) quark;
}
