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

/* What a user does once the daemon is gone. */
#define PP_DAEMON_GONE_ADVICE "restart the application (Open MPI 4.1 " \
  "starts no more workers in this process)"

/* After MPI is initialised, on rank 0: registers the handler (once per
 * process).  When PMIx refuses it, a warning says so: the process then
 * still ends with its daemon, as before. */
void      pp_daemon_loss_guard      (void);
/* A sentence saying that Open MPI's daemon on this host is gone — its
 * crash as the launcher saw it (pp_launcher_daemon_crash), or its process
 * no longer running, or the lost connection — or NULL while it serves.
 * The first of them found, by this or by PMIx's event, is also logged
 * once as a warning. */
gchar    *pp_daemon_gone            (void);

G_END_DECLS
