/* ppdiffuse benchmarks — the process's resident memory. */
#include "pp-bench-rss.h"

#include <stdio.h>
#include <string.h>

guint64
pp_bench_rss_kb (void)
{
  g_autofree gchar *status = NULL;
  const gchar *line;
  guint64 kb = 0;

  if (!g_file_get_contents ("/proc/self/status", &status, NULL, NULL))
    return 0;
  line = strstr (status, "VmRSS:");
  if (line != NULL)
    sscanf (line, "VmRSS: %" G_GUINT64_FORMAT, &kb);
  return kb;
}
