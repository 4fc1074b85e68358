/* ppdiffuse — the tsan setup's control: its annotations hide no race.
 *
 * tsan-handoffs.c tells ThreadSanitizer that a GAsyncQueue hands data from
 * the pushing thread to the popping one.  This checks both sides of that
 * claim in child processes of its own (so that the races they provoke on
 * purpose stay out of the run's report directory):
 *
 *   handed-over  a thread fills a block, then pushes it; the main thread
 *                pops it and reads: clean with the preloaded library,
 *                reported without it (the hand-over is invisible there)
 *   late-write   the thread writes the block again after pushing it: a
 *                real race, which must be reported with the library too
 *
 * Built and run only in ThreadSanitizer builds. */
#include <glib.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define BLOCK 64

static gboolean late_write;

static gpointer
producer (gpointer queue)
{
  guint8 *block = g_malloc (BLOCK);

  memset (block, 1, BLOCK);
  g_async_queue_push (queue, block);
  if (late_write)
    block[0] = 2;
  return NULL;
}

/* One hand-over; the main thread reads what it was handed. */
static int
run_case (void)
{
  GAsyncQueue *queue = g_async_queue_new ();
  GThread *thread = g_thread_new ("producer", producer, queue);
  guint8 *block = g_async_queue_timeout_pop (queue, 10 * G_USEC_PER_SEC);
  volatile guint64 sum = 0;

  if (block == NULL) {
    g_printerr ("nothing was handed over within 10 s\n");
    return 1;
  }
  /* One 8-byte read a word: ThreadSanitizer keeps the last few accesses
   * to each 8 bytes, and eight byte reads of the first word could push out
   * the one that races with the late write before that write comes (it
   * then went unreported once, the producer descheduled after its push). */
  for (guint i = 0; i < BLOCK / sizeof (guint64); i++)
    sum += ((const guint64 *) block)[i];
  g_thread_join (thread);
  g_free (block);
  g_async_queue_unref (queue);
  return sum != 0 ? 0 : 1;
}

/* Runs this program on @case_name; TRUE when ThreadSanitizer's verdict
 * (exit status 66 and a data race on stderr, or a clean exit) is @racy. */
static gboolean
expect (const gchar * self, const gchar * case_name, gboolean preload,
    gboolean racy)
{
  gchar *argv[] = { (gchar *) self, (gchar *) case_name, NULL };
  gchar **envp = g_get_environ ();
  gchar *err = NULL;
  gint status = 0;
  GError *error = NULL;
  gboolean reported, ok;

  /* Reports to stderr, where this process reads them.  Every access
   * checked, GLib's too, with GLib's queue nodes from its own allocator
   * (the setup's G_SLICE=always-malloc would give them to malloc and
   * free on two threads whose ordering only GLib knows, which the setup
   * leaves to GLib and this check does not). */
  envp = g_environ_setenv (envp, "TSAN_OPTIONS",
      "halt_on_error=0:exitcode=66:log_path=stderr", TRUE);
  envp = g_environ_unsetenv (envp, "G_SLICE");
  if (!preload)
    envp = g_environ_unsetenv (envp, "LD_PRELOAD");
  if (!g_spawn_sync (NULL, argv, envp, G_SPAWN_DEFAULT, NULL, NULL, NULL,
          &err, &status, &error)) {
    g_printerr ("cannot run %s: %s\n", self, error->message);
    exit (1);
  }
  reported = strstr (err, "WARNING: ThreadSanitizer: data race") != NULL
      && WIFEXITED (status) && WEXITSTATUS (status) == 66;
  ok = reported == racy && (racy || (WIFEXITED (status)
          && WEXITSTATUS (status) == 0));
  g_print ("%s %s the preloaded hand-overs: %s (%s)\n", case_name,
      preload ? "with" : "without", reported ? "race reported" : "clean",
      ok ? "as expected" : "WRONG");
  if (!ok)
    g_printerr ("%s\n", err);
  g_free (err);
  g_strfreev (envp);
  return ok;
}

int
main (int argc, char **argv)
{
  gboolean ok = TRUE;

  if (argc == 2) {
    late_write = strcmp (argv[1], "late-write") == 0;
    return run_case ();
  }
  if (g_getenv ("LD_PRELOAD") == NULL
      || strstr (g_getenv ("LD_PRELOAD"), "tsan-handoffs") == NULL) {
    g_printerr ("run me in the tsan test setup (LD_PRELOAD names "
        "libtsan-handoffs.so)\n");
    return 1;
  }
  ok &= expect (argv[0], "handed-over", TRUE, FALSE);
  ok &= expect (argv[0], "handed-over", FALSE, TRUE);
  ok &= expect (argv[0], "late-write", TRUE, TRUE);
  return ok ? 0 : 1;
}
