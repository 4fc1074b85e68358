/* ppdiffuse — process liveness for peers on this host, and this
 * process's own CPU time. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* TRUE when @host names this machine (pids on it can be checked). */
gboolean pp_proc_is_local   (const gchar * host);
/* FALSE once the process has exited (zombies count as exited). */
gboolean pp_proc_is_running (gint64 pid);
/* Sends SIGKILL; TRUE when a signal was delivered. */
gboolean pp_proc_kill       (gint64 pid);
/* Processes of this host that descend from this one and run @exe, with
 * the rank Open MPI gave each among the spawned (OMPI_COMM_WORLD_RANK):
 * @ranks[r] = pid of spawned rank r, 0 if none; r < @n. */
void     pp_proc_find_spawned (const gchar * exe, guint n, gint64 * ranks);
/* A child of this process whose command name is @comm (at most 15
 * characters, as /proc/PID/stat gives it), or 0. */
gint64   pp_proc_find_child   (const gchar * comm);
/* The CPU time this process has used since it started, user and system,
 * all its threads, in µs. */
guint64  pp_proc_cpu_us       (void);

G_END_DECLS
