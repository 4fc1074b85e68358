/* ppdiffuse — which of a build's device code a GPU runs. */
#include "pp-cuda-arch.h"

/* @archs' SM versions, the empty and malformed ones left out (meson's
 * cuda-archs option holds numbers: ext/meson.build adds each). */
static GArray *
parse_archs (const gchar * archs)
{
  g_auto (GStrv) parts = g_strsplit (archs != NULL ? archs : "", ",", -1);
  GArray *out = g_array_new (FALSE, FALSE, sizeof (gint));

  for (guint i = 0; parts[i] != NULL; i++) {
    guint64 sm;

    if (g_ascii_string_to_unsigned (g_strstrip (parts[i]), 10, 10, 999, &sm,
            NULL)) {
      const gint v = (gint) sm;

      g_array_append_val (out, v);
    }
  }
  return out;
}

PpCudaCode
pp_cuda_code_for (const gchar * archs, gint ptx, gint major, gint minor,
    gint * arch)
{
  g_autoptr (GArray) sms = parse_archs (archs);
  const gint device = major * 10 + minor;
  gint best = 0;

  /* A binary runs on later minor revisions of its major one. */
  for (guint i = 0; i < sms->len; i++) {
    const gint sm = g_array_index (sms, gint, i);

    if (sm / 10 == major && sm % 10 <= minor)
      best = MAX (best, sm);
  }
  if (best > 0) {
    *arch = best;
    return PP_CUDA_CODE_BINARY;
  }
  if (ptx > 0 && ptx <= device) {
    *arch = ptx;
    return PP_CUDA_CODE_PTX;
  }
  *arch = 0;
  return PP_CUDA_CODE_NONE;
}

gchar *
pp_cuda_code_describe (const gchar * archs, gint ptx)
{
  g_autoptr (GArray) sms = parse_archs (archs);
  GString *text = g_string_new (NULL);

  for (guint i = 0; i < sms->len; i++)
    g_string_append_printf (text, "%s%ssm_%d", i == 0 ? "binaries for "
        : "", i == 0 ? "" : i + 1 == sms->len ? " and " : ", ",
        g_array_index (sms, gint, i));
  if (sms->len == 1)
    g_string_replace (text, "binaries", "a binary", 1);
  if (ptx > 0)
    g_string_append_printf (text, "%sPTX for compute_%d%s",
        sms->len > 0 ? " and " : "", ptx, sms->len > 0 ? "" : " alone");
  else if (sms->len == 0)
    g_string_append (text, "no device code");
  return g_string_free (text, FALSE);
}
