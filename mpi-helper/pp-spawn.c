/* ppdiffuse — spawning the workers: find the worker executable, start W
 * of them with MPI_Comm_spawn under a deadline (watching this host's
 * processes meanwhile, so that a failed spawn names the rank that died
 * first), and merge them with rank 0 into the world communicator. */
#include "pp-mesh-private.h"
#include "pp-deadline.h"
#include "pp-error.h"
#include "pp-proc.h"

#ifndef PPDIFFUSE_WORKER_PATH
#error "PPDIFFUSE_WORKER_PATH must name the installed ppdiffuse-worker"
#endif

const gchar *
pp_spawn_installed_worker (void)
{
  return PPDIFFUSE_WORKER_PATH;
}

gchar *
pp_spawn_resolve_worker (const gchar * configured, GError ** error)
{
  const gchar *path = configured;
  const gchar *origin = "the worker property";

  if (path == NULL || *path == '\0') {
    path = g_getenv (PP_WORKER_ENV);
    origin = "$" PP_WORKER_ENV;
  }
  if (path == NULL || *path == '\0') {
    path = PPDIFFUSE_WORKER_PATH;
    origin = "the installed default";
  }
  if (!g_file_test (path, G_FILE_TEST_IS_REGULAR)
      || !g_file_test (path, G_FILE_TEST_IS_EXECUTABLE)) {
    g_set_error (error, PP_ERROR, PP_ERROR_SPAWN,
        "worker executable '%s' (from %s) does not exist or is not "
        "executable; install ppdiffuse or set the worker property / $%s",
        path, origin, PP_WORKER_ENV);
    return NULL;
  }
  return g_strdup (path);
}

typedef struct
{
  gchar *worker;
  gchar *hosts;
  gchar *hostfile;
  guint n_workers;
  MPI_Comm inter;
  MPI_Comm world;
} SpawnCall;

static void
spawn_call_free (gpointer data)
{
  SpawnCall *call = data;

  g_free (call->worker);
  g_free (call->hosts);
  g_free (call->hostfile);
  g_free (call);
}

static gboolean
spawn_blocking (gpointer data, GError ** error)
{
  SpawnCall *call = data;
  g_autofree int *codes = g_new0 (int, call->n_workers);
  MPI_Info info;
  gboolean ok;

  MPI_Info_create (&info);
  /* Workers may share cores with rank 0 (and each other). */
  MPI_Info_set (info, "map_by", ":OVERSUBSCRIBE");
  if (call->hosts != NULL)
    MPI_Info_set (info, "host", call->hosts);
  if (call->hostfile != NULL)
    MPI_Info_set (info, "hostfile", call->hostfile);
  ok = pp_mpi_check (MPI_Comm_spawn (call->worker, MPI_ARGV_NULL,
          (int) call->n_workers, info, 0, MPI_COMM_SELF, &call->inter, codes),
      "MPI_Comm_spawn", error);
  MPI_Info_free (&info);
  for (guint i = 0; ok && i < call->n_workers; i++)
    ok = pp_mpi_check (codes[i], "MPI_Comm_spawn of a worker", error);
  if (!ok)
    return FALSE;
  MPI_Comm_set_errhandler (call->inter, MPI_ERRORS_RETURN);
  if (!pp_mpi_check (MPI_Intercomm_merge (call->inter, 0, &call->world),
          "MPI_Intercomm_merge", error))
    return FALSE;
  MPI_Comm_set_errhandler (call->world, MPI_ERRORS_RETURN);
  return TRUE;
}

/* Watches the spawned workers of this host while MPI_Comm_spawn runs, so
 * that a failed spawn can name the rank that went first: Open MPI ends the
 * other processes of the job soon after one dies before MPI_Init. */
typedef struct
{
  gchar *worker;
  guint n;
  gint64 *last_seen_us;         /* per spawned rank; 0: never seen */
  gint64 *pids;                 /* per spawned rank, as last seen */
  gint stop;                    /* atomic */
} SpawnWatch;

#define SPAWN_WATCH_PERIOD_US 20000
/* A rank last seen this much before the others died first. */
#define SPAWN_WATCH_FIRST_US 100000

static gpointer
spawn_watch_thread (gpointer data)
{
  SpawnWatch *sw = data;
  g_autofree gint64 *pids = g_new0 (gint64, sw->n);

  while (!g_atomic_int_get (&sw->stop)) {
    const gint64 now = g_get_monotonic_time ();

    pp_proc_find_spawned (sw->worker, sw->n, pids);
    for (guint i = 0; i < sw->n; i++)
      if (pids[i] != 0) {
        sw->last_seen_us[i] = now;
        sw->pids[i] = pids[i];
      }
    g_usleep (SPAWN_WATCH_PERIOD_US);
  }
  return NULL;
}

/* "worker rank 2 (pid p on h) died first, …, before MPI_Init; " for the
 * ranks that were never seen, or gone well before the others: they lead
 * the error; "" when that cannot be told (a remote host, or nothing seen
 * at all). */
static gchar *
spawn_culprits (const SpawnWatch * sw)
{
  GString *s = g_string_new (NULL);
  gint64 latest = 0;

  for (guint i = 0; i < sw->n; i++)
    latest = MAX (latest, sw->last_seen_us[i]);
  if (latest == 0)
    return g_string_free (s, FALSE);
  for (guint i = 0; i < sw->n; i++) {
    if (sw->last_seen_us[i] == 0)
      g_string_append_printf (s, "worker rank %u never started or died at "
          "once, before MPI_Init; ", i + 1);
    else if (latest - sw->last_seen_us[i] > SPAWN_WATCH_FIRST_US)
      g_string_append_printf (s, "worker rank %u (pid %" G_GINT64_FORMAT
          " on %s) died first, %" G_GINT64_FORMAT " ms before the others, "
          "before MPI_Init; ", i + 1, sw->pids[i], g_get_host_name (),
          (latest - sw->last_seen_us[i]) / 1000);
  }
  return g_string_free (s, FALSE);
}

gboolean
pp_spawn_workers (PpMesh * mesh, const PpMeshConfig * config,
    const gchar * worker, GError ** error)
{
  SpawnCall *call = g_new0 (SpawnCall, 1);
  GError *local = NULL;

  call->worker = g_strdup (worker);
  call->hosts = config->hosts && *config->hosts ? g_strdup (config->hosts) : NULL;
  call->hostfile = config->hostfile && *config->hostfile
      ? g_strdup (config->hostfile) : NULL;
  call->n_workers = config->n_workers;
  call->inter = call->world = MPI_COMM_NULL;
  SpawnWatch watch = { (gchar *) worker, config->n_workers,
    g_new0 (gint64, config->n_workers), g_new0 (gint64, config->n_workers), 0
  };
  GThread *watcher = g_thread_new ("pp-spawn-watch", spawn_watch_thread,
      &watch);
  gboolean spawned;

  /* The spawn call holds the call alive; the extra ref is ours. */
  spawned = pp_run_with_deadline ("spawning the workers (MPI_Comm_spawn)",
      spawn_blocking, call, NULL, config->timeout_ms, &local);
  g_atomic_int_set (&watch.stop, 1);
  g_thread_join (watcher);
  if (!spawned) {
    g_autofree gchar *culprits = spawn_culprits (&watch);

    g_set_error (error, PP_ERROR, PP_ERROR_SPAWN,
        "%scould not start %u workers from '%s': %s. Check that the worker "
        "runs on its own (ldd), that Open MPI works, and the hosts/hostfile "
        "settings", culprits, config->n_workers, worker, local->message);
    g_error_free (local);
    g_free (watch.last_seen_us);
    g_free (watch.pids);
    /* A spawn still blocked in MPI keeps using call: leave it be. */
    return FALSE;
  }
  g_free (watch.last_seen_us);
  g_free (watch.pids);
  mesh->inter = call->inter;
  mesh->world = call->world;
  spawn_call_free (call);
  return TRUE;
}
