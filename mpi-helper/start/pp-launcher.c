/* ppdiffuse — what Open MPI's launcher says (pp-launcher.h). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "pp-launcher.h"
#include "pp-log.h"
#include "pp-proc.h"
#include "pp-sigpipe.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

/* The most lines kept, and the most characters of one line. */
#define PP_LAUNCHER_LINES 256
#define PP_LAUNCHER_LINE_MAX 400
/* The most characters pp_launcher_text_since returns. */
#define PP_LAUNCHER_TEXT_MAX 1600
/* The most characters of a framed message held back from standard error
 * (beyond it, it goes out as it is). */
#define PP_LAUNCHER_HELD_MAX 8192
/* What the pipe holds while nobody reads it (the copying thread is slow or
 * this process is stopped): the daemon blocks only beyond that. */
#define PP_LAUNCHER_PIPE_BYTES (1 << 20)

typedef struct
{
  guint64 index;
  gint64 at_us;
  gchar *text;
  gboolean ends_error;          /* closes a framed message that is an error */
} Line;

static GMutex lock;
static Line lines[PP_LAUNCHER_LINES];   /* ring, by index */
static guint64 n_lines;         /* lines seen so far */
static GString *block;          /* the framed message being read, or NULL */
static gint read_fd = -1;       /* the pipe, for the copying thread */
static gint saved_fd = -1;      /* the real standard error */
static gboolean capturing;
/* The copying thread's framed message being read, held back from
 * standard error until it ends, or NULL. */
static GString *held;
/* The last framed message that went to standard error: Open MPI prints
 * some twice (an unreachable host's), and once is enough. */
static gchar *last_released;
/* Open MPI's first message about a daemon it lost or could not start. */
static gchar *daemon_failure;
/* The daemon MPI_Init forked (0: none found), and what its crash was,
 * once it printed one; the signal's name comes on the next line. */
static gint64 daemon_pid;
static gchar *daemon_crash;
static gboolean crash_wants_signal;

gboolean
pp_launcher_is_noise_line (const gchar * line)
{
  const gchar *p = line;

  while (*p == ' ' || *p == '\t')
    p++;
  if (*p == '\0')
    return TRUE;
  /* Open MPI frames its messages with a line of dashes. */
  if (strspn (p, "-") == strlen (p) && strlen (p) >= 10)
    return TRUE;
  /* ppdiffuse's own progress lines; its warnings and errors stay. */
  return g_str_has_prefix (p, "[ppdiffuse rank")
      && (strstr (p, "] INFO ") != NULL || strstr (p, "] DEBUG ") != NULL);
}

gint64
pp_launcher_signalled_pid (const gchar * line)
{
  const gchar *end = strstr (line, "] *** Process received signal ***");
  const gchar *colon;

  if (line[0] != '[' || end == NULL)
    return 0;
  colon = g_strrstr_len (line, end - line, ":");
  if (colon == NULL || colon + 1 == end
      || strspn (colon + 1, "0123456789") != (gsize) (end - colon - 1))
    return 0;
  return g_ascii_strtoll (colon + 1, NULL, 10);
}

gboolean
pp_launcher_is_daemon_failure (const gchar * text)
{
  return strstr (text, "unable to reliably start") != NULL
      || strstr (text, "lost communication with a remote daemon") != NULL
      || strstr (text, "daemon has unexpectedly failed") != NULL;
}

gboolean
pp_launcher_is_worker_exit_text (const gchar * text)
{
  static const gchar *const exits[] = {
    "returned a non-zero exit code", "terminated normally, but",
    "failed to TCP connect to a peer", "noticed that process rank",
    "exited on signal", "peer process has unexpectedly disconnected",
  };

  for (guint i = 0; i < G_N_ELEMENTS (exits); i++)
    if (strstr (text, exits[i]) != NULL)
      return TRUE;
  return FALSE;
}

gboolean
pp_launcher_is_error_text (const gchar * text)
{
  static const gchar *const failed[] = {
    "abort", "terminat", "exited", "unable", "fail", "lost", "not enough",
    "could not", "cannot", "can not", "error", "not found", "no such",
    "refused", "unreachable", "killed", "signal",
  };
  g_autofree gchar *lower = g_ascii_strdown (text, -1);
  const gchar *p = lower;

  while (*p == ' ' || *p == '\t')
    p++;
  if (g_str_has_prefix (p, "warning"))
    return FALSE;
  for (guint i = 0; i < G_N_ELEMENTS (failed); i++)
    if (strstr (p, failed[i]) != NULL)
      return TRUE;
  return FALSE;
}

static gboolean
is_frame (const gchar * line)
{
  return strlen (line) >= 10 && strspn (line, "-") == strlen (line);
}

gboolean
pp_launcher_reap (gint64 pid, guint grace_ms)
{
  const gint64 deadline = g_get_monotonic_time () + (gint64) grace_ms * 1000;

  while (pp_proc_is_running (pid) && g_get_monotonic_time () < deadline)
    g_usleep (20000);
  if (!pp_proc_is_running (pid))
    return FALSE;
  PP_WARN ("Open MPI's daemon (pid %" G_GINT64_FORMAT ") still runs %u ms "
      "after its crash (its signal handler is stuck): killing it", pid,
      grace_ms);
  pp_proc_kill (pid);
  return TRUE;
}

static gpointer
reap_daemon (gpointer data)
{
  pp_launcher_reap ((gint64) GPOINTER_TO_SIZE (data), PP_LAUNCHER_REAP_MS);
  return NULL;
}

/* Under lock: the daemon's signal handler's first line and the signal's
 * ("[host:pid] Signal: Segmentation fault (11)"). */
static void
note_daemon_crash (const gchar * text)
{
  const gchar *signal;

  if (crash_wants_signal) {
    crash_wants_signal = FALSE;
    signal = strstr (text, "] Signal: ");
    if (signal != NULL) {
      gchar *named = g_strdup_printf ("%s with %s, a fault of Open MPI",
          daemon_crash,
          signal + strlen ("] Signal: "));

      g_free (daemon_crash);
      daemon_crash = named;
      return;
    }
  }
  if (daemon_pid > 0 && daemon_crash == NULL
      && pp_launcher_signalled_pid (text) == daemon_pid) {
    daemon_crash = g_strdup_printf ("Open MPI's daemon on %s (pid %"
        G_GINT64_FORMAT ", started by MPI_Init in this process) crashed",
        g_get_host_name (), daemon_pid);
    crash_wants_signal = TRUE;
    g_thread_unref (g_thread_new ("pp-daemon-reap", reap_daemon,
            GSIZE_TO_POINTER ((gsize) daemon_pid)));
  }
}

/* Under lock: @text as the next kept line. */
static Line *
keep_line (const gchar * text)
{
  Line *line = &lines[n_lines % PP_LAUNCHER_LINES];

  g_free (line->text);
  line->index = n_lines++;
  line->at_us = g_get_monotonic_time ();
  line->text = g_strndup (text, PP_LAUNCHER_LINE_MAX);
  line->ends_error = FALSE;
  return line;
}

/* Under lock: a line the daemon wrote. */
static void
add_line (const gchar * text)
{
  Line *line = keep_line (text);

  note_daemon_crash (text);
  if (!is_frame (text)) {
    if (block != NULL) {
      if (block->len > 0)
        g_string_append_c (block, ' ');
      g_string_append (block, text);
    }
    return;
  }
  if (block == NULL) {
    block = g_string_new (NULL);
    return;
  }
  line->ends_error = pp_launcher_is_error_text (block->str);
  if (daemon_failure == NULL && pp_launcher_is_daemon_failure (block->str)) {
    /* Its first sentence: the rest is Open MPI's list of usual causes. */
    const gchar *end = strstr (block->str, ". ");

    daemon_failure = g_strndup (block->str, end != NULL
        ? (gsize) (end - block->str) : PP_LAUNCHER_LINE_MAX);
  }
  g_string_free (block, TRUE);
  block = NULL;
}

/* Where the copies go: the real standard error. */
static gint
out_fd (void)
{
  return saved_fd >= 0 ? saved_fd : STDERR_FILENO;
}

static void
write_all (gint fd, const gchar * data, gssize len)
{
  while (len > 0) {
    gssize n = write (fd, data, len);

    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return;
    data += n;
    len -= n;
  }
}

/* The held message goes out to standard error as it is, unless it is the
 * one that went out last. */
static void
release_held (void)
{
  if (held == NULL)
    return;
  if (g_strcmp0 (last_released, held->str) == 0) {
    PP_DEBUG ("Open MPI, again: %s", held->str);
  } else {
    write_all (out_fd (), held->str, held->len);
    g_free (last_released);
    last_released = g_strdup (held->str);
  }
  g_string_free (held, TRUE);
  held = NULL;
}

/* What Open MPI said of a worker that exited: the element reports that
 * itself, so it goes to the debug log, not standard error. */
static void
debug_worker_exit (const gchar * text)
{
  PP_DEBUG ("Open MPI on a worker that exited (the element reports it): "
      "%s", text);
}

/* Copying thread: one line (with its newline) on to standard error, but a
 * framed message only once it is whole: Open MPI's messages about a worker
 * that exited (the singleton daemon's "Child job 2 terminated normally,
 * but 1 process returned a non-zero exit code", a TCP connection to the
 * dead process that failed) repeat what the element reports itself — its
 * liveness names every worker that exits, with its rank and pid — and go
 * to the debug log instead. */
static void
pass_line (const gchar * line, gsize len)
{
  g_autofree gchar *text = g_strndup (line, len);

  g_strchomp (text);
  if (is_frame (text)) {
    if (held == NULL) {
      held = g_string_new_len (line, len);
      return;
    }
    g_string_append_len (held, line, len);
    if (pp_launcher_is_worker_exit_text (held->str)) {
      debug_worker_exit (held->str);
      g_string_free (held, TRUE);
      held = NULL;
    } else {
      release_held ();
    }
    return;
  }
  if (held != NULL && held->len + len <= PP_LAUNCHER_HELD_MAX) {
    g_string_append_len (held, line, len);
    return;
  }
  release_held ();
  /* A process's single-copy read from a peer that no longer exists
   * (ESRCH): Open MPI's shared-memory transport says so on one line. */
  if (strstr (text, "] Read -1, expected ") != NULL
      && g_str_has_suffix (text, "errno = 3")) {
    debug_worker_exit (text);
    return;
  }
  write_all (out_fd (), line, len);
}

static gpointer
copy_thread (gpointer unused)
{
  GString *partial = g_string_new (NULL);
  GString *out = g_string_new (NULL);
  gchar buf[4096];

  for (;;) {
    gssize n = read (read_fd, buf, sizeof buf);

    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    g_mutex_lock (&lock);
    for (gssize i = 0; i < n; i++) {
      g_string_append_c (out, buf[i]);
      if (buf[i] == '\n') {
        add_line (partial->str);
        g_string_truncate (partial, 0);
        pass_line (out->str, out->len);
        g_string_truncate (out, 0);
      } else if (partial->len < PP_LAUNCHER_LINE_MAX) {
        g_string_append_c (partial, buf[i]);
      }
    }
    g_mutex_unlock (&lock);
  }
  g_mutex_lock (&lock);
  if (partial->len > 0)
    add_line (partial->str);
  release_held ();
  write_all (out_fd (), out->str, out->len);
  g_mutex_unlock (&lock);
  g_string_free (partial, TRUE);
  g_string_free (out, TRUE);
  return NULL;
}

void
pp_launcher_say (const gchar * text)
{
  g_auto (GStrv) said = g_strsplit (text, "\n", -1);
  GString *body = g_string_new (NULL);
  g_autofree gchar *joined = NULL;
  Line *last = NULL;

  g_mutex_lock (&lock);
  for (guint i = 0; said[i] != NULL; i++) {
    if (*said[i] == '\0')
      continue;
    last = keep_line (said[i]);
    if (!is_frame (said[i]))
      g_string_append_printf (body, "%s%s", body->len > 0 ? " " : "",
          said[i]);
  }
  /* A message of its own, whole: no frame to wait for. */
  joined = g_string_free (body, FALSE);
  if (last != NULL)
    last->ends_error = pp_launcher_is_error_text (joined);
  if (pp_launcher_is_worker_exit_text (joined))
    debug_worker_exit (text);
  else
    write_all (out_fd (), text, strlen (text));
  g_mutex_unlock (&lock);
}

void
pp_launcher_capture_begin (void)
{
  gint fds[2];

  g_mutex_lock (&lock);
  if (capturing || read_fd >= 0 || pipe2 (fds, O_CLOEXEC) != 0) {
    g_mutex_unlock (&lock);
    return;
  }
  saved_fd = fcntl (STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
  if (saved_fd < 0) {
    close (fds[0]);
    close (fds[1]);
    g_mutex_unlock (&lock);
    return;
  }
  fcntl (fds[1], F_SETPIPE_SZ, PP_LAUNCHER_PIPE_BYTES);
  read_fd = fds[0];
  /* The copy on descriptor 2 is inherited by what MPI_Init forks; the
   * pipe's own descriptor is closed at _end. */
  dup2 (fds[1], STDERR_FILENO);
  close (fds[1]);
  capturing = TRUE;
  g_mutex_unlock (&lock);
  g_thread_unref (pp_thread_new ("pp-launcher-log", copy_thread, NULL));
}

void
pp_launcher_capture_end (void)
{
  /* The daemon MPI_Init forked for this process, if it did. */
  const gint64 daemon = pp_proc_find_child ("orted");

  g_mutex_lock (&lock);
  if (daemon_pid == 0)
    daemon_pid = daemon;
  if (capturing) {
    /* From here only Open MPI's daemon (and what it starts) writes into
     * the pipe; when it exits, the copying thread reads the end. */
    dup2 (saved_fd, STDERR_FILENO);
    capturing = FALSE;
  }
  g_mutex_unlock (&lock);
}

guint64
pp_launcher_mark (void)
{
  guint64 mark;

  g_mutex_lock (&lock);
  mark = n_lines;
  g_mutex_unlock (&lock);
  return mark;
}

/* The oldest line still kept at or after @mark; under lock. */
static guint64
first_kept (guint64 mark)
{
  return MAX (mark, n_lines > PP_LAUNCHER_LINES
      ? n_lines - PP_LAUNCHER_LINES : 0);
}

gchar *
pp_launcher_text_since (guint64 mark)
{
  GString *text = g_string_new (NULL);

  g_mutex_lock (&lock);
  for (guint64 i = first_kept (mark); i < n_lines; i++) {
    const Line *line = &lines[i % PP_LAUNCHER_LINES];
    g_autofree gchar *stripped = NULL;

    if (pp_launcher_is_noise_line (line->text))
      continue;
    stripped = g_strstrip (g_strdup (line->text));
    if (text->len > 0)
      g_string_append_c (text, ' ');
    g_string_append (text, stripped);
  }
  g_mutex_unlock (&lock);
  if (text->len == 0) {
    g_string_free (text, TRUE);
    return NULL;
  }
  if (text->len > PP_LAUNCHER_TEXT_MAX) {
    g_string_truncate (text, PP_LAUNCHER_TEXT_MAX);
    g_string_append (text, " …");
  }
  return g_string_free (text, FALSE);
}

gboolean
pp_launcher_failed_since (guint64 mark, gint64 * at_us)
{
  gboolean failed = FALSE;

  g_mutex_lock (&lock);
  for (guint64 i = first_kept (mark); i < n_lines && !failed; i++) {
    const Line *line = &lines[i % PP_LAUNCHER_LINES];

    if (line->ends_error) {
      failed = TRUE;
      if (at_us != NULL)
        *at_us = line->at_us;
    }
  }
  g_mutex_unlock (&lock);
  return failed;
}

/* A copy of the text at @text, taken under the lock. */
static gchar *
copy_locked (gchar * const *text)
{
  gchar *copy;

  g_mutex_lock (&lock);
  copy = g_strdup (*text);
  g_mutex_unlock (&lock);
  return copy;
}

gint64
pp_launcher_daemon_pid (void)
{
  gint64 pid;

  g_mutex_lock (&lock);
  pid = daemon_pid;
  g_mutex_unlock (&lock);
  return pid;
}

gchar *
pp_launcher_daemon_crash (void)
{
  return copy_locked (&daemon_crash);
}

gchar *
pp_launcher_daemon_failure (void)
{
  return copy_locked (&daemon_failure);
}
