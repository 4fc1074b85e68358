/* ppdiffuse tests — helpers. */
#include "pp-check-util.h"

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

guint
pp_check_count_descendants (const gchar * name)
{
  g_autoptr (GHashTable) parents = g_hash_table_new (NULL, NULL);
  g_autoptr (GPtrArray) matches = g_ptr_array_new ();
  GDir *dir = g_dir_open ("/proc", 0, NULL);
  const gchar *entry;
  guint count = 0;

  g_assert (dir != NULL);
  while ((entry = g_dir_read_name (dir)) != NULL) {
    g_autofree gchar *comm = NULL;
    gint ppid;
    gchar state;
    if (!g_ascii_isdigit (entry[0]) || !read_stat (entry, &comm, &ppid, &state))
      continue;
    g_hash_table_insert (parents, GINT_TO_POINTER (atoi (entry)),
        GINT_TO_POINTER (ppid));
    if (g_str_has_prefix (comm, name) && state != 'Z' && state != 'X')
      g_ptr_array_add (matches, GINT_TO_POINTER (atoi (entry)));
  }
  g_dir_close (dir);
  for (guint i = 0; i < matches->len; i++)
    if (is_descendant (GPOINTER_TO_INT (matches->pdata[i]), parents, getpid ()))
      count++;
  return count;
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
