/* Unit tests for what rank 0 reads of Open MPI's launcher (pp-launcher.h):
 * which framed messages are errors, which lines are left out of the
 * element error, and the capture itself: standard error turned into a
 * pipe, copied on, its framed messages found.  Open MPI's texts below are
 * the ones its 4.1 daemon prints. */
#include "pp-launcher.h"
#include "pp-log.h"

#include <glib/gstdio.h>

#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define FRAME "------------------------------------------------------------" \
  "--------------\n"
#define WAIT_US (10 * G_USEC_PER_SEC)

/* The reap of a crashed daemon: one that ends within the grace is left
 * alone, one that does not (a daemon stuck in its signal handler, here a
 * child that sleeps) is killed. */
static gint
sleeper (guint seconds)
{
  const pid_t pid = fork ();

  g_assert_cmpint (pid, >=, 0);
  if (pid == 0) {
    g_usleep ((gulong) seconds * G_USEC_PER_SEC);
    _exit (0);
  }
  return pid;
}

static void
collect_log (PpLogLevel level, const gchar * message, gpointer data)
{
  g_string_append_printf (data, "%d %s\n", level, message);
}

static void
test_reap (void)
{
  g_autoptr (GString) said = g_string_new (NULL);
  gint status = 0;
  pid_t stuck, quick;
  gint64 t;

  pp_log_set_handler (collect_log, said, PP_LOG_TRACE);

  /* A child that has ended (a zombie until waited for) is not running. */
  quick = sleeper (0);
  t = g_get_monotonic_time ();
  g_assert_false (pp_launcher_reap (quick, 5000));
  g_assert_cmpint (g_get_monotonic_time () - t, <, 4 * G_USEC_PER_SEC);
  g_assert_cmpint (waitpid (quick, &status, 0), ==, quick);
  g_assert_true (WIFEXITED (status));

  g_assert_cmpuint (said->len, ==, 0);

  stuck = sleeper (60);
  t = g_get_monotonic_time ();
  g_assert_true (pp_launcher_reap (stuck, 200));
  g_assert_cmpint (g_get_monotonic_time () - t, >=, 200 * 1000);
  pp_log_set_handler (NULL, NULL, PP_LOG_DEFAULT_LEVEL);
  g_test_message ("%s", said->str);
  g_assert_nonnull (strstr (said->str, "2 Open MPI's daemon (pid "));
  g_assert_nonnull (strstr (said->str, "still runs 200 ms after its crash "
          "(its signal handler is stuck): killing it"));
  g_assert_cmpint (waitpid (stuck, &status, 0), ==, stuck);
  g_assert_true (WIFSIGNALED (status));
  g_assert_cmpint (WTERMSIG (status), ==, SIGKILL);
}

static void
test_error_text (void)
{
  g_assert_true (pp_launcher_is_error_text ("Child job 2 terminated "
          "normally, but 1 process returned a non-zero exit code. Per "
          "user-direction, the job has been aborted."));
  g_assert_true (pp_launcher_is_error_text ("ORTE was unable to reliably "
          "start one or more daemons."));
  g_assert_true (pp_launcher_is_error_text ("mpirun noticed that process "
          "rank 1 with PID 0 on node vm exited on signal 6 (Aborted)."));
  /* Warnings and notices are not. */
  g_assert_false (pp_launcher_is_error_text ("WARNING: There was an error "
          "initializing an OpenFabrics device."));
  g_assert_false (pp_launcher_is_error_text ("  warning: a request was made "
          "to bind a process"));
  g_assert_false (pp_launcher_is_error_text ("No OpenFabrics connection "
          "schemes reported that they were able to be used on a specific "
          "port."));
}

static void
test_daemon_failure (void)
{
  g_assert_true (pp_launcher_is_daemon_failure ("ORTE was unable to "
          "reliably start one or more daemons."));
  g_assert_true (pp_launcher_is_daemon_failure ("ORTE has lost "
          "communication with a remote daemon."));
  g_assert_false (pp_launcher_is_daemon_failure ("Child job 2 terminated "
          "normally, but 1 process returned a non-zero exit code."));
}

static void
test_signalled_pid (void)
{
  g_assert_cmpint (pp_launcher_signalled_pid ("[vm:6576] *** Process "
          "received signal ***"), ==, 6576);
  g_assert_cmpint (pp_launcher_signalled_pid ("[gpu-1.lan:12] *** Process "
          "received signal ***"), ==, 12);
  g_assert_cmpint (pp_launcher_signalled_pid ("[vm:6576] Signal: "
          "Segmentation fault (11)"), ==, 0);
  g_assert_cmpint (pp_launcher_signalled_pid ("[vm:] *** Process received "
          "signal ***"), ==, 0);
  g_assert_cmpint (pp_launcher_signalled_pid ("[vm:65x6] *** Process "
          "received signal ***"), ==, 0);
  g_assert_cmpint (pp_launcher_signalled_pid ("x [vm:6576] *** Process "
          "received signal ***"), ==, 0);
}

static void
test_worker_exit (void)
{
  g_assert_true (pp_launcher_is_worker_exit_text ("Child job 2 terminated "
          "normally, but 1 process returned a non-zero exit code."));
  g_assert_true (pp_launcher_is_worker_exit_text ("WARNING: Open MPI failed "
          "to TCP connect to a peer MPI process.  This should not happen."));
  g_assert_false (pp_launcher_is_worker_exit_text ("ORTE was unable to "
          "reliably start one or more daemons."));
}

static void
test_noise (void)
{
  g_assert_true (pp_launcher_is_noise_line (""));
  g_assert_true (pp_launcher_is_noise_line ("   "));
  g_assert_true (pp_launcher_is_noise_line ("-----------------------------"));
  g_assert_true (pp_launcher_is_noise_line ("[ppdiffuse rank 2 pid 7] INFO  "
          "node-local rank 1"));
  g_assert_false (pp_launcher_is_noise_line ("[ppdiffuse rank 2 pid 7] "
          "ERROR worker rank 2 failed"));
  g_assert_false (pp_launcher_is_noise_line ("ssh: Could not resolve "
          "hostname gpu7: Name or service not known"));
}

static void
write_stderr (const gchar * text)
{
  g_assert_cmpint (write (STDERR_FILENO, text, strlen (text)), ==,
      (gssize) strlen (text));
}

/* Waits until the copying thread has read @needle since @mark. */
static gchar *
wait_text (guint64 mark, const gchar * needle)
{
  const gint64 deadline = g_get_monotonic_time () + WAIT_US;

  for (;;) {
    gchar *text = pp_launcher_text_since (mark);

    if (text != NULL && strstr (text, needle) != NULL)
      return text;
    g_free (text);
    g_assert_cmpint (g_get_monotonic_time (), <, deadline);
    g_usleep (10000);
  }
}

/* What is written to standard error while captured is copied on and read:
 * a warning is no failure, an error message is, and a daemon failure is
 * remembered for good; so is a crash of the daemon (a child named orted
 * here), not of another process.  (This test holds the pipe's writing end
 * after the capture ends, as Open MPI's daemon does under MPI, until it
 * has written what the daemon would.) */
static void
test_capture (void)
{
  const guint64 mark = pp_launcher_mark ();
  g_autofree gchar *text = NULL;
  g_autofree gchar *before = pp_launcher_daemon_failure ();
  g_autofree gchar *lost = NULL;
  gint64 at_us = 0;
  guint64 error_mark;
  g_autofree gchar *real_path = NULL, *real = NULL;
  g_autofree gchar *daemon_comm = NULL, *daemon_says = NULL;
  g_autofree gchar *crash = NULL, *want_crash = NULL;
  gint real_fd, saved, daemon_fd;
  pid_t daemon;

  g_assert_null (before);
  /* The real standard error, as the application sees it: a file. */
  real_fd = g_file_open_tmp ("test-launcher-XXXXXX", &real_path, NULL);
  g_assert_cmpint (real_fd, >=, 0);
  saved = dup (STDERR_FILENO);
  g_assert_cmpint (dup2 (real_fd, STDERR_FILENO), ==, STDERR_FILENO);
  pp_launcher_capture_begin ();
  write_stderr (FRAME "WARNING: a warning of no consequence.\n" FRAME);
  /* The same message again (Open MPI prints some twice): once is enough. */
  write_stderr (FRAME "WARNING: a warning of no consequence.\n" FRAME);
  write_stderr ("[ppdiffuse rank 1 pid 9] INFO  progress line\n");
  write_stderr ("ssh: Could not resolve hostname gpu7: Name or service not "
      "known\n");
  /* The framed warning has been read through the capture (the line after
   * it has): it is no failure. */
  g_free (wait_text (mark, "Name or service not known"));
  g_assert_false (pp_launcher_failed_since (mark, NULL));
  error_mark = pp_launcher_mark ();
  /* What Open MPI's daemon says when a worker exits: the element reports
   * it, and the application's standard error does not get it. */
  write_stderr (FRAME "Child job 2 terminated normally, but 1 process "
      "returned\na non-zero exit code. Per user-direction, the job has been "
      "aborted.\n" FRAME);
  write_stderr ("[vm:11346] Read -1, expected 12288, errno = 3\n");
  write_stderr (FRAME "ORTE was unable to reliably start one or more "
      "daemons. This usually is caused by:\n\n* not finding the required "
      "libraries\n" FRAME);
  /* Open MPI's daemon: a child of this process named orted, found when
   * the capture ends; like it, this test keeps the pipe's writing end. */
  daemon = fork ();
  g_assert_cmpint (daemon, >=, 0);
  if (daemon == 0) {
    prctl (PR_SET_PDEATHSIG, SIGKILL);
    prctl (PR_SET_NAME, "orted");
    pause ();
    _exit (0);
  }
  daemon_comm = g_strdup_printf ("/proc/%d/comm", (gint) daemon);
  for (gint64 deadline = g_get_monotonic_time () + WAIT_US;;) {
    g_autofree gchar *comm = NULL;

    if (g_file_get_contents (daemon_comm, &comm, NULL, NULL)
        && g_str_equal (comm, "orted\n"))
      break;
    g_assert_cmpint (g_get_monotonic_time (), <, deadline);
    g_usleep (1000);
  }
  daemon_fd = dup (STDERR_FILENO);
  pp_launcher_capture_end ();

  /* Another process's crash (a worker's) is not the daemon's. */
  daemon_says = g_strdup_printf ("[vm:%d] *** Process received signal ***\n"
      "[vm:%d] Signal: Segmentation fault (11)\n", (gint) daemon + 1,
      (gint) daemon + 1);
  g_assert_cmpint (write (daemon_fd, daemon_says, strlen (daemon_says)), ==,
      (gssize) strlen (daemon_says));
  g_free (wait_text (mark, "Segmentation fault (11)"));
  g_assert_null (pp_launcher_daemon_crash ());
  g_free (daemon_says);
  daemon_says = g_strdup_printf ("[vm:%d] *** Process received signal ***\n"
      "[vm:%d] Signal: Bus error (7)\n[vm:%d] [ 0] orted(+0x1161)[0x56]\n",
      (gint) daemon, (gint) daemon, (gint) daemon);
  g_assert_cmpint (write (daemon_fd, daemon_says, strlen (daemon_says)), ==,
      (gssize) strlen (daemon_says));
  g_free (wait_text (mark, "orted(+0x1161)"));
  crash = pp_launcher_daemon_crash ();
  want_crash = g_strdup_printf ("Open MPI's daemon on %s (pid %d, started "
      "by MPI_Init in this process) crashed with Bus error (7), a fault of "
      "Open MPI",
      g_get_host_name (), (gint) daemon);
  g_assert_cmpstr (crash, ==, want_crash);
  close (daemon_fd);
  kill (daemon, SIGKILL);
  waitpid (daemon, NULL, 0);

  text = wait_text (mark, "not finding the required libraries");
  /* Standard error got everything but the message on the worker. */
  dup2 (saved, STDERR_FILENO);
  close (saved);
  close (real_fd);
  g_assert_true (g_file_get_contents (real_path, &real, NULL, NULL));
  g_unlink (real_path);
  g_assert_nonnull (strstr (real, "WARNING: a warning of no consequence."));
  g_assert_null (strstr (strstr (real, "WARNING: a warning of no "
              "consequence.") + 1, "WARNING: a warning of no consequence."));
  g_assert_nonnull (strstr (real, "ssh: Could not resolve hostname gpu7"));
  g_assert_nonnull (strstr (real, "not finding the required libraries"));
  g_assert_nonnull (strstr (real, "progress line"));
  g_assert_null (strstr (real, "Child job 2 terminated"));
  g_assert_null (strstr (real, "Read -1, expected"));
  g_assert_nonnull (strstr (text, "Child job 2 terminated"));
  g_assert_true (pp_launcher_failed_since (error_mark, NULL));
  g_assert_nonnull (strstr (text, "ssh: Could not resolve hostname gpu7"));
  g_assert_nonnull (strstr (text, "WARNING: a warning of no consequence."));
  g_assert_null (strstr (text, "progress line"));
  g_assert_null (strstr (text, "-----"));
  g_assert_true (pp_launcher_failed_since (mark, &at_us));
  g_assert_cmpint (at_us, >, 0);
  lost = pp_launcher_daemon_failure ();
  g_assert_cmpstr (lost, ==, "ORTE was unable to reliably start one or more "
      "daemons");
  /* Nothing since a mark taken now. */
  g_assert_false (pp_launcher_failed_since (pp_launcher_mark (), NULL));
  g_assert_null (pp_launcher_text_since (pp_launcher_mark ()));
}

/* A message of rank 0's own Open MPI (a help message printed in this
 * process, pp-ompi-help.h) is kept and judged as the daemon's are, and
 * written to standard error, but for one about a worker that exited.
 * Before any capture: standard error is the file it writes to. */
static void
test_say (void)
{
  const guint64 mark = pp_launcher_mark ();
  g_autofree gchar *path = NULL, *real = NULL, *text = NULL;
  gint fd, saved;
  guint64 error_mark;

  fd = g_file_open_tmp ("test-launcher-say-XXXXXX", &path, NULL);
  g_assert_cmpint (fd, >=, 0);
  saved = dup (STDERR_FILENO);
  g_assert_cmpint (dup2 (fd, STDERR_FILENO), ==, STDERR_FILENO);
  pp_launcher_say (FRAME "WARNING: Open MPI accepted a TCP connection from "
      "what appears to be a\nanother Open MPI process but cannot find a "
      "corresponding process\nentry for that peer.\n\n  Local host: vm\n"
      FRAME);
  pp_launcher_say (FRAME "WARNING: Open MPI failed to TCP connect to a peer "
      "MPI process.  This\nshould not happen.\n" FRAME);
  g_assert_false (pp_launcher_failed_since (mark, NULL));
  error_mark = pp_launcher_mark ();
  pp_launcher_say (FRAME "It looks like MPI_Comm_spawn failed: it could not "
      "start the process.\n" FRAME);
  g_assert_true (pp_launcher_failed_since (error_mark, NULL));
  text = pp_launcher_text_since (mark);
  dup2 (saved, STDERR_FILENO);
  close (saved);
  close (fd);
  g_assert_true (g_file_get_contents (path, &real, NULL, NULL));
  g_unlink (path);
  g_assert_nonnull (strstr (text, "WARNING: Open MPI accepted a TCP "
          "connection"));
  g_assert_nonnull (strstr (text, "Local host: vm"));
  g_assert_nonnull (strstr (text, "could not start the process"));
  g_assert_null (strstr (text, "-----"));
  g_assert_nonnull (strstr (real, FRAME "WARNING: Open MPI accepted a TCP "
          "connection"));
  g_assert_nonnull (strstr (real, "could not start the process.\n" FRAME));
  g_assert_null (strstr (real, "failed to TCP connect"));
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/launcher/error-text", test_error_text);
  g_test_add_func ("/launcher/daemon-failure", test_daemon_failure);
  g_test_add_func ("/launcher/noise", test_noise);
  g_test_add_func ("/launcher/worker-exit", test_worker_exit);
  g_test_add_func ("/launcher/signalled-pid", test_signalled_pid);
  g_test_add_func ("/launcher/say", test_say);
  g_test_add_func ("/launcher/capture", test_capture);
  g_test_add_func ("/launcher/reap", test_reap);
  return g_test_run ();
}
