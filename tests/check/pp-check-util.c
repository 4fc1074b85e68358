/* ppdiffuse tests — helpers. */
#include "pp-check-util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define POLL_US 20000

static gboolean
read_stat (const gchar * pid, gchar ** comm, gint * ppid, gchar * state)
{
  g_autofree gchar *path = g_build_filename ("/proc", pid, "stat", NULL);
  g_autofree gchar *text = NULL;
  const gchar *open, *close;

  if (!g_file_get_contents (path, &text, NULL, NULL))
    return FALSE;
  open = strchr (text, '(');
  close = strrchr (text, ')');
  if (open == NULL || close == NULL)
    return FALSE;
  *comm = g_strndup (open + 1, close - open - 1);
  *state = close[2];
  *ppid = atoi (close + 4);
  return TRUE;
}

static gboolean
is_descendant (gint pid, GHashTable * parents, gint self)
{
  for (guint hops = 0; pid > 1 && hops < 64; hops++) {
    gpointer parent;
    if (pid == self)
      return TRUE;
    if (!g_hash_table_lookup_extended (parents, GINT_TO_POINTER (pid), NULL,
            &parent))
      return FALSE;
    pid = GPOINTER_TO_INT (parent);
  }
  return FALSE;
}

GArray *
pp_check_find_descendants (const gchar * name)
{
  g_autoptr (GHashTable) parents = g_hash_table_new (NULL, NULL);
  g_autoptr (GArray) matches = g_array_new (FALSE, FALSE, sizeof (gint));
  GArray *found = g_array_new (FALSE, FALSE, sizeof (gint));
  GDir *dir = g_dir_open ("/proc", 0, NULL);
  const gchar *entry;

  g_assert (dir != NULL);
  while ((entry = g_dir_read_name (dir)) != NULL) {
    g_autofree gchar *comm = NULL;
    gint pid = atoi (entry), ppid;
    gchar state;
    if (!g_ascii_isdigit (entry[0]) || !read_stat (entry, &comm, &ppid, &state))
      continue;
    g_hash_table_insert (parents, GINT_TO_POINTER (pid),
        GINT_TO_POINTER (ppid));
    if (g_str_has_prefix (comm, name) && state != 'Z' && state != 'X')
      g_array_append_val (matches, pid);
  }
  g_dir_close (dir);
  for (guint i = 0; i < matches->len; i++) {
    gint pid = g_array_index (matches, gint, i);
    if (is_descendant (pid, parents, getpid ()))
      g_array_append_val (found, pid);
  }
  return found;
}

guint
pp_check_count_descendants (const gchar * name)
{
  g_autoptr (GArray) found = pp_check_find_descendants (name);

  return found->len;
}

guint
pp_check_wait_descendants_gone (const gchar * name, guint timeout_ms)
{
  gint64 deadline = g_get_monotonic_time () + (gint64) timeout_ms * 1000;
  guint left;

  while ((left = pp_check_count_descendants (name)) > 0
      && g_get_monotonic_time () < deadline)
    g_usleep (POLL_US);
  return left;
}

GstMessage *
pp_check_pop_error (GstBus * bus, guint timeout_ms)
{
  return gst_bus_timed_pop_filtered (bus, timeout_ms * GST_MSECOND,
      GST_MESSAGE_ERROR);
}

void
pp_check_run_and_exit (Suite * suite, const gchar * name, const gchar * file)
{
  int failed = gst_check_run_suite (suite, name, file);

  fflush (stdout);
  fflush (stderr);
  _exit (failed == 0 ? 0 : 1);
}
