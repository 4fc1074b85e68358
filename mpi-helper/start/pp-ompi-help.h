/* ppdiffuse — Open MPI's warnings printed where they arise.
 *
 * Open MPI 4.1 sends a process's help message (a framed WARNING, such as a
 * TCP connection it could not place) to its daemon, through PMIx's log
 * channel.  The daemon a singleton rank 0 forks (the PMIx server of all
 * its workers) crashes handling it (pmix_server_log_fn, a use of freed
 * memory in orte_rml_oob_send_buffer_nb): one harmless warning from any
 * worker ended the whole mesh, and the message itself was lost.  So once
 * MPI is initialised, rank 0 and each worker print Open MPI's help
 * messages on their own standard error, which reaches rank 0's like any
 * other output of theirs. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* Where a help message goes, whole and rendered. */
typedef void (*PpOmpiHelpSink) (const gchar * text);

/* After MPI_Init: this process's Open MPI help messages go to @sink, or
 * to its standard error when NULL (rank 0 hands them to its launcher's
 * capture, pp_launcher_say, so that its errors quote them as they quoted
 * the daemon's copy).  Does nothing (and says why in the debug log) where
 * the MPI is not Open MPI 4's; TRUE when the messages now stay here. */
gboolean pp_ompi_help_here (PpOmpiHelpSink sink);

G_END_DECLS
