/* ppdiffuse — the mesh's doorbells (mpi-helper/wire/pp-bells.h) between
 * two processes: a ring wakes a wait in another process at once, a wait
 * nobody rings lasts its timeout, and the name goes with the unlink while
 * the mapping stays. */
#include <glib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pp-bells.h"
#include "pp-error.h"

#define RANKS 3
#define RING_AFTER_MS 50
/* A wait that is rung must not last anywhere near its timeout. */
#define LONG_WAIT_US (10 * G_USEC_PER_SEC)
#define SHORT_WAIT_US (50 * 1000)

/* A process that maps @name and rings @rank's bell after RING_AFTER_MS. */
static pid_t
ring_later (const gchar * name, guint rank)
{
  pid_t pid = fork ();

  g_assert_cmpint (pid, >=, 0);
  if (pid == 0) {
    PpBells *bells = pp_bells_open (name, RANKS, NULL);

    if (bells == NULL)
      _exit (2);
    g_usleep (RING_AFTER_MS * 1000);
    pp_bells_ring (bells, rank);
    pp_bells_free (bells);
    _exit (0);
  }
  return pid;
}

/* New bells for RANKS ranks, their name in *@name. */
static PpBells *
new_bells (gchar ** name)
{
  g_autoptr (GError) error = NULL;
  PpBells *bells = pp_bells_create (RANKS, 0, name, &error);

  g_assert_no_error (error);
  return bells;
}

static void
wait_child (pid_t pid)
{
  int status = 0;

  g_assert_cmpint (waitpid (pid, &status, 0), ==, pid);
  g_assert_true (WIFEXITED (status));
  g_assert_cmpint (WEXITSTATUS (status), ==, 0);
}

static void
test_ring_wakes_other_process (void)
{
  g_autofree gchar *name = NULL;
  PpBells *bells = new_bells (&name);
  guint32 seen;
  gint64 t0, waited;
  pid_t child;

  seen = pp_bells_read (bells, 1);
  child = ring_later (name, 1);
  t0 = g_get_monotonic_time ();
  /* a wait may end early (a signal): wait until the bell moves */
  while (pp_bells_read (bells, 1) == seen
      && g_get_monotonic_time () - t0 < LONG_WAIT_US)
    pp_bells_wait (bells, 1, seen, LONG_WAIT_US);
  waited = g_get_monotonic_time () - t0;
  wait_child (child);
  g_assert_cmpuint (pp_bells_read (bells, 1), ==, seen + 1);
  /* the other ranks' bells did not move */
  g_assert_cmpuint (pp_bells_read (bells, 0), ==, 0);
  g_assert_cmpuint (pp_bells_read (bells, 2), ==, 0);
  g_test_message ("woken %.1f ms after the wait began (rung after %d ms)",
      waited / 1e3, RING_AFTER_MS);
  g_assert_cmpint (waited, <, LONG_WAIT_US / 2);
  pp_bells_free (bells);
}

static void
test_wait_without_ring_times_out (void)
{
  g_autofree gchar *name = NULL;
  PpBells *bells = new_bells (&name);
  gint64 t0, waited;

  t0 = g_get_monotonic_time ();
  pp_bells_wait (bells, 0, pp_bells_read (bells, 0), SHORT_WAIT_US);
  waited = g_get_monotonic_time () - t0;
  g_assert_cmpint (waited, >=, SHORT_WAIT_US * 8 / 10);
  g_assert_cmpint (waited, <, LONG_WAIT_US);
  /* a wait on a value that already moved returns at once */
  pp_bells_ring (bells, 0);
  t0 = g_get_monotonic_time ();
  pp_bells_wait (bells, 0, 0, LONG_WAIT_US);
  g_assert_cmpint (g_get_monotonic_time () - t0, <, LONG_WAIT_US / 2);
  pp_bells_free (bells);
}

/* Opening them for more ranks than they were made for is refused. */
static void
test_too_many_ranks_refused (void)
{
  g_autofree gchar *name = NULL;
  g_autoptr (GError) error = NULL;
  PpBells *bells = new_bells (&name);

  g_assert_null (pp_bells_open (name, RANKS + 1, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_assert_nonnull (strstr (error->message, "needed for 4 ranks"));
  pp_bells_free (bells);
}

static void
test_unlink_keeps_mapping (void)
{
  g_autofree gchar *name = NULL;
  g_autoptr (GError) error = NULL;
  PpBells *bells = new_bells (&name);
  PpBells *other;

  other = pp_bells_open (name, RANKS, &error);
  g_assert_no_error (error);
  pp_bells_unlink (bells);
  pp_bells_unlink (bells);      /* idempotent */
  /* the name is gone: another host's worker, or a late one, gets none */
  g_assert_null (pp_bells_open (name, RANKS, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_CONFIG);
  g_assert_nonnull (strstr (error->message, name));
  /* the two mappings still share the words */
  pp_bells_ring (other, 2);
  g_assert_cmpuint (pp_bells_read (bells, 2), ==, 1);
  pp_bells_free (other);
  pp_bells_free (bells);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/bells/ring-wakes-other-process",
      test_ring_wakes_other_process);
  g_test_add_func ("/bells/wait-without-ring-times-out",
      test_wait_without_ring_times_out);
  g_test_add_func ("/bells/unlink-keeps-mapping", test_unlink_keeps_mapping);
  g_test_add_func ("/bells/too-many-ranks-refused",
      test_too_many_ranks_refused);
  return g_test_run ();
}
