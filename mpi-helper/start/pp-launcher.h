/* ppdiffuse — what Open MPI's launcher says, for rank 0's errors.
 *
 * When rank 0 initialises MPI itself, Open MPI forks a daemon (the
 * singleton's HNP) that launches the workers, runs the launch agent (ssh)
 * for other hosts and forwards the workers' output; its complaints
 * ("ssh: Could not resolve hostname …", "Child job 2 terminated
 * normally, but 1 process returned a non-zero exit code", a missing
 * library) go to its standard error.  A GUI application loses that text;
 * the element's error must carry it.  So while MPI_Init_thread forks that
 * daemon, this process's standard error is a pipe: the daemon keeps it,
 * and a thread of this module copies what it writes to the real standard
 * error, line by line, keeping the last lines for pp_launcher_text_since;
 * Open MPI's framed messages about a worker that exited, which the
 * element reports itself, go to the debug log instead
 * (pp_launcher_is_worker_exit_text).
 *
 * The thread lives as long as the daemon (until MPI_Finalize or the end of
 * the process): one per process, not per start. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Around MPI_Init_thread, in the thread that calls it: points standard
 * error at the pipe; _end points it back and starts the copying thread.
 * Without a pipe (out of descriptors) nothing is captured. */
void      pp_launcher_capture_begin (void);
void      pp_launcher_capture_end   (void);

/* One whole message of Open MPI's in this process (a help message, which
 * Open MPI 4.1 would have sent to its daemon, pp-ompi-help.h): kept with
 * the daemon's lines, for the errors below, and written to standard error
 * as the daemon's are (to the debug log when it is about a worker that
 * exited). */
void      pp_launcher_say           (const gchar * text);

/* A mark in the captured lines: what came after it is asked for below. */
guint64   pp_launcher_mark          (void);
/* Open MPI's own lines since @mark (ppdiffuse's log lines and Open MPI's
 * frame lines left out), joined by spaces; NULL when there were none. */
gchar    *pp_launcher_text_since    (guint64 mark);
/* TRUE when, since @mark, Open MPI printed a complete message that is an
 * error (a framed message that is no warning and says something failed),
 * with @at_us its monotonic time. */
gboolean  pp_launcher_failed_since  (guint64 mark, gint64 * at_us);

/* Open MPI 4.1's launcher does not recover once a daemon on another host
 * failed to start or was lost: its next spawn fails or aborts it.  The
 * first such message Open MPI printed in this process, or NULL. */
gchar    *pp_launcher_daemon_failure (void);

/* Open MPI's daemon on this host (the one MPI_Init forked: the pmix
 * server of the workers on this host, which launches and forwards them)
 * crashed: its signal handler printed "*** Process received signal ***".
 * Its workers lose it, and Open MPI 4.1 starts no more workers in this
 * process.  A sentence naming it and the signal, or NULL. */
gchar    *pp_launcher_daemon_crash  (void);
/* That daemon's pid, found when MPI was initialised here; 0 when none
 * was (the application initialised MPI, or it was not found). */
gint64    pp_launcher_daemon_pid    (void);

/* A crashed daemon can outlive its crash: Open MPI's signal handler may
 * deadlock (its backtrace's dlopen waiting on a malloc lock one of its
 * threads held when the signal came).  Once its crash is read, a thread
 * gives it PP_LAUNCHER_REAP_MS to end and then kills it, saying so, so
 * that no stuck daemon is left behind the application. */
#define PP_LAUNCHER_REAP_MS 5000
/* That wait and kill, for the tests: waits up to @grace_ms for @pid to
 * end; TRUE when it had to be killed. */
gboolean  pp_launcher_reap          (gint64 pid, guint grace_ms);

/* Pure helpers, for the tests: whether a framed message's text (lines
 * joined) is an error, and whether @line is one of Open MPI's frame lines
 * or a ppdiffuse log line. */
gboolean  pp_launcher_is_error_text (const gchar * text);
gboolean  pp_launcher_is_noise_line (const gchar * line);
/* The pid of an Open MPI signal handler's first line ("[host:pid] ***
 * Process received signal ***"), or 0 when @line is not one. */
gint64    pp_launcher_signalled_pid (const gchar * line);
/* Whether a framed message's text says a daemon failed or was lost. */
gboolean  pp_launcher_is_daemon_failure (const gchar * text);
/* Whether a framed message's text is Open MPI's about a worker that
 * exited: the copying thread sends those to the debug log, not to
 * standard error (the element reports the worker itself). */
gboolean  pp_launcher_is_worker_exit_text (const gchar * text);

G_END_DECLS
