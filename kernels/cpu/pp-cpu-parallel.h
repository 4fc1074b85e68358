/* ppdiffuse — parallel for-loop of the CPU ops (internal). */
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
/* Threads a parallel loop uses (the caller included). */
guint pp_cpu_parallel_threads (void);

G_END_DECLS
