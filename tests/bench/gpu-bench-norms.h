/* ppdiffuse — gpu-bench --norms (gpu-bench-norms.c). */
#pragma once

#include "pp-backend.h"

G_BEGIN_DECLS

/* Times each norm shape of an SD-Turbo UNet step (of a small UNet with
 * @small) alone on @be, in @dtype activations, as graphs, the best of
 * @repeats; @gbps the device's bandwidth (0: unknown).  Prints a table and
 * a step's norms in all; with @kernels (the backend's trace enabled) each
 * shape's kernels' device time under its row; @only >= 0 times that shape
 * alone (its index in the table).  FALSE, having said why, where it could
 * not. */
gboolean pp_bench_norms (PpBackend * be, PpDType dtype, guint repeats,
                         gdouble gbps, gboolean small, gboolean kernels,
                         gint only);

G_END_DECLS
