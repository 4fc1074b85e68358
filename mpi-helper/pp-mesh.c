/* ppdiffuse — the worker mesh, rank 0 side: spawn, handshake, chunk
 * traffic, shutdown. */
#include "pp-mesh.h"
#include "pp-deadline.h"
#include "pp-error.h"
#include "pp-handshake.h"
#include "pp-heartbeat.h"
#include "pp-log.h"
#include "pp-proc.h"
#include "pp-queue.h"
#include "pp-recorder.h"
#include "pp-transport.h"

#include <string.h>
#include <unistd.h>

#ifndef PPDIFFUSE_WORKER_PATH
#error "PPDIFFUSE_WORKER_PATH must name the installed ppdiffuse-worker"
#endif

/* How long workers get to exit on their own after a clean shutdown before
 * they are killed.  Sanitizer builds set a longer one: a worker's exit
 * there includes the leak check. */
#ifndef PP_MESH_EXIT_GRACE_MS
#define PP_MESH_EXIT_GRACE_MS 3000
#endif
#define PP_MESH_EXIT_POLL_US 10000
/* The monitor's poll period for heartbeats and reports. */
#define PP_MESH_MONITOR_POLL_US 5000
/* A worker whose last heartbeat is older than this many heartbeat periods
 * is overdue: frozen, or its host unreachable. */
#define PP_MESH_OVERDUE_PERIODS 2

struct _PpMesh
{
  PpPlan *plan;
  guint timeout_ms;
  MPI_Comm inter;
  MPI_Comm world;
  PpWorkerInfo *workers;        /* n_workers, index = world rank - 1 */
  guint64 next_send_id;         /* chain thread only */
  guint64 next_recv_id;         /* src thread only */
  gint64 first_submit_us;
  gint64 last_return_us;
  gint failed;                  /* atomic: the mesh cannot be shut down cleanly */
  gchar *dump_dir;
  gboolean watchdog;
  guint32 last_epoch;           /* chain thread: of the last chunk sent */
  guint64 warm_ups;

  /* The monitor thread: heartbeats both ways, workers' reports. */
  GThread *monitor;
  gint monitor_stop;            /* atomic */
  MPI_Request *beat_reqs;       /* n_workers: rank 0's heartbeat in flight */
  GBytes **beat_bytes;
  GMutex lock;                  /* guards what follows */
  GError *fault;                /* the first failure seen, for every waiter */
  gint64 *heard_us;             /* n_workers: last heartbeat from each */
  PpHeartbeat *beats;           /* n_workers: the last of each */
};

static GMutex mpi_init_lock;

const gchar *
pp_mesh_installed_worker (void)
{
  return PPDIFFUSE_WORKER_PATH;
}

/* The thread level MPI_Init_thread provided (static: a call abandoned at
 * its deadline may still write it), and whether such a call is still
 * running somewhere: MPI must then not be initialised a second time. */
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

static gboolean
ensure_mpi (guint timeout_ms, GError ** error)
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

static gchar *
resolve_worker (const gchar * configured, GError ** error)
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

static gboolean
spawn_workers (PpMesh * mesh, const PpMeshConfig * config,
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

static gboolean
handshake (PpMesh * mesh, GError ** error)
{
  const PpHelloOptions options = { mesh->dump_dir };
  g_autoptr (GBytes) hello = pp_handshake_hello_new (mesh->plan, &options);
  g_autoptr (GHashTable) parity = NULL;
  gint64 deadline = pp_deadline_in_ms (mesh->timeout_ms);
  guint n = mesh->plan->n_workers;
  int world_size = 0;

  MPI_Comm_size (mesh->world, &world_size);
  if (world_size != (int) n + 1) {
    g_set_error (error, PP_ERROR, PP_ERROR_SPAWN,
        "the merged communicator has %d ranks, expected %u", world_size, n + 1);
    return FALSE;
  }
  for (guint r = 1; r <= n; r++) {
    PpWait w = { mesh->world, (gint) r, deadline, NULL, NULL };
    if (!pp_transport_send_bytes (&w, PP_TAG_HANDSHAKE, hello,
            "handshake hello", error))
      return FALSE;
  }
  for (guint r = 1; r <= n; r++) {
    PpWait w = { mesh->world, (gint) r, deadline, NULL, NULL };
    PpWorkerInfo *info = &mesh->workers[r - 1];
    g_autoptr (GBytes) reply = pp_transport_recv_bytes (&w,
        PP_TAG_HANDSHAKE_REPLY, PP_HANDSHAKE_MAX, "handshake reply", error);
    if (reply == NULL || !pp_handshake_reply_parse (reply, info, error))
      return FALSE;
    if (info->error != NULL) {
      g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
          "worker rank %u (pid %" G_GINT64_FORMAT " on %s) rejected the "
          "plan: %s", r, info->pid, info->host, info->error);
      return FALSE;
    }
    if (info->rank != (gint) r || info->plan_id != mesh->plan->plan_id) {
      g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
          "handshake reply of rank %u: expected rank %u plan 0x%08x, "
          "received rank %d plan 0x%08x", r, r, mesh->plan->plan_id,
          info->rank, info->plan_id);
      return FALSE;
    }
    PP_INFO ("worker rank %u is pid %" G_GINT64_FORMAT " on %s, steps [%u,%u)"
        ", %s", r, info->pid, info->host, mesh->plan->slices[r - 1].first,
        mesh->plan->slices[r - 1].end, (const gchar *)
        g_hash_table_lookup (info->parity, PP_PARITY_DEVICE));
  }
  parity = pp_parity_local (NULL, &mesh->plan->plan_id);
  return pp_parity_check (parity, mesh->workers, n, error);
}

static gchar *
worker_name (PpMesh * mesh, guint i)
{
  const PpWorkerInfo *info = &mesh->workers[i];

  return g_strdup_printf ("worker rank %u (pid %" G_GINT64_FORMAT " on %s, "
      "steps [%u,%u))", i + 1, info->pid, info->host,
      mesh->plan->slices[i].first, mesh->plan->slices[i].end);
}

/* Records the mesh's first failure (later ones are consequences) and
 * dumps rank 0's flight recorder with it. */
static void
mesh_fail (PpMesh * mesh, const GError * error)
{
  gboolean first;

  g_mutex_lock (&mesh->lock);
  first = mesh->fault == NULL;
  if (first)
    mesh->fault = g_error_copy (error);
  g_mutex_unlock (&mesh->lock);
  g_atomic_int_set (&mesh->failed, TRUE);
  if (first) {
    g_autofree gchar *path = pp_recorder_dump (mesh->dump_dir, 0,
        error->message);

    if (path != NULL)
      PP_ERROR_LOG ("flight recorder of rank 0 written to %s", path);
  }
}

/* The recorded failure, if any, into @error. */
static gboolean
mesh_fault (PpMesh * mesh, GError ** error)
{
  gboolean found;

  g_mutex_lock (&mesh->lock);
  found = mesh->fault != NULL;
  if (found)
    g_propagate_error (error, g_error_copy (mesh->fault));
  g_mutex_unlock (&mesh->lock);
  return found;
}

/* What worker @i's last heartbeat said, e.g. "computing chunk 3 for 2 ms,
 * last chunk received 3, sent 2; last heartbeat 120 ms ago". */
static gchar *
worker_state (PpMesh * mesh, guint i)
{
  gchar *text;

  g_mutex_lock (&mesh->lock);
  text = mesh->heard_us == NULL || mesh->heard_us[i] == 0
      ? g_strdup ("not heard from yet") : pp_heartbeat_describe
      (&mesh->beats[i], g_get_monotonic_time () - mesh->heard_us[i]);
  g_mutex_unlock (&mesh->lock);
  return text;
}

/* "rank 1: computing chunk 3 for 120 ms, …; rank 2: …" from the heartbeats. */
static gchar *
describe_workers (PpMesh * mesh)
{
  GString *s = g_string_new (NULL);
  const gint64 now = g_get_monotonic_time ();

  g_mutex_lock (&mesh->lock);
  for (guint i = 0; mesh->heard_us != NULL && i < mesh->plan->n_workers; i++) {
    g_autofree gchar *d = mesh->heard_us[i] == 0 ? g_strdup ("no heartbeat "
        "yet") : pp_heartbeat_describe (&mesh->beats[i],
        now - mesh->heard_us[i]);

    g_string_append_printf (s, "%srank %u: %s", i ? "; " : "", i + 1, d);
  }
  g_mutex_unlock (&mesh->lock);
  return g_string_free (s, FALSE);
}

/* A worker's report as the mesh's error: it leads with the rank it
 * blames when that is another worker (a receiver names the sender of a
 * broken chunk), followed by the report and what the blamed rank's last
 * heartbeat said. */
static gchar *
report_lead (PpMesh * mesh, gint source, gint blamed, const gchar * text)
{
  g_autofree gchar *name = NULL;
  g_autofree gchar *state = NULL;

  if (blamed < 1 || blamed > (gint) mesh->plan->n_workers || blamed == source)
    return g_strdup (text);
  name = worker_name (mesh, (guint) blamed - 1);
  state = worker_state (mesh, (guint) blamed - 1);
  return g_strdup_printf ("%s, blamed in a report: %s; rank %d was %s", name,
      text, blamed, state);
}

/* Takes every report and heartbeat that has arrived. */
static void
drain_messages (PpMesh * mesh)
{
  GError *error = NULL;
  GBytes *bytes;
  gint source;

  while ((bytes = pp_transport_try_recv_bytes (mesh->world, PP_TAG_REPORT,
              PP_REPORT_MAX, &source, &error)) != NULL) {
    gint rank, blamed;
    g_autofree gchar *text = pp_report_decode (bytes, &rank, &blamed,
        &error);

    g_bytes_unref (bytes);
    pp_recorder_note (PP_REC_REPORT, PP_RECORDER_NO_CHUNK, source, 0,
        PP_REC_DONE);
    if (text != NULL) {
      g_autofree gchar *lead = report_lead (mesh, source, blamed, text);
      GError *report = g_error_new_literal (PP_ERROR, PP_ERROR_RESOURCE,
          lead);

      PP_ERROR_LOG ("report from rank %d: %s", source, text);
      mesh_fail (mesh, report);
      g_error_free (report);
    }
    if (error != NULL)
      break;
  }
  while (error == NULL && (bytes = pp_transport_try_recv_bytes (mesh->world,
              PP_TAG_HEARTBEAT, PP_HEARTBEAT_MAX, &source, &error)) != NULL) {
    PpHeartbeat hb;

    if (source >= 1 && source <= (gint) mesh->plan->n_workers
        && pp_heartbeat_decode (bytes, &hb, &error)) {
      g_mutex_lock (&mesh->lock);
      mesh->beats[source - 1] = hb;
      mesh->heard_us[source - 1] = g_get_monotonic_time ();
      g_mutex_unlock (&mesh->lock);
    }
    g_bytes_unref (bytes);
  }
  if (error != NULL) {
    g_prefix_error (&error, "rank 0 monitoring the workers: ");
    mesh_fail (mesh, error);
    g_error_free (error);
  }
}

/* The watchdog: a worker silent for timeout-ms, or computing one chunk for
 * longer than that, fails the mesh. */
static void
check_heartbeats (PpMesh * mesh)
{
  const gint64 now = g_get_monotonic_time ();
  const gint64 limit = (gint64) mesh->timeout_ms * 1000;

  for (guint i = 0; i < mesh->plan->n_workers; i++) {
    g_autofree gchar *name = NULL;
    g_autofree gchar *state = NULL;
    PpHeartbeat hb;
    gint64 heard;
    GError *error = NULL;

    g_mutex_lock (&mesh->lock);
    heard = mesh->heard_us[i];
    hb = mesh->beats[i];
    g_mutex_unlock (&mesh->lock);
    if (heard == 0)
      continue;
    if (now - heard > limit) {
      name = worker_name (mesh, i);
      state = pp_heartbeat_describe (&hb, now - heard);
      pp_recorder_note (PP_REC_HEARTBEAT, hb.chunk_id, (gint) i + 1, 0,
          PP_REC_FAILED);
      error = g_error_new (PP_ERROR, PP_ERROR_TIMEOUT, "%s: no heartbeat for "
          "%" G_GINT64_FORMAT " ms (timeout-ms %u): it hangs or its host is "
          "unreachable; it was %s", name, (now - heard) / 1000,
          mesh->timeout_ms, state);
    } else if (hb.state == PP_WORK_COMPUTING && (gint64) hb.state_us > limit) {
      name = worker_name (mesh, i);
      error = g_error_new (PP_ERROR, PP_ERROR_TIMEOUT, "%s: computing chunk %"
          G_GUINT64_FORMAT " for %" G_GUINT64_FORMAT " ms, longer than "
          "timeout-ms %u", name, hb.chunk_id, hb.state_us / 1000,
          mesh->timeout_ms);
    }
    if (error != NULL) {
      mesh_fail (mesh, error);
      g_error_free (error);
      return;
    }
  }
}

/* Sends each worker a heartbeat, unless the last one is still in flight. */
static void
send_heartbeats (PpMesh * mesh)
{
  const PpHeartbeat hb = { 0, PP_WORK_IDLE, PP_HEARTBEAT_NONE, 0,
    PP_HEARTBEAT_NONE, PP_HEARTBEAT_NONE, 0
  };

  for (guint i = 0; i < mesh->plan->n_workers; i++) {
    int done = mesh->beat_reqs[i] == MPI_REQUEST_NULL;
    gconstpointer data;
    gsize len;

    if (!done)
      MPI_Test (&mesh->beat_reqs[i], &done, MPI_STATUS_IGNORE);
    if (!done)
      continue;
    if (mesh->beat_bytes[i] == NULL)
      mesh->beat_bytes[i] = pp_heartbeat_encode (&hb);
    data = g_bytes_get_data (mesh->beat_bytes[i], &len);
    MPI_Isend (data, (int) len, MPI_BYTE, (int) i + 1, PP_TAG_HEARTBEAT,
        mesh->world, &mesh->beat_reqs[i]);
  }
}

static gpointer
monitor_thread (gpointer data)
{
  PpMesh *mesh = data;
  const gint64 period = (gint64) pp_heartbeat_period_ms (mesh->timeout_ms)
      * 1000;
  gint64 next_beat = 0;

  while (!g_atomic_int_get (&mesh->monitor_stop)) {
    const gint64 now = g_get_monotonic_time ();

    drain_messages (mesh);
    if (mesh->watchdog && !g_atomic_int_get (&mesh->failed))
      check_heartbeats (mesh);
    if (now >= next_beat) {
      send_heartbeats (mesh);
      next_beat = now + period;
    }
    g_usleep (PP_MESH_MONITOR_POLL_US);
  }
  return NULL;
}

static void
monitor_start (PpMesh * mesh)
{
  const guint n = mesh->plan->n_workers;

  mesh->heard_us = g_new0 (gint64, n);
  mesh->beats = g_new0 (PpHeartbeat, n);
  mesh->beat_reqs = g_new (MPI_Request, n);
  mesh->beat_bytes = g_new0 (GBytes *, n);
  for (guint i = 0; i < n; i++) {
    /* Until a worker's first heartbeat, it counts from now. */
    mesh->heard_us[i] = g_get_monotonic_time ();
    mesh->beats[i].rank = i + 1;
    mesh->beats[i].chunk_id = mesh->beats[i].received =
        mesh->beats[i].sent = PP_HEARTBEAT_NONE;
    mesh->beat_reqs[i] = MPI_REQUEST_NULL;
  }
  mesh->monitor = g_thread_new ("pp-monitor", monitor_thread, mesh);
}

/* Stops the monitor; the buffers of heartbeats that never completed (a
 * dead worker) are leaked rather than freed under MPI. */
static void
monitor_stop (PpMesh * mesh)
{
  if (mesh->monitor == NULL)
    return;
  g_atomic_int_set (&mesh->monitor_stop, 1);
  g_thread_join (mesh->monitor);
  mesh->monitor = NULL;
  for (guint i = 0; i < mesh->plan->n_workers; i++) {
    int done = mesh->beat_reqs[i] == MPI_REQUEST_NULL;

    if (!done)
      MPI_Test (&mesh->beat_reqs[i], &done, MPI_STATUS_IGNORE);
    if (done)
      g_clear_pointer (&mesh->beat_bytes[i], g_bytes_unref);
  }
}

/* Between polls of a wait on the mesh: the monitor's verdict, and a worker
 * on this host that has exited is reported at once instead of at the
 * deadline (after any report it sent before it went). */
static gboolean
workers_alive (gpointer data, GError ** error)
{
  PpMesh *mesh = data;

  if (mesh_fault (mesh, error))
    return FALSE;
  for (guint i = 0; i < mesh->plan->n_workers; i++) {
    const PpWorkerInfo *info = &mesh->workers[i];
    if (info->pid > 0 && pp_proc_is_local (info->host)
        && !pp_proc_is_running (info->pid)) {
      g_autofree gchar *name = worker_name (mesh, i);
      GError *exited;

      drain_messages (mesh);
      if (mesh_fault (mesh, error))
        return FALSE;
      {
        g_autofree gchar *state = worker_state (mesh, i);

        exited = g_error_new (PP_ERROR, PP_ERROR_RESOURCE, "%s has exited "
            "(its stderr says why); it was %s", name, state);
      }
      mesh_fail (mesh, exited);
      g_propagate_error (error, exited);
      return FALSE;
    }
  }
  return TRUE;
}

static void
kill_workers (PpMesh * mesh)
{
  for (guint i = 0; i < mesh->plan->n_workers; i++) {
    PpWorkerInfo *info = &mesh->workers[i];
    if (info->pid > 0 && pp_proc_is_local (info->host)
        && pp_proc_is_running (info->pid)) {
      PP_WARN ("killing worker rank %u (pid %" G_GINT64_FORMAT ")", i + 1,
          info->pid);
      pp_proc_kill (info->pid);
    }
  }
}

static void
mesh_free (PpMesh * mesh)
{
  for (guint i = 0; i < mesh->plan->n_workers; i++)
    pp_worker_info_clear (&mesh->workers[i]);
  g_free (mesh->workers);
  g_free (mesh->heard_us);
  g_free (mesh->beats);
  g_free (mesh->beat_reqs);
  g_free (mesh->beat_bytes);       /* the buffers themselves: see monitor_stop */
  g_free (mesh->dump_dir);
  g_clear_error (&mesh->fault);
  g_mutex_clear (&mesh->lock);
  pp_plan_free (mesh->plan);
  g_free (mesh);
}

PpMesh *
pp_mesh_start (const PpMeshConfig * config, GError ** error)
{
  g_autofree gchar *worker = NULL;
  g_autofree gchar *plan_text = NULL;
  PpMesh *mesh;

  if (config->n_workers > PP_MESH_MAX_WORKERS) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
        "ranks=%u: at most %d workers are supported", config->n_workers,
        PP_MESH_MAX_WORKERS);
    return NULL;
  }
  mesh = g_new0 (PpMesh, 1);
  g_mutex_init (&mesh->lock);
  mesh->timeout_ms = config->timeout_ms;
  mesh->dump_dir = config->dump_dir && *config->dump_dir
      ? g_strdup (config->dump_dir) : NULL;
  mesh->watchdog = g_strcmp0 (g_getenv (PP_MESH_NO_WATCHDOG_ENV), "1") != 0;
  if (!mesh->watchdog)
    PP_WARN ("%s=1: the watchdog and the chunk deadlines are off (tests "
        "only)", PP_MESH_NO_WATCHDOG_ENV);
  mesh->inter = mesh->world = MPI_COMM_NULL;
  mesh->plan = pp_plan_new (config->n_workers, config->n_steps, config->model,
      config->timeout_ms, error);
  if (mesh->plan == NULL) {
    g_free (mesh);
    return NULL;
  }
  mesh->workers = g_new0 (PpWorkerInfo, config->n_workers);
  plan_text = pp_plan_describe (mesh->plan);
  PP_INFO ("%s", plan_text);

  worker = resolve_worker (config->worker_path, error);
  if (worker == NULL || !ensure_mpi (config->timeout_ms, error)
      || !spawn_workers (mesh, config, worker, error)) {
    mesh_free (mesh);
    return NULL;
  }
  if (!handshake (mesh, error)) {
    kill_workers (mesh);
    mesh_free (mesh);
    return NULL;
  }
  monitor_start (mesh);
  PP_INFO ("mesh of %u workers is up (worker %s)", config->n_workers, worker);
  return mesh;
}

const PpPlan *
pp_mesh_plan (PpMesh * mesh)
{
  return mesh->plan;
}

/* What rank 0 knows of a worker at one instant, from its heartbeats. */
typedef struct
{
  PpHeartbeat beat;
  gint64 silent_us;             /* since its last heartbeat */
  gint64 stalled_us;            /* in one compute, or silent, for so long */
} WorkerView;

static void
view_workers (PpMesh * mesh, WorkerView * views)
{
  const gint64 now = g_get_monotonic_time ();

  g_mutex_lock (&mesh->lock);
  for (guint i = 0; i < mesh->plan->n_workers; i++) {
    WorkerView *v = &views[i];

    v->beat = mesh->beats[i];
    v->silent_us = now - mesh->heard_us[i];
    /* A compute goes on between heartbeats; a wait does not stall. */
    v->stalled_us = v->beat.state == PP_WORK_COMPUTING
        ? (gint64) v->beat.state_us + v->silent_us : v->silent_us;
  }
  g_mutex_unlock (&mesh->lock);
}

/* "worker rank 2 (…): computing chunk 3 for 2010 ms, longer than
 * timeout-ms 2000", or "…: no heartbeat for 1900 ms (one is due every
 * 500 ms) while rank 0 waited …: it hangs …; it was …", in the words of
 * the watchdog (check_heartbeats). */
static gchar *
stalled_lead (PpMesh * mesh, guint i, const WorkerView * v,
    guint64 awaited)
{
  const gint64 limit = (gint64) mesh->timeout_ms * 1000;
  const guint period_ms = pp_heartbeat_period_ms (mesh->timeout_ms);
  g_autofree gchar *name = worker_name (mesh, i);
  g_autofree gchar *state = pp_heartbeat_describe (&v->beat, v->silent_us);
  g_autofree gchar *waited = g_strdup_printf ("while rank 0 waited "
      "timeout-ms %u for chunk %" G_GUINT64_FORMAT, mesh->timeout_ms,
      awaited);

  if (v->silent_us > PP_MESH_OVERDUE_PERIODS * (gint64) period_ms * 1000) {
    g_autofree gchar *bound = v->silent_us >= limit
        ? g_strdup_printf ("(timeout-ms %u)", mesh->timeout_ms)
        : g_strdup_printf ("(one is due every %u ms) %s", period_ms, waited);

    return g_strdup_printf ("%s: no heartbeat for %" G_GINT64_FORMAT " ms "
        "%s: it hangs or its host is unreachable; it was %s", name,
        v->silent_us / 1000, bound, state);
  }
  if (v->stalled_us >= limit)
    return g_strdup_printf ("%s: computing chunk %" G_GUINT64_FORMAT " for %"
        G_GINT64_FORMAT " ms, longer than timeout-ms %u", name,
        v->beat.chunk_id, v->stalled_us / 1000, mesh->timeout_ms);
  return g_strdup_printf ("%s: computing chunk %" G_GUINT64_FORMAT " for %"
      G_GINT64_FORMAT " ms %s", name, v->beat.chunk_id, v->stalled_us / 1000,
      waited);
}

/* The lead of a timed-out wait for @awaited: the worker to blame and why,
 * from the heartbeats.  A worker that only waits behind a slower one is
 * not to blame, so: the earliest stage computing one chunk or silent past
 * timeout-ms; else the one stalled longest, if longer than heartbeats
 * allow; else the first stage that has not passed @awaited on. */
static gchar *
blame_stalled (PpMesh * mesh, guint64 awaited)
{
  const guint n = mesh->plan->n_workers;
  const gint64 limit = (gint64) mesh->timeout_ms * 1000;
  const gint64 overdue = PP_MESH_OVERDUE_PERIODS
      * (gint64) pp_heartbeat_period_ms (mesh->timeout_ms) * 1000;
  g_autofree WorkerView *views = g_new0 (WorkerView, n);
  guint longest = 0;

  if (mesh->heard_us == NULL)
    return NULL;
  view_workers (mesh, views);
  for (guint i = 0; i < n; i++)
    if (views[i].stalled_us >= limit)
      return stalled_lead (mesh, i, &views[i], awaited);
  for (guint i = 1; i < n; i++)
    if (views[i].stalled_us > views[longest].stalled_us)
      longest = i;
  if (views[longest].stalled_us > overdue)
    return stalled_lead (mesh, longest, &views[longest], awaited);
  for (guint i = 0; i < n; i++) {
    const PpHeartbeat *hb = &views[i].beat;
    const gboolean passed = hb->sent != PP_HEARTBEAT_NONE
        && hb->sent >= awaited;

    if (!passed || i == n - 1) {
      g_autofree gchar *name = worker_name (mesh, i);
      g_autofree gchar *state = pp_heartbeat_describe (hb,
          views[i].silent_us);

      return g_strdup_printf ("%s: %s chunk %" G_GUINT64_FORMAT "%s within "
          "timeout-ms %u; it was %s", name, passed ? "sent" :
          "has not passed", awaited, passed ? ", which rank 0 did not receive"
          : " on", mesh->timeout_ms, state);
    }
  }
  return NULL;
}

/* After a failed wait of rank 0 on worker @peer for chunk @awaited
 * (@symptom says which wait): the mesh's first failure is the one to
 * report (a worker's report, the watchdog's verdict), not this symptom of
 * it.  Otherwise the error leads with the worker to blame: for a timeout,
 * the one the heartbeats show stalled, with the symptom and what each
 * worker was doing after it; for a broken transfer, @peer. */
static void
wait_failed (PpMesh * mesh, guint peer, guint64 awaited,
    const gchar * symptom, GError ** error)
{
  GError *fault = NULL;
  GError *lead;

  if (mesh_fault (mesh, &fault)) {
    g_clear_error (error);
    g_propagate_error (error, fault);
    return;
  }
  if (g_error_matches (*error, PP_ERROR, PP_ERROR_TIMEOUT)) {
    g_autofree gchar *culprit = blame_stalled (mesh, awaited);
    g_autofree gchar *states = describe_workers (mesh);

    lead = g_error_new (PP_ERROR, PP_ERROR_TIMEOUT, "%s%s%s: %s; workers: %s",
        culprit ? culprit : "", culprit ? "; " : "", symptom,
        (*error)->message, states);
  } else {
    g_autofree gchar *name = worker_name (mesh, peer);
    g_autofree gchar *state = worker_state (mesh, peer);

    lead = g_error_new ((*error)->domain, (*error)->code, "%s: %s; it was "
        "%s; %s", name, (*error)->message, state, symptom);
  }
  g_clear_error (error);
  g_propagate_error (error, lead);
  mesh_fail (mesh, *error);
}

static gboolean
mesh_already_failed (PpMesh * mesh, GError ** error)
{
  if (!g_atomic_int_get (&mesh->failed))
    return FALSE;
  if (!mesh_fault (mesh, error))
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "the worker mesh has already failed");
  return TRUE;
}

/* The deadline of one wait for chunk traffic (none when the test-only
 * switch turned the watchdog off). */
static gint64
chunk_deadline (PpMesh * mesh)
{
  return mesh->watchdog ? pp_deadline_in_ms (mesh->timeout_ms)
      : PP_NO_DEADLINE;
}

gboolean
pp_mesh_submit (PpMesh * mesh, PpChunk * chunk, guint64 * chunk_id,
    GError ** error)
{
  PpWait w = { mesh->world, 1, chunk_deadline (mesh), workers_alive, mesh };
  gboolean ok;

  if (mesh_already_failed (mesh, error)) {
    pp_chunk_free (chunk);
    return FALSE;
  }
  chunk->chunk_id = mesh->next_send_id;
  chunk->plan_id = mesh->plan->plan_id;
  chunk->n_steps = mesh->plan->n_steps;
  chunk->next_step = 0;
  chunk->submit_us = (guint64) g_get_monotonic_time ();
  if (!(chunk->flags & PP_CHUNK_KIND_FLAGS))
    chunk->flags |= PP_CHUNK_FLAG_DATA;
  /* The first chunk of a stream state: workers start theirs over. */
  if (mesh->next_send_id == 0 || chunk->cache_epoch != mesh->last_epoch)
    chunk->flags |= PP_CHUNK_FLAG_RESET;
  mesh->last_epoch = chunk->cache_epoch;
  if (mesh->first_submit_us == 0 && (chunk->flags & PP_CHUNK_FLAG_DATA))
    mesh->first_submit_us = (gint64) chunk->submit_us;
  if (chunk_id != NULL)
    *chunk_id = chunk->chunk_id;
  pp_recorder_note (PP_REC_SUBMIT, chunk->chunk_id, 1, 0, PP_REC_DONE);
  ok = pp_transport_send_chunk (&w, chunk, error);
  if (!ok) {
    g_autofree gchar *first = worker_name (mesh, 0);
    g_autofree gchar *symptom = g_strdup_printf ("rank 0 sending chunk %"
        G_GUINT64_FORMAT " to %s", mesh->next_send_id, first);

    wait_failed (mesh, 0, mesh->next_send_id, symptom, error);
    return FALSE;
  }
  mesh->next_send_id++;
  return TRUE;
}

static PpChunk *
collect_one (PpMesh * mesh, gboolean shutdown, GError ** error)
{
  PpWait w = { mesh->world, (gint) mesh->plan->n_workers,
    chunk_deadline (mesh), workers_alive, mesh
  };
  PpChunkExpect expect = {
    .chunk_id = mesh->next_recv_id,
    .plan_id = mesh->plan->plan_id,
    .next_step = mesh->plan->n_steps,
    .n_steps = mesh->plan->n_steps,
    .min_cache_epoch = G_MAXUINT32,
  };
  g_autoptr (PpChunk) chunk = NULL;

  chunk = pp_transport_recv_chunk (&w, mesh->timeout_ms, error);
  if (chunk == NULL || !pp_chunk_check (chunk, &expect, error)) {
    const guint last = mesh->plan->n_workers - 1;
    g_autofree gchar *name = worker_name (mesh, last);
    g_autofree gchar *symptom = g_strdup_printf ("rank 0 waiting for chunk %"
        G_GUINT64_FORMAT " from %s", mesh->next_recv_id, name);

    wait_failed (mesh, last, mesh->next_recv_id, symptom, error);
    return NULL;
  }
  if (!shutdown && (chunk->flags & PP_CHUNK_FLAG_SHUTDOWN)) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "chunk %" G_GUINT64_FORMAT " came back as a shutdown marker that "
        "was never sent", chunk->chunk_id);
    mesh_fail (mesh, *error);
    return NULL;
  }
  pp_recorder_note (PP_REC_COLLECT, chunk->chunk_id,
      (gint) mesh->plan->n_workers, 0, PP_REC_DONE);
  mesh->next_recv_id++;
  if (chunk->flags & PP_CHUNK_FLAG_DATA)
    mesh->last_return_us = g_get_monotonic_time ();
  return g_steal_pointer (&chunk);
}

gboolean
pp_mesh_warm_up (PpMesh * mesh, PpChunk * chunk, GError ** error)
{
  const gint64 start = g_get_monotonic_time ();
  g_autoptr (PpChunk) back = NULL;

  g_return_val_if_fail (mesh->next_recv_id == mesh->next_send_id, FALSE);
  chunk->flags = (chunk->flags & ~PP_CHUNK_KIND_FLAGS) | PP_CHUNK_FLAG_WARMUP;
  if (!pp_mesh_submit (mesh, chunk, NULL, error))
    return FALSE;
  back = pp_mesh_collect (mesh, error);
  if (back == NULL)
    return FALSE;
  if (!(back->flags & PP_CHUNK_FLAG_WARMUP)) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL, "the warm-up chunk %"
        G_GUINT64_FORMAT " came back without its warm-up flag",
        back->chunk_id);
    mesh_fail (mesh, *error);
    return FALSE;
  }
  mesh->warm_ups++;
  PP_INFO ("warm-up pass (chunk %" G_GUINT64_FORMAT ") took %.1f ms",
      back->chunk_id, (g_get_monotonic_time () - start) / 1e3);
  return TRUE;
}

PpChunk *
pp_mesh_collect (PpMesh * mesh, GError ** error)
{
  if (mesh_already_failed (mesh, error))
    return NULL;
  return collect_one (mesh, FALSE, error);
}

guint64
pp_mesh_next_chunk_id (PpMesh * mesh)
{
  return mesh->next_send_id;
}

typedef struct
{
  MPI_Comm inter;
  MPI_Comm world;
} DisconnectCall;

static gboolean
disconnect_blocking (gpointer data, GError ** error)
{
  DisconnectCall *call = data;

  MPI_Comm_free (&call->world);
  return pp_mpi_check (MPI_Comm_disconnect (&call->inter),
      "MPI_Comm_disconnect", error);
}

/* Sends the shutdown marker behind every chunk in flight and waits for it
 * to come back: proof that each worker finished and left its loop. */
static gboolean
shutdown_clean (PpMesh * mesh, PpMeshStats * stats, GError ** error)
{
  guint n = mesh->plan->n_workers;
  const gint64 shape[1] = { n };
  PpChunk *marker = pp_chunk_new ();
  g_autoptr (PpChunk) back = NULL;
  PpTensor *busy;
  PpWait w = { mesh->world, 1, pp_deadline_in_ms (mesh->timeout_ms),
    workers_alive, mesh
  };

  marker->flags = PP_CHUNK_FLAG_SHUTDOWN;
  marker->chunk_id = mesh->next_send_id;
  marker->plan_id = mesh->plan->plan_id;
  marker->n_steps = mesh->plan->n_steps;
  marker->next_step = mesh->plan->n_steps;
  pp_chunk_add_tensor (marker, pp_tensor_new (PP_MESH_BUSY_TENSOR,
          PP_DTYPE_F64, 1, shape, NULL));
  if (!pp_transport_send_chunk (&w, marker, error))
    return FALSE;
  mesh->next_send_id++;
  while (mesh->next_recv_id < mesh->next_send_id) {
    g_autoptr (PpChunk) chunk = collect_one (mesh, TRUE, error);
    if (chunk == NULL)
      return FALSE;
    if (chunk->flags & PP_CHUNK_FLAG_SHUTDOWN)
      back = g_steal_pointer (&chunk);
    else
      PP_DEBUG ("discarding chunk %" G_GUINT64_FORMAT " at shutdown",
          chunk->chunk_id);
  }
  busy = back ? pp_chunk_get_tensor (back, PP_MESH_BUSY_TENSOR) : NULL;
  if (busy == NULL || busy->dtype != PP_DTYPE_F64 || busy->shape[0] != n) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "the shutdown marker came back without its %s tensor",
        PP_MESH_BUSY_TENSOR);
    return FALSE;
  }
  if (stats != NULL) {
    gdouble sum = 0;
    stats->n_workers = n;
    for (guint i = 0; i < n; i++)
      sum += stats->busy_s[i] = ((gdouble *) busy->data)[i];
    stats->chunks = mesh->next_send_id - 1 - mesh->warm_ups;
    stats->warm_ups = mesh->warm_ups;
    stats->wall_s = (mesh->last_return_us - mesh->first_submit_us) / 1e6;
    stats->overlap = stats->wall_s > 0 && mesh->first_submit_us > 0
        ? sum / (n * stats->wall_s) : 0.0;
  }
  return TRUE;
}

static void
wait_workers_exit (PpMesh * mesh)
{
  gint64 deadline = pp_deadline_in_ms (PP_MESH_EXIT_GRACE_MS);

  for (guint i = 0; i < mesh->plan->n_workers; i++) {
    PpWorkerInfo *info = &mesh->workers[i];
    if (!pp_proc_is_local (info->host))
      continue;
    while (pp_proc_is_running (info->pid)
        && g_get_monotonic_time () < deadline)
      g_usleep (PP_MESH_EXIT_POLL_US);
  }
  kill_workers (mesh);
}

gboolean
pp_mesh_stop (PpMesh * mesh, PpMeshStats * stats, GError ** error)
{
  gboolean ok = FALSE;

  if (mesh == NULL)
    return TRUE;
  if (stats != NULL)
    memset (stats, 0, sizeof *stats);
  if (g_atomic_int_get (&mesh->failed)) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "the mesh had failed; workers were killed");
  } else if (shutdown_clean (mesh, stats, error)) {
    DisconnectCall *call = g_new0 (DisconnectCall, 1);

    /* The workers have left their loops: no more heartbeats. */
    monitor_stop (mesh);
    call->inter = mesh->inter;
    call->world = mesh->world;
    ok = pp_run_with_deadline ("disconnecting from the workers",
        disconnect_blocking, call, g_free, mesh->timeout_ms, error);
  }
  monitor_stop (mesh);
  /* The fault path never disconnects: a dead peer could hang it. */
  if (ok)
    wait_workers_exit (mesh);
  else
    kill_workers (mesh);
  PP_INFO ("mesh stopped %s", ok ? "cleanly" : "after an error");
  mesh_free (mesh);
  return ok;
}
