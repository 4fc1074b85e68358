/* npy-compare [--nmse LIMIT] A.npy B.npy — exit 0 when the two float32
 * tensors have the same shape and |a − b| ≤ 1e-4 · max(1, max|b|)
 * everywhere (the fixtures' tolerance: tests/data/README), or, with
 * --nmse, when the normalised mean squared error Σ(a − b)² / Σb² is at
 * most LIMIT (the measure of ggml's test-backend-ops, for a backend whose
 * dtype rounds: tests/gpu/run.sh). */
#include "pp-npy.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define RELATIVE_TOLERANCE 1e-4

int
main (int argc, char **argv)
{
  g_autoptr (GError) error = NULL;
  g_autoptr (PpTensor) a = NULL, b = NULL;
  gdouble max_ref = 0, max_diff = 0, limit, err2 = 0, ref2 = 0;
  gdouble nmse_limit = -1;

  if (argc == 5 && g_str_equal (argv[1], "--nmse")) {
    nmse_limit = g_ascii_strtod (argv[2], NULL);
    argv += 2;
    argc -= 2;
  }
  if (argc != 3 || (nmse_limit == 0 && nmse_limit != -1)) {
    fprintf (stderr, "usage: %s [--nmse LIMIT] A.npy B.npy\n", argv[0]);
    return 2;
  }
  if ((a = pp_npy_load (argv[1], &error)) == NULL
      || (b = pp_npy_load (argv[2], &error)) == NULL) {
    fprintf (stderr, "%s\n", error->message);
    return 2;
  }
  if (a->ndim != b->ndim || a->nbytes != b->nbytes
      || memcmp (a->shape, b->shape, a->ndim * sizeof (gint64)) != 0) {
    g_autofree gchar *da = pp_tensor_describe (a), *db = pp_tensor_describe (b);
    fprintf (stderr, "shapes differ: %s vs %s\n", da, db);
    return 1;
  }
  for (gint64 i = 0; i < pp_tensor_numel (a); i++) {
    gdouble x = ((gfloat *) a->data)[i], y = ((gfloat *) b->data)[i];
    max_ref = MAX (max_ref, fabs (y));
    max_diff = MAX (max_diff, isfinite (x) ? fabs (x - y) : INFINITY);
    err2 += (x - y) * (x - y);
    ref2 += y * y;
  }
  if (nmse_limit > 0) {
    gdouble nmse = ref2 > 0 ? err2 / ref2 : err2;

    printf ("%s vs %s: NMSE %.3g (limit %.3g), max |diff| %.3g\n", argv[1],
        argv[2], nmse, nmse_limit, max_diff);
    return isfinite (nmse) && nmse <= nmse_limit ? 0 : 1;
  }
  limit = RELATIVE_TOLERANCE * MAX (1.0, max_ref);
  printf ("%s vs %s: max |diff| %.3g (limit %.3g)\n", argv[1], argv[2],
      max_diff, limit);
  return max_diff <= limit ? 0 : 1;
}
