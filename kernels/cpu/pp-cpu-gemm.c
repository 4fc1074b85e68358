/* ppdiffuse — GEMM for the CPU ops: OpenBLAS on one thread per block of C.
 *
 * The blocks are the rows or the columns of C, whichever dimension is
 * longer, as many as the shape is worth (at most PP_CPU_GEMM_BLOCKS, the
 * same on any number of threads), cut at multiples of PP_CPU_GEMM_SPLIT_ALIGN: whole register
 * tiles of OpenBLAS's kernels, so that a block edge never sends values
 * through an edge kernel that the whole GEMM would not use, and the result
 * is the same bytes on any number of threads.  Each thread packs
 * only the operand parts its block needs, and no thread waits on another
 * inside the GEMM. */
#include "pp-cpu-parallel.h"
#include "pp-cpu-ops.h"

#include <cblas.h>

typedef struct
{
  gboolean trans_a, trans_b, split_rows;
  int m, n, k, lda, ldb, ldc, block;
  float alpha, beta;
  const float *a, *b;
  float *c;
} Gemm;

static void
gemm_one (const Gemm * g, int m, int n, const float *a, const float *b,
    float *c)
{
  cblas_sgemm (CblasRowMajor, g->trans_a ? CblasTrans : CblasNoTrans,
      g->trans_b ? CblasTrans : CblasNoTrans, m, n, g->k, g->alpha, a,
      g->lda, b, g->ldb, g->beta, c, g->ldc);
}

/* Items are blocks of rows (split_rows) or columns of C. */
static void
gemm_range (size_t begin, size_t end, gpointer data)
{
  const Gemm *g = data;

  for (size_t i = begin; i < end; i++) {
    const int lo = (int) i * g->block;

    if (g->split_rows) {
      const int rows = MIN (g->block, g->m - lo);
      const float *a = g->trans_a ? g->a + lo : g->a + (size_t) lo * g->lda;

      gemm_one (g, rows, g->n, a, g->b, g->c + (size_t) lo * g->ldc);
    } else {
      const int cols = MIN (g->block, g->n - lo);
      const float *b = g->trans_b ? g->b + (size_t) lo * g->ldb : g->b + lo;

      gemm_one (g, g->m, cols, g->a, b, g->c + lo);
    }
  }
}

void
pp_cpu_gemm (gboolean trans_a, gboolean trans_b, int m, int n, int k,
    float alpha, const float *a, int lda, const float *b, int ldb,
    float beta, float *c, int ldc)
{
  const double flops = 2.0 * m * n * k;
  Gemm g = { trans_a, trans_b, m >= n, m, n, k, lda, ldb, ldc, 0, alpha,
    beta, a, b, c
  };
  const int len = g.split_rows ? m : n;
  /* The blocks depend on the shape alone, never on the team size, so
   * that OpenBLAS sees the same calls on any number of threads (its
   * small-matrix kernels, picked by size, sum in another order). */
  guint blocks = (guint) MIN ((double) PP_CPU_GEMM_BLOCKS,
      flops / PP_CPU_GEMM_GRAIN_FLOPS);

  g_return_if_fail (m > 0 && n > 0 && k > 0);
  /* Also sets OpenBLAS to one thread before its first call here. */
  pp_cpu_parallel_threads ();
  pp_cpu_blas_advise ();

  blocks = MIN (blocks, (guint) ((len + PP_CPU_GEMM_SPLIT_ALIGN - 1)
          / PP_CPU_GEMM_SPLIT_ALIGN));
  if (blocks < 2) {
    pp_cpu_path_add (PP_CPU_PATH_GEMM_WHOLE, 1);
    gemm_one (&g, m, n, a, b, c);
    return;
  }
  pp_cpu_path_add (g.split_rows ? PP_CPU_PATH_GEMM_SPLIT_ROWS
      : PP_CPU_PATH_GEMM_SPLIT_COLS, 1);
  g.block = (len + (int) blocks - 1) / (int) blocks;
  g.block = (g.block + PP_CPU_GEMM_SPLIT_ALIGN - 1) / PP_CPU_GEMM_SPLIT_ALIGN
      * PP_CPU_GEMM_SPLIT_ALIGN;
  blocks = (guint) ((len + g.block - 1) / g.block);
  pp_cpu_parallel_for (blocks, 1, gemm_range, &g);
}
