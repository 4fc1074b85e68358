/* ppdiffuse — logging. */
#include "pp-log.h"

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

/* Any thread logs while the element may set the handler again (each start
 * does): both are read and written atomically, data before func. */
static gpointer log_func;       /* PpLogFunc */
static gpointer log_data;
static gint log_rank = -1;
static gint log_level = -1;

void
pp_log_set_handler (PpLogFunc func, gpointer user_data, PpLogLevel max_level)
{
  g_atomic_pointer_set (&log_data, user_data);
  g_atomic_pointer_set (&log_func, (gpointer) func);
  g_atomic_int_set (&log_level, func != NULL ? (gint) max_level : -1);
}

void
pp_log_set_rank (gint rank)
{
  log_rank = rank;
}

static gint
level_from_env (void)
{
  const gchar *env = g_getenv (PP_LOG_ENV);

  if (env == NULL || *env == '\0')
    return PP_LOG_DEFAULT_LEVEL;
  return CLAMP (atoi (env), 0, PP_LOG_TRACE);
}

gboolean
pp_log_enabled (PpLogLevel level)
{
  gint current = g_atomic_int_get (&log_level);

  if (current < 0) {
    current = level_from_env ();
    g_atomic_int_set (&log_level, current);
  }
  return (gint) level <= current;
}

void
pp_log (PpLogLevel level, const gchar * format, ...)
{
  static const gchar *const names[] = { "", "ERROR", "WARN", "INFO", "DEBUG",
    "TRACE"
  };
  g_autofree gchar *message = NULL;
  PpLogFunc func;
  va_list args;

  if (!pp_log_enabled (level))
    return;
  va_start (args, format);
  message = g_strdup_vprintf (format, args);
  va_end (args);
  func = (PpLogFunc) g_atomic_pointer_get (&log_func);
  if (func != NULL) {
    func (level, message, g_atomic_pointer_get (&log_data));
    return;
  }
  fprintf (stderr, "[ppdiffuse rank %d pid %d] %-5s %s\n", log_rank,
      (int) getpid (), names[level], message);
}
