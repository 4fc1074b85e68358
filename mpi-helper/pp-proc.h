/* ppdiffuse — process liveness for peers on this host. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* TRUE when @host names this machine (pids on it can be checked). */
gboolean pp_proc_is_local   (const gchar * host);
/* FALSE once the process has exited (zombies count as exited). */
gboolean pp_proc_is_running (gint64 pid);
/* Sends SIGKILL; TRUE when a signal was delivered. */
gboolean pp_proc_kill       (gint64 pid);

G_END_DECLS
