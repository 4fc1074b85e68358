/* ppdiffuse — rank 0 outlives Open MPI's daemon (pp-daemon-loss.h). */
#include "pp-daemon-loss.h"
#include "pp-launcher.h"
#include "pp-log.h"
#include "pp-proc.h"

#include <pmix.h>

static gint lost;

/* Says once that the daemon is gone, @how rank 0 learnt it first: PMIx's
 * event, or the daemon's process found dead (a worker that went with it
 * may end the stream before PMIx's thread has told). */
static void
note_lost (const gchar * how)
{
  if (g_atomic_int_compare_and_exchange (&lost, 0, 1))
    PP_WARN ("this process lost its connection to Open MPI's daemon (%s): "
        "its workers lose it too; Open MPI starts no more workers in this "
        "process", how);
}

/* PMIx's progress thread: the connection to the daemon is gone.  Ending
 * the chain here keeps Open MPI's default handler (an abort of this
 * process) from running. */
static void
on_lost_connection (size_t id, pmix_status_t status,
    const pmix_proc_t * source, pmix_info_t info[], size_t ninfo,
    pmix_info_t results[], size_t nresults,
    pmix_event_notification_cbfunc_fn_t done, void *done_data)
{
  note_lost (PMIx_Error_string (status));
  if (done != NULL)
    done (PMIX_EVENT_ACTION_COMPLETE, NULL, 0, NULL, NULL, done_data);
}

void
pp_daemon_loss_guard (void)
{
  static gsize once;

  if (g_once_init_enter (&once)) {
    pmix_status_t code = PMIX_ERR_LOST_CONNECTION;
    pmix_info_t info[2];
    bool first = true;
    pmix_status_t rc;

    PMIX_INFO_LOAD (&info[0], PMIX_EVENT_HDLR_FIRST, &first, PMIX_BOOL);
    PMIX_INFO_LOAD (&info[1], PMIX_EVENT_HDLR_NAME, "ppdiffuse rank 0",
        PMIX_STRING);
    /* Without a callback the registration completes before it returns:
     * its reference (≥ 0) or an error. */
    rc = PMIx_Register_event_handler (&code, 1, info, 2, on_lost_connection,
        NULL, NULL);
    if (rc < 0)
      PP_WARN ("could not ask PMIx to report a lost Open MPI daemon (%s): "
          "should the daemon die, Open MPI ends this process",
          PMIx_Error_string (rc));
    PMIX_INFO_DESTRUCT (&info[0]);
    PMIX_INFO_DESTRUCT (&info[1]);
    g_once_init_leave (&once, 1);
  }
}

gchar *
pp_daemon_gone (void)
{
  gchar *crash = pp_launcher_daemon_crash ();
  const gint64 pid = pp_launcher_daemon_pid ();

  if (crash != NULL) {
    note_lost ("it crashed");
    return crash;
  }
  if (pid > 0 && !pp_proc_is_running (pid)) {
    note_lost ("its process is gone");
    return g_strdup_printf ("Open MPI's daemon on %s (pid %" G_GINT64_FORMAT
        ", started by MPI_Init in this process) is gone", g_get_host_name (),
        pid);
  }
  if (g_atomic_int_get (&lost))
    return g_strdup_printf ("this process lost its connection to Open MPI's "
        "daemon on %s", g_get_host_name ());
  return NULL;
}
