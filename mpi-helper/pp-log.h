/* ppdiffuse — logging shared by every rank.
 *
 * Rank 0 routes these messages into the element's GStreamer debug category
 * (pp_log_set_handler); workers print them to stderr prefixed with their
 * rank and pid, at the level PPDIFFUSE_DEBUG sets (0 none … 5 log,
 * default 2: errors and warnings). */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef enum
{
  PP_LOG_ERROR = 1,
  PP_LOG_WARNING = 2,
  PP_LOG_INFO = 3,
  PP_LOG_DEBUG = 4,
  PP_LOG_TRACE = 5,
} PpLogLevel;

#define PP_LOG_ENV "PPDIFFUSE_DEBUG"
#define PP_LOG_DEFAULT_LEVEL PP_LOG_WARNING

typedef void (*PpLogFunc) (PpLogLevel level, const gchar * message,
    gpointer user_data);

/* Routes messages up to @max_level to @func (NULL restores stderr). */
void     pp_log_set_handler (PpLogFunc func, gpointer user_data,
                             PpLogLevel max_level);
void     pp_log_set_rank    (gint rank);
gboolean pp_log_enabled     (PpLogLevel level);
void     pp_log             (PpLogLevel level, const gchar * format, ...)
    G_GNUC_PRINTF (2, 3);

#define PP_ERROR_LOG(...) pp_log (PP_LOG_ERROR, __VA_ARGS__)
#define PP_WARN(...)      pp_log (PP_LOG_WARNING, __VA_ARGS__)
#define PP_INFO(...)      pp_log (PP_LOG_INFO, __VA_ARGS__)
#define PP_DEBUG(...)     pp_log (PP_LOG_DEBUG, __VA_ARGS__)
#define PP_TRACE(...)     pp_log (PP_LOG_TRACE, __VA_ARGS__)

G_END_DECLS
