/* ppdiffuse — MPI start-up on rank 0: initialise MPI with
 * MPI_THREAD_MULTIPLE under a deadline, or accept the application's own
 * initialisation if it provides that level.
 *
 * MPI_Init_thread has no timeout and can run once per process.  It runs
 * in a thread of its own, started by the first start that needs it; a
 * start waits for it under its own deadline, and one that gives up leaves
 * it running: a later start waits for the same call or uses its result.
 * An application therefore never has to restart because one start timed
 * out, only when MPI_Init_thread itself failed. */
#include "pp-start-room.h"
#include "pp-daemon-loss.h"
#include "pp-error.h"
#include "pp-launcher.h"
#include "pp-log.h"
#include "pp-ompi-help.h"
#include "pp-sigpipe.h"

#include <string.h>
#include <unistd.h>

typedef enum
{
  INIT_NOT_STARTED,
  INIT_RUNNING,
  INIT_DONE,
} InitState;

/* All under init_lock. */
static GMutex init_lock;
static GCond init_done;
static InitState init_state;
static gboolean init_ok;
static int init_provided;
static GError *init_error;
static gint64 init_started_us;

static guint
test_env_ms (const gchar * name, guint fallback)
{
#ifdef PP_FAULT_INJECTION
  const gchar *value = g_getenv (name);
  guint64 ms;

  if (value != NULL && g_ascii_string_to_unsigned (value, 10, 0, G_MAXUINT,
          &ms, NULL))
    return (guint) ms;
#endif
  return fallback;
}

guint
pp_mpi_start_timeout_ms (guint timeout_ms)
{
  return MAX (timeout_ms, test_env_ms (PP_TEST_START_FLOOR_ENV,
          PP_MESH_START_FLOOR_MS));
}

/* Whether any of Open MPI's parameters @names is set outside ppdiffuse:
 * in the environment, or in one of the parameter files Open MPI 4.1 reads
 * (the user's, then the system's, unless mca_base_param_files names
 * others, or "none"). */
static gboolean
ompi_params_chosen (const gchar * const *names)
{
  const gchar *files_env = g_getenv ("OMPI_MCA_mca_base_param_files");
  g_auto (GStrv) files = NULL;
  gboolean chosen = FALSE;

  for (guint n = 0; names[n] != NULL; n++) {
    g_autofree gchar *env = g_strconcat ("OMPI_MCA_", names[n], NULL);

    if (g_getenv (env) != NULL)
      return TRUE;
  }
  if (g_strcmp0 (files_env, "none") == 0)
    return FALSE;
  if (files_env != NULL) {
    files = g_strsplit_set (files_env, ",:", -1);
  } else {
    files = g_new0 (gchar *, 3);
    files[0] = g_build_filename (g_get_home_dir (), ".openmpi",
        "mca-params.conf", NULL);
    files[1] = g_strdup ("/etc/openmpi/openmpi-mca-params.conf");
  }
  for (guint i = 0; files[i] != NULL && !chosen; i++) {
    g_autofree gchar *text = NULL;
    g_auto (GStrv) lines = NULL;

    if (!g_file_get_contents (files[i], &text, NULL, NULL))
      continue;
    lines = g_strsplit (text, "\n", -1);
    for (guint j = 0; lines[j] != NULL && !chosen; j++) {
      gchar *equals = strchr (lines[j], '=');

      if (equals == NULL)
        continue;
      *equals = '\0';
      chosen = g_strv_contains (names, g_strstrip (lines[j]));
    }
  }
  return chosen;
}

/* Open MPI's TCP transport listens on the first free port from 1024 up: a
 * process that starts takes the ports of one that just ended.  A worker of
 * an ended application (rank 0 killed, its workers not yet gone) then
 * reaches a process of the next one when it calls its dead peer, which
 * warns of a connection it cannot place (pp-ompi-help.h).  With a lowest
 * port of 0 the kernel picks each port from its ephemeral range, where
 * that practically never happens.  A port or range chosen for a firewall
 * stays, per address family.  Only on a mesh of this host: Open MPI's
 * launcher hands the environment's parameters to the daemons of other
 * hosts, where they would override those hosts' own parameter files. */
static void
tcp_ports_default (void)
{
  const gchar *const v4[] = { PP_OMPI_TCP_PORT_MIN_V4,
    PP_OMPI_TCP_PORT_RANGE_V4, NULL
  };
  const gchar *const v6[] = { PP_OMPI_TCP_PORT_MIN_V6,
    PP_OMPI_TCP_PORT_RANGE_V6, NULL
  };

  if (!ompi_params_chosen (v4))
    g_setenv ("OMPI_MCA_" PP_OMPI_TCP_PORT_MIN_V4, "0", FALSE);
  if (!ompi_params_chosen (v6))
    g_setenv ("OMPI_MCA_" PP_OMPI_TCP_PORT_MIN_V6, "0", FALSE);
}

static gpointer
init_thread (gpointer unused)
{
  const guint delay_ms = test_env_ms (PP_TEST_INIT_DELAY_ENV, 0);
  GError *error = NULL;
  int provided = 0;
  gboolean ok;

  if (delay_ms > 0)
    g_usleep ((gulong) delay_ms * 1000);
  /* Open MPI's daemon, forked in here, keeps what is standard error now. */
  pp_launcher_capture_begin ();
  ok = pp_mpi_check (MPI_Init_thread (NULL, NULL, MPI_THREAD_MULTIPLE,
          &provided), "MPI_Init_thread", &error);
  pp_launcher_capture_end ();
  if (ok) {
    MPI_Comm_set_errhandler (MPI_COMM_SELF, MPI_ERRORS_RETURN);
    pp_daemon_loss_guard ();
    pp_ompi_help_here (pp_launcher_say);
  }

  g_mutex_lock (&init_lock);
  init_ok = ok;
  init_provided = provided;
  init_error = error;
  init_state = INIT_DONE;
  g_cond_broadcast (&init_done);
  g_mutex_unlock (&init_lock);
  if (init_started_us > 0)
    PP_INFO ("MPI initialised in %" G_GINT64_FORMAT " ms",
        (g_get_monotonic_time () - init_started_us) / 1000);
  return NULL;
}

gboolean
pp_mpi_start (guint timeout_ms, gboolean remote_hosts, GError ** error)
{
  const guint wait_ms = pp_mpi_start_timeout_ms (timeout_ms);
  const gint64 deadline = g_get_monotonic_time () + (gint64) wait_ms * 1000;
  int initialized = 0, finalized = 0, provided = 0;
  gboolean ok = TRUE;

  g_mutex_lock (&init_lock);
  if (init_state == INIT_NOT_STARTED) {
    MPI_Finalized (&finalized);
    MPI_Initialized (&initialized);
    if (finalized) {
      g_set_error (error, PP_ERROR, PP_ERROR_MPI, "MPI was already "
          "finalized in this process; it cannot be restarted");
      ok = FALSE;
    } else if (initialized) {
      /* The application's own initialisation. */
      MPI_Query_thread (&provided);
    } else {
      if (geteuid () == 0 && g_getenv ("OMPI_ALLOW_RUN_AS_ROOT") == NULL)
        PP_WARN ("running as root without OMPI_ALLOW_RUN_AS_ROOT: if Open "
            "MPI refuses to start, set OMPI_ALLOW_RUN_AS_ROOT=1 and "
            "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
      /* Open MPI 4.1's daemon ends every process of the job, rank 0 (the
       * application) included, when it loses a daemon on another host
       * ("ORTE has lost communication with a remote daemon … will
       * terminate the job").  With recovery on it marks that host down and
       * leaves the processes be: the mesh's heartbeats then report the
       * workers lost there, as for any dead worker.  But recovery also
       * silences its report of a worker that exits before MPI_Init, which
       * ends a failed start on one host at once (pp-spawn.c); so it is on
       * only when the first mesh of the process spans hosts.  Set before
       * MPI_Init_thread forks that daemon (MPI_Init sets variables of its
       * own there too); an application's own setting wins. */
      if (remote_hosts && g_getenv (PP_OMPI_RECOVERY_ENV) == NULL)
        g_setenv (PP_OMPI_RECOVERY_ENV, "1", FALSE);
      /* PMIx 4's shared-memory store of job data (gds ds21, the default
       * of Open MPI 4.1 with an external PMIx, Debian 12's pair) leaves
       * about one MPI_Comm_spawn in a hundred waiting for good: the
       * parent in PMIx_Lookup, the children in MPI_Init's fence
       * (openpmix/openpmix#2735).  With the hash store none did in
       * several hundred, and each spawned job leaves a third of the
       * memory behind in rank 0 (docs/perf.md, mpi-spawn-rss).  The
       * daemon forked in MPI_Init_thread and the workers it starts
       * inherit the setting; an application's own choice wins. */
      if (g_getenv (PP_PMIX_GDS_ENV) == NULL)
        g_setenv (PP_PMIX_GDS_ENV, PP_PMIX_GDS, FALSE);
      if (!remote_hosts)
        tcp_ports_default ();
      init_state = INIT_RUNNING;
      init_started_us = g_get_monotonic_time ();
      g_thread_unref (pp_thread_new ("pp-mpi-init", init_thread, NULL));
    }
  }
  if (init_state != INIT_NOT_STARTED) {
    while (init_state == INIT_RUNNING)
      if (!g_cond_wait_until (&init_done, &init_lock, deadline))
        break;
    if (init_state == INIT_RUNNING) {
      g_set_error (error, PP_ERROR, PP_ERROR_TIMEOUT,
          "initialising MPI (MPI_Init_thread) did not finish within %u ms "
          "(timeout-ms, at least %u ms for start-up); it goes on in the "
          "background and the next start uses it. Check that Open MPI "
          "works on this machine (ompi_info, mpirun -n 1 hostname)",
          wait_ms, pp_mpi_start_timeout_ms (0));
      ok = FALSE;
    } else if (!init_ok) {
      g_set_error (error, PP_ERROR, PP_ERROR_MPI, "%s; MPI can be "
          "initialised only once in a process: restart the application "
          "once Open MPI works (ompi_info, mpirun -n 1 hostname)",
          init_error->message);
      ok = FALSE;
    } else {
      provided = init_provided;
    }
  }
  if (ok && provided < MPI_THREAD_MULTIPLE) {
    g_set_error (error, PP_ERROR, PP_ERROR_MPI,
        "MPI provides thread level %d, ppdiffuse needs MPI_THREAD_MULTIPLE "
        "(%d); initialise MPI with MPI_Init_thread (MPI_THREAD_MULTIPLE)",
        provided, MPI_THREAD_MULTIPLE);
    ok = FALSE;
  }
  g_mutex_unlock (&init_lock);
  return ok;
}
