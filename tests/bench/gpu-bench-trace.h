/* ppdiffuse — gpu-bench's kernel traces: a trace's kernels by name
 * (gpu-bench-trace.c). */
#pragma once

#include "pp-backend-impl.h"

G_BEGIN_DECLS

/* A kernel name's calls and device time in a trace. */
typedef struct
{
  gchar *name;                  /* pp_kernel_short_name's */
  guint calls;
  guint64 ns;
} PpTraceRow;

/* @spans (PpKernelSpan, pp_backend_trace's) by their kernels' short
 * names, in the order each name first ran; g_array_unref frees the rows
 * and their names. */
GArray   *pp_trace_rows (GArray * spans);

G_END_DECLS
