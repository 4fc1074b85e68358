/* ppdiffuse — fully connected layer: one GEMM against the [out, in] weight
 * as stored (transposed operand, no copy); and the general matmul. */
#include "pp-cpu-ops.h"

#include "pp-cpu-parallel.h"

#include <string.h>

void
pp_cpu_fill_rows (float *y, int rows, int cols, size_t ldy,
    const float *bias)
{
  for (int r = 0; r < rows; r++) {
    float *p = y + (size_t) r * ldy;
    const float v = bias[r];

    for (int i = 0; i < cols; i++)
      p[i] = v;
  }
}

void
pp_cpu_fill_cols (float *y, int rows, int cols, const float *bias)
{
  for (int r = 0; r < rows; r++)
    memcpy (y + (size_t) r * cols, bias, (size_t) cols * sizeof (float));
}

void
pp_cpu_linear (const float *x, int rows, int in, const float *w,
    const float *b, int out, float *y)
{
  g_return_if_fail (rows > 0 && in > 0 && out > 0);

  if (b)
    pp_cpu_fill_cols (y, rows, out, b);
  pp_cpu_gemm (FALSE, TRUE, rows, out, in, 1.0f, x, in, w, in,
      b ? 1.0f : 0.0f, y, out);
}

void
pp_cpu_matmul (gboolean trans_a, gboolean trans_b, int m, int n, int k,
    const float *a, int lda, const float *b, int ldb, gboolean accumulate,
    float *y, int ldy)
{
  g_return_if_fail (m > 0 && n > 0 && k > 0);

  pp_cpu_gemm (trans_a, trans_b, m, n, k, 1.0f, a, lda, b, ldb,
      accumulate ? 1.0f : 0.0f, y, ldy);
}
