/* ppdiffuse — process liveness.
 *
 * Waits poll these while frames flow, and the spawn watch while workers
 * start: every read goes into a buffer on the stack, never the heap. */
#define _GNU_SOURCE             /* getdents64 */
#include "pp-proc.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/types.h>
#include <unistd.h>

/* The start of /proc/PID/stat: "pid (comm) S ppid ...", comm at most 16
 * bytes. */
#define PP_PROC_STAT_HEAD 256
/* Bytes of /proc's entries, and of a process's environment, read at a
 * time. */
#define PP_PROC_READ_BYTES 4096

gboolean
pp_proc_is_local (const gchar * host)
{
  return host != NULL && g_str_equal (host, g_get_host_name ());
}

/* The start of /proc/@pid/stat into @buf (NUL-terminated).  The text
 * from the last ')', the end of the command name, or NULL when it cannot
 * be read. */
static const gchar *
read_stat (gint64 pid, gchar buf[PP_PROC_STAT_HEAD])
{
  gchar path[64];
  ssize_t n;
  int fd;

  g_snprintf (path, sizeof path, "/proc/%" G_GINT64_FORMAT "/stat", pid);
  fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return NULL;
  n = read (fd, buf, PP_PROC_STAT_HEAD - 1);
  close (fd);
  if (n <= 0)
    return NULL;
  buf[n] = '\0';
  return strrchr (buf, ')');
}

gboolean
pp_proc_is_running (gint64 pid)
{
  gchar stat[PP_PROC_STAT_HEAD];
  const gchar *close_paren;

  if (pid <= 0)
    return FALSE;
  if ((close_paren = read_stat (pid, stat)) != NULL)
    /* ") S ...": the state */
    return close_paren[1] == '\0' || (close_paren[2] != 'Z'
        && close_paren[2] != 'X');
  return kill ((pid_t) pid, 0) == 0 || errno == EPERM;
}

gboolean
pp_proc_kill (gint64 pid)
{
  return pid > 0 && kill ((pid_t) pid, SIGKILL) == 0;
}

/* The parent's pid in /proc/@pid/stat, read into @stat; 0 when it
 * cannot be read. */
static gint64
read_parent (gint64 pid, gchar stat[PP_PROC_STAT_HEAD])
{
  const gchar *close_paren = read_stat (pid, stat);

  if (close_paren == NULL || strlen (close_paren) < 4)
    return 0;
  /* ") S ppid ..." */
  return g_ascii_strtoll (close_paren + 4, NULL, 10);
}

static gint64
parent_of (gint64 pid)
{
  gchar stat[PP_PROC_STAT_HEAD];

  return read_parent (pid, stat);
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

/* OMPI_COMM_WORLD_RANK from the process's environment, or -1.  The
 * environment is read a piece at a time, each variable matched against
 * the key as its bytes come. */
static gint
spawned_rank (gint64 pid)
{
  static const gchar key[] = "OMPI_COMM_WORLD_RANK=";
  const gsize key_len = sizeof key - 1;
  gchar path[64], buf[PP_PROC_READ_BYTES];
  gsize matched = 0;            /* of the key, by the current variable */
  gboolean other = FALSE;       /* the current variable is another */
  gboolean found = FALSE;
  gint value = 0;
  ssize_t n;
  int fd;

  g_snprintf (path, sizeof path, "/proc/%" G_GINT64_FORMAT "/environ", pid);
  fd = open (path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return -1;
  while (!found && (n = read (fd, buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < n && !found; i++) {
      const gchar c = buf[i];

      if (c == '\0') {
        found = matched == key_len;     /* the key's variable ends */
        matched = 0;
        other = FALSE;
      } else if (other) {
        continue;
      } else if (matched < key_len) {
        other = c != key[matched++];
      } else if (g_ascii_isdigit (c) && value < G_MAXINT / 10 - 1) {
        value = value * 10 + (c - '0');
      } else {
        other = TRUE;           /* the number ends, as atoi reads it */
      }
    }
  }
  close (fd);
  return found || matched == key_len ? value : -1;
}

/* Whether /proc/@entry is a process of @want (a resolved path) that
 * descends from this one: then its spawned rank goes into @ranks. */
static void
note_if_spawned (const gchar * entry, const gchar * want, guint n,
    gint64 * ranks)
{
  gchar path[64], target[PATH_MAX];
  gint64 pid;
  ssize_t len;
  gint rank;

  if (!g_ascii_isdigit (entry[0]))
    return;
  pid = g_ascii_strtoll (entry, NULL, 10);
  g_snprintf (path, sizeof path, "/proc/%s/exe", entry);
  len = readlink (path, target, sizeof target - 1);
  if (len <= 0)
    return;
  target[len] = '\0';
  if (!g_str_equal (target, want) || !pp_proc_is_running (pid)
      || !descends_from_self (pid))
    return;
  rank = spawned_rank (pid);
  if (rank >= 0 && (guint) rank < n)
    ranks[rank] = pid;
}

/* Calls @func with each entry's name in /proc (a pid or another name)
 * until it returns FALSE. */
static void
each_proc_entry (gboolean (*func) (const gchar * entry, gpointer data),
    gpointer data)
{
  gint64 entries[PP_PROC_READ_BYTES / sizeof (gint64)];  /* aligned */
  gboolean more = TRUE;
  ssize_t len;
  int dir;

  dir = open ("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir < 0)
    return;
  /* getdents64 rather than opendir, which allocates its buffer. */
  while (more && (len = getdents64 (dir, entries, sizeof entries)) > 0) {
    for (ssize_t at = 0; more && at < len;) {
      const struct dirent64 *e =
          (const struct dirent64 *) ((const gchar *) entries + at);

      at += e->d_reclen;
      more = func (e->d_name, data);
    }
  }
  close (dir);
}

typedef struct
{
  const gchar *want;
  guint n;
  gint64 *ranks;
} FindSpawned;

static gboolean
find_spawned_in (const gchar * entry, gpointer data)
{
  const FindSpawned *f = data;

  note_if_spawned (entry, f->want, f->n, f->ranks);
  return TRUE;
}

void
pp_proc_find_spawned (const gchar * exe, guint n, gint64 * ranks)
{
  gchar want[PATH_MAX];
  FindSpawned f = { want, n, ranks };

  memset (ranks, 0, n * sizeof *ranks);
  if (realpath (exe, want) != NULL)
    each_proc_entry (find_spawned_in, &f);
}

typedef struct
{
  const gchar *comm;
  gint64 self, found;
} FindChild;

static gboolean
find_child_in (const gchar * entry, gpointer data)
{
  FindChild *f = data;
  gchar stat[PP_PROC_STAT_HEAD];
  gint64 pid;
  gsize len;

  if (!g_ascii_isdigit (entry[0]))
    return TRUE;
  pid = g_ascii_strtoll (entry, NULL, 10);
  if (read_parent (pid, stat) != f->self)
    return TRUE;
  /* "pid (comm) ...": the command name whole. */
  len = strlen (entry);
  if (strncmp (stat + len, " (", 2) == 0
      && strncmp (stat + len + 2, f->comm, strlen (f->comm)) == 0
      && stat[len + 2 + strlen (f->comm)] == ')')
    f->found = pid;
  return f->found == 0;
}

gint64
pp_proc_find_child (const gchar * comm)
{
  FindChild f = { comm, getpid (), 0 };

  each_proc_entry (find_child_in, &f);
  return f.found;
}

guint64
pp_proc_cpu_us (void)
{
  struct rusage ru;

  if (getrusage (RUSAGE_SELF, &ru) != 0)
    return 0;
  return (guint64) ru.ru_utime.tv_sec * G_USEC_PER_SEC + ru.ru_utime.tv_usec
      + (guint64) ru.ru_stime.tv_sec * G_USEC_PER_SEC + ru.ru_stime.tv_usec;
}
