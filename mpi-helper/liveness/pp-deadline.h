/* ppdiffuse — run a call that may block (MPI_Comm_spawn, MPI_Comm_disconnect)
 * on a helper thread and give up on it at a deadline.
 *
 * On timeout the helper thread is abandoned: it keeps @data alive and frees
 * it with @free_data if the call ever returns. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef gboolean (*PpBlockingFunc) (gpointer data, GError ** error);

gboolean pp_run_with_deadline (const gchar * what, PpBlockingFunc func,
                               gpointer data, GDestroyNotify free_data,
                               guint timeout_ms, GError ** error);

G_END_DECLS
