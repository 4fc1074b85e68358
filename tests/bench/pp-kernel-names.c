/* ppdiffuse — kernel names as a trace's table shows them
 * (pp-kernel-names.h). */
#include "pp-kernel-names.h"

#include <string.h>

/* Only the name's leading <source-name>s are read (an Itanium C++ ABI
 * mangling's: a length, then that many characters), nested ones (N…E)
 * joined by "::"; what follows them (template arguments, parameter
 * types) is left out. */
gchar *
pp_kernel_short_name (const gchar * name)
{
  const gchar *p = name + 2;
  gboolean nested;
  GString *out;

  if (!g_str_has_prefix (name, "_Z"))
    return g_strndup (name, PP_KERNEL_NAME_WIDTH);
  if (*p == 'L')
    p++;                        /* internal linkage */
  nested = *p == 'N';
  if (nested)
    p++;
  out = g_string_new (NULL);
  while (g_ascii_isdigit (*p)) {
    gchar *end;
    const guint64 len = g_ascii_strtoull (p, &end, 10);

    if (len == 0 || strlen (end) < len)
      break;
    if (out->len > 0)
      g_string_append (out, "::");
    g_string_append_len (out, end, (gssize) len);
    p = end + len;
    if (!nested || *p == 'I')
      break;
  }
  if (out->len == 0) {
    g_string_free (out, TRUE);
    return g_strndup (name, PP_KERNEL_NAME_WIDTH);
  }
  if (*p == 'I')
    g_string_append (out, "<...>");
  if (out->len > PP_KERNEL_NAME_WIDTH)
    g_string_truncate (out, PP_KERNEL_NAME_WIDTH);
  return g_string_free (out, FALSE);
}

