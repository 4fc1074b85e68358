/* ppdiffuse — MPI start-up on rank 0: initialise MPI with
 * MPI_THREAD_MULTIPLE under a deadline, or accept the application's own
 * initialisation if it provides that level. */
#include "pp-mesh-private.h"
#include "pp-deadline.h"
#include "pp-error.h"
#include "pp-log.h"

#include <unistd.h>

static GMutex mpi_init_lock;

/* The thread level MPI_Init_thread provided (static: a call abandoned at
 * its deadline may still write it), and whether such a call is still
 * running somewhere: MPI must then not be initialised a second time.
 * Both under mpi_init_lock, except that an abandoned call writes
 * init_provided whenever it returns: it is read only after a call that
 * finished in time. */
static int init_provided;
static gboolean init_abandoned;

/* MPI_Init_thread has no timeout of its own: run it where a deadline can
 * abandon it. */
static gboolean
init_blocking (gpointer data, GError ** error)
{
  return pp_mpi_check (MPI_Init_thread (NULL, NULL, MPI_THREAD_MULTIPLE,
          &init_provided), "MPI_Init_thread", error);
}

gboolean
pp_mpi_start (guint timeout_ms, GError ** error)
{
  int initialized = 0, finalized = 0, provided = 0;
  gboolean ok = TRUE;

  g_mutex_lock (&mpi_init_lock);
  MPI_Finalized (&finalized);
  MPI_Initialized (&initialized);
  if (finalized) {
    g_set_error (error, PP_ERROR, PP_ERROR_MPI,
        "MPI was already finalized in this process; it cannot be restarted");
    ok = FALSE;
  } else if (initialized) {
    MPI_Query_thread (&provided);
  } else {
    if (geteuid () == 0 && g_getenv ("OMPI_ALLOW_RUN_AS_ROOT") == NULL)
      PP_WARN ("running as root without OMPI_ALLOW_RUN_AS_ROOT: if Open MPI "
          "refuses to start, set OMPI_ALLOW_RUN_AS_ROOT=1 and "
          "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
    if (init_abandoned) {
      g_set_error (error, PP_ERROR, PP_ERROR_MPI, "an earlier MPI_Init_thread "
          "never finished; restart the application");
      ok = FALSE;
    } else {
      ok = pp_run_with_deadline ("initialising MPI (MPI_Init_thread)",
          init_blocking, NULL, NULL, timeout_ms, error);
      init_abandoned = !ok && g_error_matches (*error, PP_ERROR,
          PP_ERROR_TIMEOUT);
      if (ok)
        provided = init_provided;
    }
    if (ok)
      MPI_Comm_set_errhandler (MPI_COMM_SELF, MPI_ERRORS_RETURN);
  }
  if (ok && provided < MPI_THREAD_MULTIPLE) {
    g_set_error (error, PP_ERROR, PP_ERROR_MPI,
        "MPI provides thread level %d, ppdiffuse needs MPI_THREAD_MULTIPLE "
        "(%d); initialise MPI with MPI_Init_thread (MPI_THREAD_MULTIPLE)",
        provided, MPI_THREAD_MULTIPLE);
    ok = FALSE;
  }
  g_mutex_unlock (&mpi_init_lock);
  return ok;
}
