/* ppdiffuse — start-up failures, one process per case: each ends in an
 * element error that names its cause within a bound, leaves no worker
 * process and no thread of the start behind, and a later start in the
 * same process works.
 *
 *   start-failures DIR CASE
 *
 * DIR holds the test workers (dies-at-start.sh, missing-lib-worker). */
#include <gst/check/gstcheck.h>
#include <glib/gstdio.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pp-check-util.h"

#define CAPS "video/x-raw,format=RGBx,width=32,height=24,framerate=30/1"
#define FRAMES 4
/* A start that fails for a cause found before or during the spawn.  Every
 * bound of a failure is pp_check_bound_ms of what is written: under a
 * sanitizer, with the faults suite's other tests starting meshes beside
 * it, a probe's failure once took 10.7 s, a stalled load's 11.2 s. */
#define PROMPT_MS 3000u
/* The start floor of the late-workers case (its PPDIFFUSE_TEST_START_FLOOR_MS
 * in meson.build): its error comes when that much has passed in the spawn,
 * so its bound is that on top of PROMPT_MS (a loaded machine once took
 * 3.8 s where 3 s was allowed in all). */
#define LATE_START_FLOOR_MS 2000u
/* How long a failed start's processes and threads may outlive its error. */
#define CLEANUP_MS 5000
/* A start that is expected to work (MPI start-up included). */
#define START_MS 60000
/* A start whose worker stops loading: MPI start-up, the spawn and
 * timeout-ms (1000 ms), on a loaded machine. */
#define START_STALL_MS 10000

static const gchar *test_dir;
static const gchar *case_name;

/* Runs FRAMES frames through ppdiffuse with @props; returns the error's
 * message (NULL after EOS), and in @elapsed_ms how long it took; the texts
 * of the PROGRESS messages posted meanwhile go to @progress, one a line,
 * when it is set, and the frames that came out of the element by EOS to
 * @frames_out, when it is set. */
static gchar *
run_pipeline_full (const gchar * props, guint within_ms, gint64 * elapsed_ms,
    GString * progress, guint64 * frames_out)
{
  g_autofree gchar *desc = g_strdup_printf ("videotestsrc num-buffers=%d ! "
      CAPS " ! ppdiffuse name=pp model=builtin:stamp ranks=2 steps=2 %s ! "
      "fakesink", FRAMES, props);
  GError *error = NULL;
  GstElement *pipeline = gst_parse_launch (desc, &error);
  GstBus *bus;
  GstMessage *msg;
  gchar *text = NULL;
  gint64 start = g_get_monotonic_time ();

  fail_unless (pipeline != NULL, "%s", error ? error->message : "?");
  bus = gst_element_get_bus (pipeline);
  gst_element_set_state (pipeline, GST_STATE_PLAYING);
  for (;;) {
    const gint64 left_us = start + (gint64) within_ms * 1000
        - g_get_monotonic_time ();

    msg = gst_bus_timed_pop_filtered (bus, MAX (left_us, 0) * GST_USECOND,
        GST_MESSAGE_ERROR | GST_MESSAGE_EOS | GST_MESSAGE_PROGRESS);
    if (msg == NULL || GST_MESSAGE_TYPE (msg) != GST_MESSAGE_PROGRESS)
      break;
    if (progress != NULL) {
      GstProgressType type;
      gchar *code = NULL, *text = NULL;

      gst_message_parse_progress (msg, &type, &code, &text);
      g_string_append_printf (progress, "%s\n", text);
      g_free (code);
      g_free (text);
    }
    gst_message_unref (msg);
  }
  *elapsed_ms = (g_get_monotonic_time () - start) / 1000;
  fail_unless (msg != NULL, "'%s': neither an error nor EOS within %u ms",
      props, within_ms);
  if (GST_MESSAGE_TYPE (msg) == GST_MESSAGE_ERROR) {
    GError *e = NULL;

    gst_message_parse_error (msg, &e, NULL);
    text = g_strdup (e->message);
    g_error_free (e);
  } else if (frames_out != NULL) {
    GstElement *pp = gst_bin_get_by_name (GST_BIN (pipeline), "pp");
    GstStructure *stats = pp_check_get_stats (pp);

    *frames_out = pp_check_stat_u64 (stats, "frames-out");
    gst_structure_free (stats);
    gst_object_unref (pp);
  }
  gst_message_unref (msg);
  fail_unless_equals_int (gst_element_set_state (pipeline, GST_STATE_NULL),
      GST_STATE_CHANGE_SUCCESS);
  gst_object_unref (bus);
  gst_object_unref (pipeline);
  GST_INFO ("'%s' after %" G_GINT64_FORMAT " ms: %s", props, *elapsed_ms,
      text ? text : "EOS");
  return text;
}

static gchar *
run_pipeline (const gchar * props, guint within_ms, gint64 * elapsed_ms)
{
  return run_pipeline_full (props, within_ms, elapsed_ms, NULL, NULL);
}

static void
expect_failure (const gchar * props, guint within_ms,
    const gchar * const *needles)
{
  gint64 ms;
  g_autofree gchar *text = NULL;

  within_ms = pp_check_bound_ms (within_ms);
  text = run_pipeline (props, within_ms + START_MS, &ms);
  fail_unless (text != NULL, "'%s' started", props);
  fail_unless (ms <= within_ms, "'%s' failed after %" G_GINT64_FORMAT
      " ms, more than %u ms: %s", props, ms, within_ms, text);
  for (guint i = 0; needles[i] != NULL; i++)
    fail_unless (strstr (text, needles[i]) != NULL, "'%s' is not in the "
        "error of '%s': %s", needles[i], props, text);
}

/* A start that works: every frame comes out, not only EOS. */
static void
expect_frames (const gchar * props)
{
  gint64 ms;
  guint64 out = 0;
  g_autofree gchar *text = run_pipeline_full (props, START_MS, &ms, NULL,
      &out);

  fail_unless (text == NULL, "'%s' failed: %s", props, text);
  fail_unless_equals_uint64 (out, FRAMES);
}

/* Threads of this process whose name starts with @prefix. */
static guint
count_threads (const gchar * prefix)
{
  GDir *dir = g_dir_open ("/proc/self/task", 0, NULL);
  const gchar *entry;
  guint n = 0;

  fail_unless (dir != NULL);
  while ((entry = g_dir_read_name (dir)) != NULL) {
    g_autofree gchar *path = g_build_filename ("/proc/self/task", entry,
        "comm", NULL);
    g_autofree gchar *comm = NULL;

    if (g_file_get_contents (path, &comm, NULL, NULL)
        && g_str_has_prefix (comm, prefix))
      n++;
  }
  g_dir_close (dir);
  return n;
}

static guint
wait_threads_gone (const gchar * prefix, guint timeout_ms)
{
  gint64 deadline = g_get_monotonic_time () + (gint64) timeout_ms * 1000;
  guint n;

  while ((n = count_threads (prefix)) > 0
      && g_get_monotonic_time () < deadline)
    g_usleep (20000);
  return n;
}

/* After a failed start: nothing of it is left within CLEANUP_MS, and the
 * next start in this process works (and stops again). */
static void
expect_clean_restart (void)
{
  fail_unless_equals_int (pp_check_wait_descendants_gone ("ppdiffuse-worke",
          CLEANUP_MS), 0);
  fail_unless_equals_int (wait_threads_gone ("pp-spawn", CLEANUP_MS), 0);
  fail_unless_equals_int (count_threads ("pp-deadline"), 0);
  expect_frames ("timeout-ms=5000");
  expect_frames ("timeout-ms=5000");
}

static gchar *
test_worker (const gchar * name)
{
  return g_build_filename (test_dir, name, NULL);
}

/* Programs that are no worker: each is found out before any spawn, with
 * its exit status and what it printed. */
GST_START_TEST (test_not_workers)
{
  g_autofree gchar *missing = test_worker ("missing-lib-worker");
  g_autofree gchar *missing_prop = g_strdup_printf ("worker=%s", missing);
  const gchar *true_needles[] = { "could not start 2 workers from '/bin/true'",
    "exited with status 0", "printed nothing", NULL
  };
  const gchar *sleep_needles[] = { "'/bin/sleep'", "exited with status 1",
    "unrecognized option", NULL
  };
  const gchar *lib_needles[] = { "missing-lib-worker", "exited with status "
        "127", "libppgone.so", "cannot open shared object file", NULL
  };

  expect_failure ("worker=/bin/true", PROMPT_MS, true_needles);
  expect_failure ("worker=/bin/sleep", PROMPT_MS, sleep_needles);
  expect_failure (missing_prop, PROMPT_MS, lib_needles);
  expect_clean_restart ();
}

GST_END_TEST;

/* A worker that passes the probe and exits 3 when spawned, before
 * MPI_Init: Open MPI's launcher says so, and that text is the error. */
GST_START_TEST (test_dies_at_start)
{
  g_autofree gchar *script = test_worker ("dies-at-start.sh");
  g_autofree gchar *prop = g_strdup_printf ("worker=%s", script);
  const gchar *needles[] = { "could not start 2 workers", "Open MPI says",
    "exiting with status 3", "non-zero exit code", NULL
  };

  expect_failure (prop, PROMPT_MS, needles);
  fail_unless_equals_int (pp_check_wait_descendants_gone ("dies-at-start",
          CLEANUP_MS), 0);
  /* The spawn's own thread is left in Open MPI's connect step (its fixed
   * ten-minute limit); the watch thread and the workers are not. */
  fail_unless_equals_int (wait_threads_gone ("pp-spawn-watch", CLEANUP_MS),
      0);
  expect_frames ("timeout-ms=5000");
  expect_frames ("timeout-ms=5000");
}

GST_END_TEST;

/* Placement settings that cannot work never reach Open MPI. */
GST_START_TEST (test_bad_placement)
{
  g_autofree gchar *hostfile = g_build_filename (g_get_tmp_dir (),
      "ppdiffuse-start-failures-hostfile", NULL);
  g_autofree gchar *hostfile_prop = g_strdup_printf ("hostfile=%s",
      hostfile);
  const gchar *host_needles[] = { "host 'no-such-host.invalid'",
    "hosts property", "does not resolve", NULL
  };
  const gchar *file_needles[] = { "hostfile '/nonexistent/hosts'",
    "does not exist", NULL
  };
  const gchar *line_needles[] = { "host 'unknown-host.invalid'", hostfile,
    "does not resolve", NULL
  };

  fail_unless (g_file_set_contents (hostfile, "# two hosts\nlocalhost "
          "slots=2\nunknown-host.invalid slots=2\n", -1, NULL));
  expect_failure ("hosts=no-such-host.invalid", 15000, host_needles);
  expect_failure ("hostfile=/nonexistent/hosts", PROMPT_MS, file_needles);
  expect_failure (hostfile_prop, 15000, line_needles);
  g_unlink (hostfile);
  expect_clean_restart ();
}

GST_END_TEST;

/* timeout-ms at its documented minimum still starts: MPI start-up and
 * the spawn have a floor of their own.  The handshake after them has
 * none (a worker may be silent timeout-ms, its heartbeats every quarter of
 * it): under a sanitizer, with the faults suite's tests four at a time on
 * 2 cores, a worker there was once silent past 100 ms, so the minimum is
 * taken as pp_check_bound_ms of it, still far below the spawn's time. */
GST_START_TEST (test_tiny_timeout)
{
  g_autofree gchar *props = g_strdup_printf ("timeout-ms=%u",
      pp_check_bound_ms (100));

  expect_frames (props);
  expect_frames (props);
}

GST_END_TEST;

/* MPI start-up slower than a start's deadline: that start fails, the
 * initialisation goes on, and the next start uses it. */
GST_START_TEST (test_slow_mpi_init)
{
  const gchar *needles[] = { "MPI_Init_thread", "did not finish within 300 "
        "ms", "the next start uses it", NULL
  };

  expect_failure ("timeout-ms=100", PROMPT_MS, needles);
  expect_frames ("timeout-ms=5000");
  expect_frames ("timeout-ms=5000");
}

GST_END_TEST;

/* A worker whose model load takes three times timeout-ms but keeps
 * reporting progress: the start waits for it, and the element's PROGRESS
 * messages say how far the load is. */
GST_START_TEST (test_slow_load)
{
  g_autoptr (GString) progress = g_string_new (NULL);
  gint64 ms;
  g_autofree gchar *text = run_pipeline_full ("timeout-ms=1000", START_MS,
      &ms, progress, NULL);

  fail_unless (text == NULL, "a slow load that progresses failed: %s", text);
  fail_unless (strstr (progress->str, "rank 1 loading its model") != NULL,
      "no PROGRESS message told of the load: %s", progress->str);
  fail_unless (ms >= 3000, "the load took %" G_GINT64_FORMAT " ms, less "
      "than the fault's 3000 ms", ms);
}

GST_END_TEST;

/* A worker whose model load stops progressing: the start ends in an
 * error after timeout-ms naming the worker, and nothing is left. */
GST_START_TEST (test_stalled_load)
{
  const gchar *needles[] = { "handshake reply", "peer rank 1",
    "no progress", NULL
  };

  expect_failure ("timeout-ms=1000", START_STALL_MS, needles);
  fail_unless_equals_int (pp_check_wait_descendants_gone ("ppdiffuse-worke",
          CLEANUP_MS), 0);
  fail_unless_equals_int (wait_threads_gone ("pp-spawn", CLEANUP_MS), 0);
}

GST_END_TEST;

static guint
count_in_file_text (const gchar * text, const gchar * needle)
{
  guint n = 0;

  for (const gchar * p = text; (p = strstr (p, needle)) != NULL; p++)
    n++;
  return n;
}

/* How many times @needle is in the file @path. */
static guint
count_in_file (const gchar * path, const gchar * needle)
{
  g_autofree gchar *text = NULL;

  if (!g_file_get_contents (path, &text, NULL, NULL))
    return 0;
  return count_in_file_text (text, needle);
}

/* Workers that come up after rank 0 gave up: told to exit at once when
 * the spawn completes (each says so: the zero-byte hello, not its own
 * start deadline, ended it); no worker and no thread of the start remain.
 * The next start gives them time enough (Open MPI hands later spawns the
 * environment of the first, so they come up late again) and works.
 *
 * The workers' output reaches this process's standard error (through
 * Open MPI's daemon and rank 0's copy of its output), which is a file for
 * the length of the check. */
GST_START_TEST (test_late_workers)
{
  /* The start budget is the floor the test sets (2000 ms), shorter than
   * the workers' 2.5 s delay.  Rank 0's own MPI start-up comes out of it
   * too, and took more than the 2 s under ThreadSanitizer on a loaded
   * machine: a start that works (its workers late as well) comes first,
   * so that the failing start's budget is the spawn's alone. */
  const gchar *needles[] = { "could not start 2 workers",
    "did not finish within 2000 ms", NULL
  };
  g_autofree gchar *log_path = g_build_filename (g_get_tmp_dir (),
      "ppdiffuse-late-workers-XXXXXX", NULL);
  g_autofree gchar *log = NULL;
  const gint log_fd = g_mkstemp (log_path);
  const gint saved_fd = dup (STDERR_FILENO);
  gint64 deadline;

  fail_unless (log_fd >= 0 && saved_fd >= 0);
  /* Before MPI starts: Open MPI forwards the workers' output to the
   * standard error it found then. */
  fail_unless (dup2 (log_fd, STDERR_FILENO) == STDERR_FILENO);
  expect_frames ("timeout-ms=6000");
  expect_failure ("timeout-ms=1000", LATE_START_FLOOR_MS + PROMPT_MS,
      needles);
  fail_unless_equals_int (pp_check_wait_descendants_gone ("ppdiffuse-worke",
          CLEANUP_MS), 0);
  fail_unless_equals_int (wait_threads_gone ("pp-spawn", CLEANUP_MS), 0);
  deadline = g_get_monotonic_time () + (gint64) CLEANUP_MS * 1000;
  while (count_in_file (log_path, "gave up on this start before this worker "
          "came up") < 2 && g_get_monotonic_time () < deadline)
    g_usleep (20000);
  dup2 (saved_fd, STDERR_FILENO);
  close (saved_fd);
  close (log_fd);
  fail_unless (g_file_get_contents (log_path, &log, NULL, NULL));
  g_printerr ("%s", log);
  g_unlink (log_path);
  fail_unless_equals_int (count_in_file_text (log, "gave up on this start "
          "before this worker came up"), 2);
  expect_frames ("timeout-ms=6000");
}

GST_END_TEST;

/* Process @pid's /proc/PID/stat after its name (") S PPID ..."), or
 * NULL when it is gone. */
static gchar *
stat_of (gint pid, gchar ** text)
{
  g_autofree gchar *path = g_strdup_printf ("/proc/%d/stat", pid);
  gchar *close;

  if (!g_file_get_contents (path, text, NULL, NULL)
      || (close = strrchr (*text, ')')) == NULL || strlen (close) < 4)
    return NULL;
  return close;
}

/* The parent of process @pid, or 0. */
static gint
parent_of (gint pid)
{
  g_autofree gchar *text = NULL;
  const gchar *close = stat_of (pid, &text);

  return close != NULL ? atoi (close + 4) : 0;
}

/* Whether process @pid is alive (not gone, not a zombie). */
static gboolean
alive (gint pid)
{
  g_autofree gchar *text = NULL;
  const gchar *close = stat_of (pid, &text);

  return close != NULL && close[2] != 'Z' && close[2] != 'X';
}

/* How long the element gives a crashed daemon before it kills it
 * (PP_LAUNCHER_REAP_MS, mpi-helper/start/pp-launcher.h). */
#define DAEMON_REAP_MS 5000

/* Open MPI's daemon dies of the SIGSEGV, unless its own signal handler
 * deadlocks: seen under load, its backtrace's dlopen waiting on a malloc
 * lock that one of its threads held when the signal came (the element
 * reads the handler's first line, so it reports the crash either way).
 * The element then kills it after DAEMON_REAP_MS: a daemon still running
 * past that and CLEANUP_MS is a failure (killed here first, so that it
 * does not hold the test's output open). */
static void
reap_crashed_daemon (gint pid)
{
  const gint64 deadline = g_get_monotonic_time ()
      + (DAEMON_REAP_MS + CLEANUP_MS) * 1000;

  while (alive (pid) && g_get_monotonic_time () < deadline)
    g_usleep (20000);
  if (alive (pid)) {
    kill (pid, SIGKILL);
    fail ("Open MPI's daemon (pid %d) still ran %d ms after its SIGSEGV: "
        "the element did not kill it", pid, DAEMON_REAP_MS + CLEANUP_MS);
  }
}

/* The daemon the stuck case stopped: killed at exit whatever happened, so
 * that it never holds the test's output open. */
static gint stopped_daemon;

static void
kill_stopped_daemon (void)
{
  if (stopped_daemon > 0)
    kill (stopped_daemon, SIGKILL);
}

/* The killer of the daemon-crash case: once the spawn has started a worker
 * (a child of the daemon, not the probe run before the spawn, a child of
 * this process), Open MPI's daemon (this process's child) gets SIGSEGV, as
 * when it crashed in its own code; it returns the daemon's pid, or 0 when
 * no start came within START_MS. */
static gpointer
crash_daemon (gpointer stuck)
{
  const gint64 deadline = g_get_monotonic_time () + (gint64) START_MS * 1000;

  while (g_get_monotonic_time () < deadline) {
    g_autoptr (GArray) workers = pp_check_find_descendants ("ppdiffuse-worke");
    g_autoptr (GArray) daemons = pp_check_find_descendants ("orted");

    for (guint i = 0; daemons->len > 0 && i < workers->len; i++) {
      const gint pid = g_array_index (daemons, gint, 0);

      if (parent_of (g_array_index (workers, gint, i)) != pid)
        continue;
      if (stuck == NULL) {
        fail_unless (kill (pid, SIGSEGV) == 0);
        return GINT_TO_POINTER (pid);
      }
      /* A daemon whose signal handler deadlocked after its first lines:
       * stopped, and its handler's lines written where it writes them
       * (its standard error, the pipe rank 0 reads), as its own. */
      stopped_daemon = pid;
      atexit (kill_stopped_daemon);
      fail_unless (kill (pid, SIGSTOP) == 0);
      {
        g_autofree gchar *lines = g_strdup_printf ("[%s:%d] *** Process "
            "received signal ***\n[%s:%d] Signal: Segmentation fault (11)\n",
            g_get_host_name (), pid, g_get_host_name (), pid);
        g_autofree gchar *path = g_strdup_printf ("/proc/%d/fd/2", pid);
        const int fd = open (path, O_WRONLY);

        fail_unless (fd >= 0, "%s: %s", path, g_strerror (errno));
        fail_unless (write (fd, lines, strlen (lines))
            == (gssize) strlen (lines));
        close (fd);
      }
      return GINT_TO_POINTER (pid);
    }
    g_usleep (20000);
  }
  return NULL;
}

/* Open MPI's daemon crashes while rank 1 is late to start (its
 * PPDIFFUSE_FAULT in meson.build), or, @stuck, stops in its signal
 * handler after its first lines: the error names the daemon, its pid and
 * the signal, as Open MPI's fault, and comes at once, not at the spawn's
 * deadline; no worker is left.  The next start in this process is refused
 * at once, naming the crash: Open MPI 4.1 starts no workers without its
 * daemon.  The daemon is gone in the end. */
static void
daemon_crash (gboolean stuck)
{
  const gchar *again_needles[] = { "cannot start workers again in this "
        "process", "crashed with Segmentation fault", "restart the "
        "application", NULL
  };
  GThread *killer = g_thread_new ("crash-daemon", crash_daemon,
      stuck ? GINT_TO_POINTER (1) : NULL);
  g_autofree gchar *text = NULL;
  g_autofree gchar *pid_text = NULL;
  gint64 ms;
  gint pid;

  text = run_pipeline ("timeout-ms=8000", START_MS, &ms);
  pid = GPOINTER_TO_INT (g_thread_join (killer));
  fail_unless (pid > 0, "no worker came up within %u ms", START_MS);
  fail_unless (text != NULL, "the start worked without its daemon");
  pid_text = g_strdup_printf ("Open MPI's daemon on %s (pid %d, started by "
      "MPI_Init in this process) crashed with Segmentation fault",
      g_get_host_name (), pid);
  fail_unless (strstr (text, pid_text) != NULL, "'%s' is not in: %s",
      pid_text, text);
  fail_unless (strstr (text, "a fault of Open MPI, and the workers with "
          "it") != NULL, "%s", text);
  fail_unless (strstr (text, "restart the application") != NULL, "%s", text);
  /* Rank 1 sleeps 4 s before MPI_Init: the error came before it woke. */
  fail_unless (ms < 4000 + pp_check_bound_ms (PROMPT_MS), "%" G_GINT64_FORMAT
      " ms: %s", ms, text);
  fail_unless_equals_int (pp_check_wait_descendants_gone ("ppdiffuse-worke",
          CLEANUP_MS), 0);
  /* No pp-spawn thread is awaited: once its daemon is gone, Open MPI's
   * MPI_Comm_spawn mostly returns MPI_ERR_INTERN at once, but under load it
   * was seen never to return (a CI run's spawn waited out its deadline),
   * and the element abandons such a call to its thread by design. */
  expect_failure ("timeout-ms=8000", PROMPT_MS, again_needles);
  reap_crashed_daemon (pid);
}

GST_START_TEST (test_daemon_crash)
{
  daemon_crash (FALSE);
}

GST_END_TEST;

/* The deadlock seen under load, made every time: the element kills the
 * stuck daemon (DAEMON_REAP_MS after its crash was read). */
GST_START_TEST (test_daemon_stuck)
{
  daemon_crash (TRUE);
}

GST_END_TEST;

static Suite *
start_failures_suite (void)
{
  Suite *s = suite_create ("ppdiffuse-start-failures");
  TCase *tc = tcase_create ("start");

  tcase_set_timeout (tc, 180);
  if (g_str_equal (case_name, "not-workers"))
    tcase_add_test (tc, test_not_workers);
  else if (g_str_equal (case_name, "dies-at-start"))
    tcase_add_test (tc, test_dies_at_start);
  else if (g_str_equal (case_name, "bad-placement"))
    tcase_add_test (tc, test_bad_placement);
  else if (g_str_equal (case_name, "tiny-timeout"))
    tcase_add_test (tc, test_tiny_timeout);
  else if (g_str_equal (case_name, "slow-mpi-init"))
    tcase_add_test (tc, test_slow_mpi_init);
  else if (g_str_equal (case_name, "late-workers"))
    tcase_add_test (tc, test_late_workers);
  else if (g_str_equal (case_name, "slow-load"))
    tcase_add_test (tc, test_slow_load);
  else if (g_str_equal (case_name, "daemon-crash"))
    tcase_add_test (tc, test_daemon_crash);
  else if (g_str_equal (case_name, "daemon-stuck"))
    tcase_add_test (tc, test_daemon_stuck);
  else if (g_str_equal (case_name, "stalled-load"))
    tcase_add_test (tc, test_stalled_load);
  else
    g_error ("unknown case '%s'", case_name);
  suite_add_tcase (s, tc);
  return s;
}

int
main (int argc, char **argv)
{
  if (argc != 3) {
    g_printerr ("usage: %s TEST_WORKER_DIR CASE\n", argv[0]);
    return 2;
  }
  test_dir = argv[1];
  case_name = argv[2];
  gst_check_init (NULL, NULL);
  pp_check_run_and_exit (start_failures_suite (), "ppdiffuse-start-failures",
      __FILE__);
}
