/* ppdiffuse — rank 0 outlives Open MPI's daemon.
 *
 * When rank 0 initialises MPI itself, Open MPI forks a daemon that serves
 * it and its workers (their PMIx server).  Should that daemon die (Open
 * MPI 4.1 crashes in its own code now and then, pp-launcher.h), PMIx tells
 * this process it lost its connection, and Open MPI's default handler of
 * that event aborts the process: the application, exit status 195
 * (PMIx's -61), whatever it was doing.  The workers lose the daemon too and
 * exit, which the mesh reports as for any dead worker; the application
 * must live to see that error.  So rank 0 handles the event first and
 * ends its chain: nothing aborts, and the loss is remembered, for the
 * errors of the starts that follow (Open MPI 4.1 starts no more workers
 * without its daemon). */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* After MPI is initialised, on rank 0: registers the handler (once per
 * process).  FALSE, with a warning logged, when PMIx refuses it: the
 * process then still ends with its daemon, as before. */
gboolean  pp_daemon_loss_guard      (void);
/* Whether this process lost its connection to Open MPI's daemon, and when
 * (monotonic µs). */
gboolean  pp_daemon_lost            (gint64 * at_us);
/* A sentence saying that Open MPI's daemon on this host is gone — its
 * crash as the launcher saw it (pp_launcher_daemon_crash), or its process
 * no longer running, or the lost connection — or NULL while it serves. */
gchar    *pp_daemon_gone            (void);

G_END_DECLS
