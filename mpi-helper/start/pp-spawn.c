/* ppdiffuse — spawning the workers: find the worker executable and check
 * that it runs here, start W of them with MPI_Comm_spawn under a deadline,
 * and merge them with rank 0 into the world communicator.
 *
 * While the spawn runs, rank 0 watches this host's workers and what Open
 * MPI's launcher prints (pp-launcher.h): a worker that exits before it
 * joins, or a launcher that reports an error, ends the start at once with
 * that cause, instead of at the deadline with none.
 *
 * What a failed start leaves: MPI_Comm_spawn cannot be interrupted, so its
 * thread is left to finish on its own.  When the spawn completes late,
 * that thread tells every worker to exit (a zero-byte hello) and frees the
 * communicators; workers that never hear from rank 0 end themselves at
 * the start budget rank 0 passed them (PP_WORKER_START_ARG).  When a
 * worker died before MPI_Init, Open MPI 4.1 holds the spawn in its connect
 * step for up to ten minutes (a fixed limit of its own): that one thread
 * waits there, idle, and then ends; the workers of this host are killed. */
#include "pp-start-room.h"
#include "pp-error.h"
#include "pp-daemon-loss.h"
#include "pp-launcher.h"
#include "pp-log.h"
#include "pp-proc.h"
#include "pp-sigpipe.h"

#include <gio/gio.h>
#include <netdb.h>
#include <string.h>

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


/* ---- the probe ---------------------------------------------------------- */

typedef struct
{
  gboolean done;
  gchar *output;
  gchar *errors;
  GError *error;
} Probe;

static void
probe_done (GObject * source, GAsyncResult * result, gpointer data)
{
  Probe *probe = data;

  g_subprocess_communicate_utf8_finish (G_SUBPROCESS (source), result,
      &probe->output, &probe->errors, &probe->error);
  probe->done = TRUE;
}

static gboolean
probe_timed_out (gpointer data)
{
  *(gboolean *) data = TRUE;
  return G_SOURCE_REMOVE;
}

/* "exited with status 1", "was killed by signal 9 (Killed)" */
static gchar *
describe_exit (GSubprocess * proc)
{
  if (g_subprocess_get_if_signaled (proc))
    return g_strdup_printf ("was killed by signal %d (%s)",
        g_subprocess_get_term_sig (proc),
        g_strsignal (g_subprocess_get_term_sig (proc)));
  return g_strdup_printf ("exited with status %d",
      g_subprocess_get_exit_status (proc));
}

/* What a failed probe said, on one line for an element error: the end of
 * its standard error (where a loader or a program complains; whatever
 * came before, LD_DEBUG output say, matters less), else of its output. */
static gchar *
probe_said (const gchar * errors, const gchar * output)
{
  const gchar *text = errors != NULL && *errors ? errors : output;
  gsize len;
  gchar *said;

  if (text == NULL)
    return NULL;
  len = strlen (text);
  said = g_strstrip (g_strdelimit (g_strdup (text + (len > 400 ? len - 400
                  : 0)), "\r\n\t", ' '));
  while (g_str_has_suffix (said, "."))
    said[strlen (said) - 1] = '\0';
  return said;
}

gboolean
pp_spawn_probe_worker (const gchar * worker, guint timeout_ms,
    GError ** error)
{
  const gchar *argv[] = { worker, PP_WORKER_PROBE_ARG, NULL };
  GMainContext *context = g_main_context_new ();
  g_autoptr (GSubprocess) proc = NULL;
  g_autofree gchar *how = NULL;
  g_autofree gchar *said = NULL;
  Probe probe = { FALSE, NULL, NULL, NULL };
  gboolean timed_out = FALSE, answered, ok = FALSE;
  GSource *timeout;
  GError *local = NULL;

  g_main_context_push_thread_default (context);
  proc = g_subprocess_newv (argv, G_SUBPROCESS_FLAGS_STDIN_INHERIT
      | G_SUBPROCESS_FLAGS_STDOUT_PIPE | G_SUBPROCESS_FLAGS_STDERR_PIPE,
      &local);
  if (proc == NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_SPAWN, "worker executable '%s' "
        "cannot be run on %s: %s", worker, g_get_host_name (),
        local->message);
    g_error_free (local);
    g_main_context_pop_thread_default (context);
    g_main_context_unref (context);
    return FALSE;
  }
  timeout = g_timeout_source_new (timeout_ms);
  g_source_set_callback (timeout, probe_timed_out, &timed_out, NULL);
  g_source_attach (timeout, context);
  g_subprocess_communicate_utf8_async (proc, NULL, NULL, probe_done, &probe);
  while (!probe.done && !timed_out)
    g_main_context_iteration (context, TRUE);
  if (!probe.done) {
    g_subprocess_force_exit (proc);
    while (!probe.done)
      g_main_context_iteration (context, TRUE);
  }
  g_subprocess_wait (proc, NULL, NULL);
  g_source_destroy (timeout);
  g_source_unref (timeout);
  g_main_context_pop_thread_default (context);
  g_main_context_unref (context);

  answered = probe.output != NULL && (g_str_has_prefix (probe.output,
          PP_WORKER_PROBE_REPLY) || strstr (probe.output,
          "\n" PP_WORKER_PROBE_REPLY) != NULL);
  said = probe_said (probe.errors, probe.output);
  if (timed_out)
    how = g_strdup_printf ("did not answer within %u ms", timeout_ms);
  else if (!g_subprocess_get_if_exited (proc)
      || g_subprocess_get_exit_status (proc) != 0)
    how = describe_exit (proc);
  else if (!answered)
    how = g_strdup ("exited with status 0 without a worker's answer");
  else
    ok = TRUE;
  if (!ok)
    g_set_error (error, PP_ERROR, PP_ERROR_SPAWN, "'%s' is no ppdiffuse "
        "worker that runs on %s: run as '%s %s' it %s%s%s. Check the worker "
        "property or $%s, and that the worker runs (ldd %s)", worker,
        g_get_host_name (), worker, PP_WORKER_PROBE_ARG, how,
        said != NULL && *said ? ", saying: " : " and printed nothing",
        said != NULL ? said : "", PP_WORKER_ENV, worker);
  g_free (probe.output);
  g_free (probe.errors);
  g_clear_error (&probe.error);
  return ok;
}

/* ---- the hosts ---------------------------------------------------------- */

/* The host names of @hosts ("a,b:2") and of @hostfile's lines ("a slots=2",
 * "# comment"), each once. */
static GPtrArray *
placement_hosts (const gchar * hosts, const gchar * hostfile,
    GError ** error)
{
  GPtrArray *names = g_ptr_array_new_with_free_func (g_free);
  g_auto (GStrv) items = NULL;
  g_autofree gchar *contents = NULL;

  if (hosts != NULL)
    items = g_strsplit (hosts, ",", -1);
  for (guint i = 0; items != NULL && items[i] != NULL; i++) {
    gchar *colon = strchr (items[i], ':');

    if (colon != NULL)
      *colon = '\0';
    g_strstrip (items[i]);
    if (*items[i] != '\0' && !g_ptr_array_find_with_equal_func (names,
            items[i], g_str_equal, NULL))
      g_ptr_array_add (names, g_strdup (items[i]));
  }
  if (hostfile != NULL) {
    g_auto (GStrv) lines = NULL;

    if (!g_file_get_contents (hostfile, &contents, NULL, error)) {
      g_ptr_array_unref (names);
      return NULL;
    }
    lines = g_strsplit (contents, "\n", -1);
    for (guint i = 0; lines[i] != NULL; i++) {
      gchar *hash = strchr (lines[i], '#');
      g_auto (GStrv) words = NULL;

      if (hash != NULL)
        *hash = '\0';
      words = g_strsplit_set (g_strstrip (lines[i]), " \t", 2);
      if (words[0] != NULL && *words[0] != '\0'
          && !g_ptr_array_find_with_equal_func (names, words[0],
              g_str_equal, NULL))
        g_ptr_array_add (names, g_strdup (words[0]));
    }
  }
  return names;
}

/* Every placement host must resolve here before Open MPI is asked to
 * start a daemon there: Open MPI 4.1's launcher does not recover from a
 * daemon that failed to start (pp_launcher_daemon_failure), so a misspelt
 * host name must never reach it. */
static gboolean
check_hosts_resolve (const gchar * hosts, const gchar * hostfile,
    GError ** error)
{
  g_autoptr (GPtrArray) names = placement_hosts (hosts, hostfile, error);

  if (names == NULL)
    return FALSE;
  for (guint i = 0; i < names->len; i++) {
    const gchar *name = g_ptr_array_index (names, i);
    struct addrinfo hints = { 0 }, *found = NULL;
    int rc;

    hints.ai_socktype = SOCK_STREAM;
    rc = getaddrinfo (name, NULL, &hints, &found);
    if (found != NULL)
      freeaddrinfo (found);
    if (rc != 0) {
      g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "host '%s' (from %s) "
          "does not resolve on %s: %s; fix the name, or add it to the DNS or "
          "/etc/hosts of every host", name, hosts != NULL
          && strstr (hosts, name) != NULL ? "the hosts property" : hostfile,
          g_get_host_name (), gai_strerror (rc));
      return FALSE;
    }
  }
  return TRUE;
}

/* ---- the spawn ---------------------------------------------------------- */

typedef struct
{
  gint refs;
  GMutex lock;
  GCond cond;
  gboolean done;                /* under lock */
  gboolean abandoned;           /* under lock: rank 0 stopped waiting */
  gboolean ok;
  GError *error;
  gchar *worker;
  gchar *start_arg;             /* PP_WORKER_START_ARG=MS */
  gchar *hosts;
  gchar *hostfile;
  guint n_workers;
  MPI_Comm inter;
  MPI_Comm world;
} SpawnCall;

static void
spawn_call_unref (SpawnCall * call)
{
  if (!g_atomic_int_dec_and_test (&call->refs))
    return;
  g_clear_error (&call->error);
  g_free (call->worker);
  g_free (call->start_arg);
  g_free (call->hosts);
  g_free (call->hostfile);
  g_mutex_clear (&call->lock);
  g_cond_clear (&call->cond);
  g_free (call);
}

static gboolean
spawn_blocking (SpawnCall * call, GError ** error)
{
  g_autofree int *codes = g_new0 (int, call->n_workers);
  char *argv[] = { call->start_arg, NULL };
  MPI_Info info;
  gboolean ok;

  MPI_Info_create (&info);
  /* Workers may share cores with rank 0 (and each other). */
  MPI_Info_set (info, "map_by", ":OVERSUBSCRIBE");
  /* Not bound to a core (Open MPI binds one or two processes to a core
   * each by default): a worker's threads — the CPU kernels' team, the
   * narrowing of weights, the digest — need the host's cores. */
  MPI_Info_set (info, "bind_to", "none");
  if (call->hosts != NULL)
    MPI_Info_set (info, "host", call->hosts);
  if (call->hostfile != NULL)
    MPI_Info_set (info, "hostfile", call->hostfile);
  ok = pp_mpi_check (MPI_Comm_spawn (call->worker, argv,
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

/* A spawn that completed after rank 0 gave up: every worker is told to
 * exit.  The communicators stay allocated: a worker's hello or load
 * progress may still be on its way, and a message that reaches a freed
 * communicator waits in Open MPI for the next one of its context id,
 * whose merge it can crash (pp-liveness.h, the farewells). */
static void
spawn_cancel_late (SpawnCall * call)
{
  if (call->world != MPI_COMM_NULL)
    for (guint r = 1; r <= call->n_workers; r++)
      MPI_Send (NULL, PP_HELLO_CANCEL_BYTES, MPI_BYTE, (int) r,
          PP_TAG_HANDSHAKE, call->world);
  PP_WARN ("a spawn given up on completed late: its %u workers were told "
      "to exit", call->n_workers);
}

static gpointer
spawn_thread (gpointer data)
{
  SpawnCall *call = data;
  GError *error = NULL;
  gboolean ok = spawn_blocking (call, &error);
  gboolean abandoned;

  g_mutex_lock (&call->lock);
  call->ok = ok;
  call->error = error;
  call->done = TRUE;
  abandoned = call->abandoned;
  g_cond_signal (&call->cond);
  g_mutex_unlock (&call->lock);
  if (abandoned && ok)
    spawn_cancel_late (call);
  spawn_call_unref (call);
  return NULL;
}

/* ---- watching this host's workers --------------------------------------- */

/* Watches the spawned workers of this host while MPI_Comm_spawn runs: a
 * rank seen and then gone exited before it joined; one gone well before
 * the others died first (Open MPI ends the rest soon after). */
typedef struct
{
  const gchar *worker;
  guint n;
  GMutex lock;
  guint64 scans;                /* under lock, as all below */
  gint64 *last_seen_us;         /* per spawned rank; 0: never seen */
  guint64 *last_seen_scan;
  gint64 *pids;                 /* per spawned rank, as last seen */
  gint stop;                    /* atomic */
} SpawnWatch;

#define SPAWN_WATCH_PERIOD_US 20000
/* A rank last seen this much before the others died first. */
#define SPAWN_WATCH_FIRST_US 100000
/* A rank is gone when this many scans in a row, over at least
 * SPAWN_WATCH_GONE_US, did not find it (one scan may miss a process that
 * is being scanned as it execs). */
#define SPAWN_WATCH_GONE_SCANS 4
#define SPAWN_WATCH_GONE_US 100000
/* How long the launcher gets to finish its message after an error. */
#define SPAWN_LAUNCHER_GRACE_US 300000
/* The waiting thread looks at the watch this often. */
#define SPAWN_POLL_US 20000

static gpointer
spawn_watch_thread (gpointer data)
{
  SpawnWatch *sw = data;
  g_autofree gint64 *pids = g_new0 (gint64, sw->n);

  while (!g_atomic_int_get (&sw->stop)) {
    const gint64 now = g_get_monotonic_time ();

    pp_proc_find_spawned (sw->worker, sw->n, pids);
    g_mutex_lock (&sw->lock);
    sw->scans++;
    for (guint i = 0; i < sw->n; i++)
      if (pids[i] != 0) {
        sw->last_seen_us[i] = now;
        sw->last_seen_scan[i] = sw->scans;
        sw->pids[i] = pids[i];
      }
    g_mutex_unlock (&sw->lock);
    g_usleep (SPAWN_WATCH_PERIOD_US);
  }
  return NULL;
}

/* The first rank (0-based) seen and now gone, or -1. */
static gint
spawn_watch_gone (SpawnWatch * sw)
{
  const gint64 now = g_get_monotonic_time ();
  gint gone = -1;

  g_mutex_lock (&sw->lock);
  for (guint i = 0; i < sw->n && gone < 0; i++)
    if (sw->last_seen_us[i] != 0
        && sw->scans - sw->last_seen_scan[i] >= SPAWN_WATCH_GONE_SCANS
        && now - sw->last_seen_us[i] >= SPAWN_WATCH_GONE_US)
      gone = (gint) i;
  g_mutex_unlock (&sw->lock);
  return gone;
}

/* "worker rank 2 (pid p on h) died first, …, before MPI_Init; " for the
 * ranks that were never seen, or gone well before the others: they lead
 * the error; "" when that cannot be told (a remote host, or nothing seen
 * at all). */
static gchar *
spawn_culprits (SpawnWatch * sw)
{
  GString *s = g_string_new (NULL);
  gint64 latest = 0;

  g_mutex_lock (&sw->lock);
  for (guint i = 0; i < sw->n; i++)
    latest = MAX (latest, sw->last_seen_us[i]);
  for (guint i = 0; latest != 0 && i < sw->n; i++) {
    if (sw->last_seen_us[i] == 0)
      g_string_append_printf (s, "worker rank %u never started or died at "
          "once, before MPI_Init; ", i + 1);
    else if (latest - sw->last_seen_us[i] > SPAWN_WATCH_FIRST_US)
      g_string_append_printf (s, "worker rank %u (pid %" G_GINT64_FORMAT
          " on %s) died first, %" G_GINT64_FORMAT " ms before the others, "
          "before MPI_Init; ", i + 1, sw->pids[i], g_get_host_name (),
          (latest - sw->last_seen_us[i]) / 1000);
  }
  g_mutex_unlock (&sw->lock);
  return g_string_free (s, FALSE);
}

/* Ends the workers of this host that the watch saw and that still run:
 * after a start failed for a cause other than slowness, they could only
 * wait in MPI start-up until their own deadline. */
static void
spawn_watch_kill (SpawnWatch * sw)
{
  g_mutex_lock (&sw->lock);
  for (guint i = 0; i < sw->n; i++)
    if (sw->pids[i] > 0 && pp_proc_is_running (sw->pids[i])) {
      PP_WARN ("killing worker rank %u (pid %" G_GINT64_FORMAT ") of the "
          "failed start", i + 1, sw->pids[i]);
      pp_proc_kill (sw->pids[i]);
    }
  g_mutex_unlock (&sw->lock);
}

/* ---- rank 0's side ------------------------------------------------------ */

typedef enum
{
  SPAWN_DONE,
  SPAWN_TIMED_OUT,
  SPAWN_WORKER_EXITED,          /* a worker of this host exited early */
  SPAWN_LAUNCHER_FAILED,        /* Open MPI's launcher reported an error,
                                 * or its daemon is gone */
} SpawnOutcome;

/* What the watch and the launcher tell of a spawn still running: a worker
 * of this host that exited (its index in @gone), an error Open MPI's
 * launcher has finished saying, its daemon gone for a moment (since
 * @daemon_gone_us; its last words have come by then), or nothing
 * (SPAWN_TIMED_OUT). */
static SpawnOutcome
spawn_seen_failure (SpawnWatch * sw, guint64 mark, gint64 * daemon_gone_us,
    gint * gone)
{
  g_autofree gchar *daemon_gone = pp_daemon_gone ();
  const gint64 now = g_get_monotonic_time ();
  gint64 said_us = 0;

  if (pp_launcher_failed_since (mark, &said_us)
      && now - said_us >= SPAWN_LAUNCHER_GRACE_US)
    return SPAWN_LAUNCHER_FAILED;
  /* Open MPI's daemon crashed or is gone: no worker starts without it,
   * whether or not the workers of this host have exited yet (on a loaded
   * machine they may take seconds, or wait in MPI_Init).  Its last words
   * (the signal) come within the grace; until then the workers that exit
   * with it are no cause of their own. */
  if (daemon_gone != NULL) {
    if (*daemon_gone_us == 0)
      *daemon_gone_us = now;
    return now - *daemon_gone_us >= SPAWN_LAUNCHER_GRACE_US
        ? SPAWN_LAUNCHER_FAILED : SPAWN_TIMED_OUT;
  }
  *gone = spawn_watch_gone (sw);
  return *gone >= 0 ? SPAWN_WORKER_EXITED : SPAWN_TIMED_OUT;
}

/* Waits for @call until @deadline_us, or until the watch or the launcher
 * tell that it failed; a spawn not done by then is abandoned to its
 * thread. */
static SpawnOutcome
spawn_wait (SpawnCall * call, SpawnWatch * sw, guint64 mark,
    gint64 deadline_us, gint * gone)
{
  SpawnOutcome outcome = SPAWN_TIMED_OUT;
  gint64 daemon_gone_us = 0;

  g_mutex_lock (&call->lock);
  while (!call->done && g_get_monotonic_time () < deadline_us) {
    SpawnOutcome seen;

    g_mutex_unlock (&call->lock);
    seen = spawn_seen_failure (sw, mark, &daemon_gone_us, gone);
    g_mutex_lock (&call->lock);
    if (seen != SPAWN_TIMED_OUT && !call->done) {
      outcome = seen;
      break;
    }
    g_cond_wait_until (&call->cond, &call->lock,
        MIN (deadline_us, g_get_monotonic_time () + SPAWN_POLL_US));
  }
  if (call->done)
    outcome = SPAWN_DONE;
  else
    call->abandoned = TRUE;
  g_mutex_unlock (&call->lock);
  return outcome;
}

/* The launcher's text since @mark, as ". Open MPI says: …", or "". */
static gchar *
launcher_says (guint64 mark)
{
  g_autofree gchar *text = pp_launcher_text_since (mark);

  return text != NULL ? g_strdup_printf (". Open MPI says: %s", text)
      : g_strdup ("");
}

gboolean
pp_spawn_workers (PpMesh * mesh, const PpMeshConfig * config,
    const gchar * worker, GError ** error)
{
  const guint budget_ms = pp_mpi_start_timeout_ms (config->timeout_ms);
  const gchar *hostfile = config->hostfile && *config->hostfile
      ? config->hostfile : NULL;
  SpawnCall *call;
  SpawnWatch watch = { worker, config->n_workers };
  g_autofree gchar *where = NULL;
  g_autofree gchar *culprits = NULL;
  g_autofree gchar *says = NULL;
  g_autofree gchar *lost = NULL;
  g_autofree gchar *crashed = NULL;
  GThread *watcher;
  SpawnOutcome outcome;
  guint64 mark;
  gint gone = -1;
  gboolean ok;

  /* Open MPI reads the hostfile here, on rank 0's host. */
  if (hostfile != NULL && !g_file_test (hostfile, G_FILE_TEST_IS_REGULAR)) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "hostfile '%s' %s on %s; "
        "set the hostfile property to an Open MPI hostfile (one host per "
        "line, e.g. \"gpu1 slots=2\")", hostfile,
        g_file_test (hostfile, G_FILE_TEST_EXISTS) ? "is not a regular file"
        : "does not exist", g_get_host_name ());
    return FALSE;
  }
  /* Open MPI 4.1's launcher (the daemon rank 0's MPI_Init forked) does
   * not recover from a daemon on another host that failed to start or was
   * lost: the next spawn fails ("ORTE_ERROR_LOG: Not found in file
   * odls_base_default_fns.c", "not running - cannot relay") or aborts it;
   * nor does it start workers once that daemon itself is gone.  After
   * either every start is refused, naming the first failure. */
  crashed = pp_daemon_gone ();
  if (crashed != NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_MPI, "Open MPI cannot start "
        "workers again in this process: %s earlier; " PP_DAEMON_GONE_ADVICE,
        crashed);
    return FALSE;
  }
  lost = pp_launcher_daemon_failure ();
  if (lost != NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_MPI, "Open MPI cannot start "
        "workers again in this process: it lost a daemon on another host "
        "earlier (\"%s\"), and Open MPI 4.1 does not recover from that; "
        "restart the application", lost);
    return FALSE;
  }
  if (!check_hosts_resolve (config->hosts && *config->hosts ? config->hosts
          : NULL, hostfile, error))
    return FALSE;
  if (!pp_spawn_probe_worker (worker, budget_ms, error)) {
    g_prefix_error (error, "could not start %u workers from '%s': ",
        config->n_workers, worker);
    return FALSE;
  }

  call = g_new0 (SpawnCall, 1);
  call->refs = 2;
  g_mutex_init (&call->lock);
  g_cond_init (&call->cond);
  call->worker = g_strdup (worker);
  /* Workers wait for the hello no longer than rank 0 waits for the spawn
   * and the handshake, plus a margin. */
  call->start_arg = g_strdup_printf ("%s=%u", PP_WORKER_START_ARG,
      budget_ms + config->timeout_ms + 2000);
  call->hosts = config->hosts && *config->hosts ? g_strdup (config->hosts)
      : NULL;
  call->hostfile = g_strdup (hostfile);
  call->n_workers = config->n_workers;
  call->inter = call->world = MPI_COMM_NULL;
  g_mutex_init (&watch.lock);
  watch.last_seen_us = g_new0 (gint64, config->n_workers);
  watch.last_seen_scan = g_new0 (guint64, config->n_workers);
  watch.pids = g_new0 (gint64, config->n_workers);
  watcher = pp_thread_new ("pp-spawn-watch", spawn_watch_thread, &watch);
  mark = pp_launcher_mark ();

  g_thread_unref (pp_thread_new ("pp-spawn", spawn_thread, call));
  outcome = spawn_wait (call, &watch, mark,
      g_get_monotonic_time () + (gint64) budget_ms * 1000, &gone);
  /* An error returned by the spawn itself: the launcher's message, if
   * any, comes with it or just before; give it a moment. */
  if (outcome == SPAWN_DONE && !call->ok)
    g_usleep (SPAWN_LAUNCHER_GRACE_US);
  g_atomic_int_set (&watch.stop, 1);
  g_thread_join (watcher);

  ok = outcome == SPAWN_DONE && call->ok;
  if (ok) {
    mesh->inter = call->inter;
    mesh->world = call->world;
  } else {
    culprits = spawn_culprits (&watch);
    says = launcher_says (mark);
    where = config->hosts && *config->hosts
        ? g_strdup_printf (" on hosts %s", config->hosts)
        : hostfile != NULL ? g_strdup_printf (" on the hosts of %s", hostfile)
        : g_strdup_printf (" on %s", g_get_host_name ());
    if (outcome != SPAWN_TIMED_OUT)
      spawn_watch_kill (&watch);
  }
  switch (ok ? -1 : (gint) outcome) {
    case SPAWN_DONE:
      g_set_error (error, PP_ERROR, PP_ERROR_SPAWN, "%scould not start %u "
          "workers from '%s'%s: %s%s", culprits, config->n_workers, worker,
          where, call->error->message, says);
      break;
    case SPAWN_WORKER_EXITED:
      g_set_error (error, PP_ERROR, PP_ERROR_SPAWN, "%scould not start %u "
          "workers from '%s'%s: worker rank %d (pid %" G_GINT64_FORMAT
          " on %s) exited before it joined the mesh%s. Check that the "
          "worker runs on its own (ldd) and its output above",
          culprits, config->n_workers, worker, where, gone + 1,
          watch.pids[gone], g_get_host_name (), says);
      break;
    case SPAWN_LAUNCHER_FAILED:
      g_set_error (error, PP_ERROR, PP_ERROR_SPAWN, "%scould not start %u "
          "workers from '%s'%s%s", culprits, config->n_workers, worker,
          where, says);
      break;
    case SPAWN_TIMED_OUT:
      g_set_error (error, PP_ERROR, PP_ERROR_TIMEOUT, "%scould not start %u "
          "workers from '%s'%s: spawning them (MPI_Comm_spawn) did not "
          "finish within %u ms (timeout-ms, at least %u ms for start-up)%s. "
          "Workers that come up later are told to exit; those that never "
          "do end by themselves within %u ms. Check that Open MPI works "
          "(mpirun -n 2 hostname) and the hosts/hostfile settings",
          culprits, config->n_workers, worker, where, budget_ms,
          pp_mpi_start_timeout_ms (0), says,
          budget_ms + config->timeout_ms + 2000);
      break;
    default:
      break;
  }
  /* What failed then was Open MPI's daemon, not a worker: the workers
   * lost their launcher, and whatever the spawn says follows from it. */
  if (!ok && (crashed = pp_daemon_gone ()) != NULL)
    g_prefix_error (error, "%s, and the workers with it; "
        PP_DAEMON_GONE_ADVICE ": ", crashed);
  g_free (watch.last_seen_us);
  g_free (watch.last_seen_scan);
  g_free (watch.pids);
  g_mutex_clear (&watch.lock);
  spawn_call_unref (call);
  return ok;
}
