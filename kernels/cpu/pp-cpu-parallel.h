/* ppdiffuse — parallel for-loop and GEMM of the CPU ops (internal). */
#pragma once

#include <glib.h>
#include <stddef.h>

G_BEGIN_DECLS

/* Processes items [begin, end). */
typedef void (*PpCpuRangeFunc) (size_t begin, size_t end, gpointer data);

/* Calls @func on disjoint ranges covering [0, n), in parallel when there
 * are at least two ranges of @min_chunk items (choose it so that one range
 * is worth ~10 µs or more); returns when all are done.  @func must not
 * depend on how the items are split. */
void pp_cpu_parallel_for (size_t n, size_t min_chunk, PpCpuRangeFunc func,
    gpointer data);
/* The same with every chunk but the last a multiple of @align items: an
 * element-wise loop split at whole vector blocks sends every element but the
 * array's own tail through the vector loop, as one thread would. */
void pp_cpu_parallel_for_aligned (size_t n, size_t min_chunk, size_t align,
    PpCpuRangeFunc func, gpointer data);
/* Threads a parallel loop uses (the caller included). */
guint pp_cpu_parallel_threads (void);

/* Row-major C [m, n] (row stride ldc) = alpha · op(A) · op(B) + beta · C,
 * op(A) [m, k] being A or Aᵀ as trans_a says (same for B [k, n]), like
 * cblas_sgemm.  Large enough products are split into one block of rows or
 * columns of C per thread, each a single-threaded OpenBLAS call. */
void pp_cpu_gemm (gboolean trans_a, gboolean trans_b, int m, int n, int k,
    float alpha, const float *a, int lda, const float *b, int ldb,
    float beta, float *c, int ldc);

G_END_DECLS
