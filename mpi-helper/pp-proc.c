/* ppdiffuse — process liveness. */
#include "pp-proc.h"

#include <errno.h>
#include <string.h>
#include <signal.h>
#include <sys/types.h>

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
