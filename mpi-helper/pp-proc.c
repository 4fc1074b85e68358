/* ppdiffuse — process liveness. */
#include "pp-proc.h"

#include <errno.h>
#include <string.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/types.h>
#include <unistd.h>

gboolean
pp_proc_is_local (const gchar * host)
{
  return host != NULL && g_str_equal (host, g_get_host_name ());
}

gboolean
pp_proc_is_running (gint64 pid)
{
  g_autofree gchar *path = g_strdup_printf ("/proc/%" G_GINT64_FORMAT "/stat",
      pid);
  g_autofree gchar *stat = NULL;
  const gchar *close_paren;

  if (pid <= 0)
    return FALSE;
  if (g_file_get_contents (path, &stat, NULL, NULL)) {
    /* "pid (comm) S ...": the state follows the last ')' */
    close_paren = strrchr (stat, ')');
    return close_paren == NULL || (close_paren[2] != 'Z'
        && close_paren[2] != 'X');
  }
  return kill ((pid_t) pid, 0) == 0 || errno == EPERM;
}

gboolean
pp_proc_kill (gint64 pid)
{
  return pid > 0 && kill ((pid_t) pid, SIGKILL) == 0;
}

static gint64
parent_of (gint64 pid)
{
  g_autofree gchar *path = g_strdup_printf ("/proc/%" G_GINT64_FORMAT "/stat",
      pid);
  g_autofree gchar *stat = NULL;
  const gchar *close_paren;

  if (!g_file_get_contents (path, &stat, NULL, NULL)
      || (close_paren = strrchr (stat, ')')) == NULL)
    return 0;
  /* ") S ppid ..." */
  return g_ascii_strtoll (close_paren + 4, NULL, 10);
}

static gboolean
descends_from_self (gint64 pid)
{
  const gint64 self = getpid ();

  for (guint hops = 0; pid > 1 && hops < 64; hops++) {
    pid = parent_of (pid);
    if (pid == self)
      return TRUE;
  }
  return FALSE;
}

/* OMPI_COMM_WORLD_RANK from the process's environment, or -1. */
static gint
spawned_rank (gint64 pid)
{
  g_autofree gchar *path = g_strdup_printf ("/proc/%" G_GINT64_FORMAT
      "/environ", pid);
  g_autofree gchar *env = NULL;
  static const gchar key[] = "OMPI_COMM_WORLD_RANK=";
  gsize len;

  if (!g_file_get_contents (path, &env, &len, NULL))
    return -1;
  for (gsize at = 0; at < len; at += strlen (env + at) + 1)
    if (g_str_has_prefix (env + at, key))
      return atoi (env + at + sizeof key - 1);
  return -1;
}

void
pp_proc_find_spawned (const gchar * exe, guint n, gint64 * ranks)
{
  g_autofree gchar *want = realpath (exe, NULL);
  GDir *dir = g_dir_open ("/proc", 0, NULL);
  const gchar *entry;

  memset (ranks, 0, n * sizeof *ranks);
  if (dir == NULL || want == NULL) {
    if (dir)
      g_dir_close (dir);
    return;
  }
  while ((entry = g_dir_read_name (dir)) != NULL) {
    g_autofree gchar *link = NULL;
    g_autofree gchar *target = NULL;
    gint64 pid;
    gint rank;

    if (!g_ascii_isdigit (entry[0]))
      continue;
    pid = g_ascii_strtoll (entry, NULL, 10);
    link = g_strdup_printf ("/proc/%s/exe", entry);
    target = g_file_read_link (link, NULL);
    if (target == NULL || !g_str_equal (target, want)
        || !pp_proc_is_running (pid) || !descends_from_self (pid))
      continue;
    rank = spawned_rank (pid);
    if (rank >= 0 && (guint) rank < n)
      ranks[rank] = pid;
  }
  g_dir_close (dir);
}
