/* ppdiffuse benchmarks — the process's resident memory. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* VmRSS of this process in kB, from /proc/self/status; 0 where it cannot
 * be read (a benchmark reports what it can rather than fail). */
guint64 pp_bench_rss_kb (void);

G_END_DECLS
