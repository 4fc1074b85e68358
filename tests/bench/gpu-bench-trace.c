/* ppdiffuse — gpu-bench's kernel traces: a trace's kernels by name. */
#include "gpu-bench-trace.h"

#include "pp-kernel-names.h"

static void
row_clear (gpointer data)
{
  g_free (((PpTraceRow *) data)->name);
}

GArray *
pp_trace_rows (GArray * spans)
{
  GArray *rows = g_array_new (FALSE, FALSE, sizeof (PpTraceRow));
  g_autoptr (GHashTable) at = g_hash_table_new (g_str_hash, g_str_equal);

  g_array_set_clear_func (rows, row_clear);
  for (guint i = 0; i < spans->len; i++) {
    const PpKernelSpan *k = &g_array_index (spans, PpKernelSpan, i);
    g_autofree gchar *name = pp_kernel_short_name (k->name);
    gpointer index;
    PpTraceRow *row;

    if (!g_hash_table_lookup_extended (at, name, NULL, &index)) {
      const PpTraceRow fresh = { g_steal_pointer (&name), 0, 0 };

      index = GUINT_TO_POINTER (rows->len);
      g_array_append_val (rows, fresh);
      g_hash_table_insert (at, g_array_index (rows, PpTraceRow,
              rows->len - 1).name, index);
    }
    row = &g_array_index (rows, PpTraceRow, GPOINTER_TO_UINT (index));
    row->calls++;
    row->ns += k->end_ns - k->start_ns;
  }
  return rows;
}
