/* ppdiffuse — the CUDA backend's choices among its ways. */
#include "pp-cuda-choice.h"
#include "pp-error.h"

gboolean
pp_cuda_choice_parse (const gchar * variable, const gchar * value,
    const gchar * const *names, guint * index, GError ** error)
{
  g_autoptr (GString) expected = g_string_new (NULL);
  const guint n = g_strv_length ((gchar **) names);

  g_return_val_if_fail (n > 0, FALSE);

  if (value == NULL || *value == '\0') {
    *index = 0;
    return TRUE;
  }
  for (guint i = 0; i < n; i++)
    if (g_str_equal (value, names[i])) {
      *index = i;
      return TRUE;
    }
  for (guint i = 0; i < n; i++)
    g_string_append_printf (expected, "%s%s", i == 0 ? "" : i + 1 == n
        ? " or " : ", ", names[i]);
  g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "%s=%s: expected %s",
      variable, value, expected->str);
  return FALSE;
}
