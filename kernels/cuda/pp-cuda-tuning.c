/* ppdiffuse — the CUDA backend's timed choices kept across processes
 * (pp-cuda-tuning.h). */
#include "pp-cuda-tuning.h"

#include <errno.h>
#include <glib/gstdio.h>

/* A choice file's one group; its number changes with what it holds. */
#define GROUP "ppdiffuse CUDA choice 1"
/* The hex digits of its SHA-256 that name a choice's file (after its op):
 * 96 bits, and the file itself says what it is for. */
#define NAME_HASH_DIGITS 24

struct _PpCudaTuning
{
  gchar *folder;
  gchar *identity;
  gboolean said_unwritable;
};

PpCudaTuning *
pp_cuda_tuning_new (const gchar * value, const gchar * identity)
{
  PpCudaTuning *t;

  if (g_strcmp0 (value, "off") == 0)
    return NULL;
  t = g_new0 (PpCudaTuning, 1);
  t->folder = value != NULL && *value != '\0' ? g_strdup (value)
      : g_build_filename (g_get_user_cache_dir (), "ppdiffuse",
      "cuda-tuning", NULL);
  t->identity = g_strdup (identity);
  return t;
}

void
pp_cuda_tuning_free (PpCudaTuning * t)
{
  if (t == NULL)
    return;
  g_free (t->folder);
  g_free (t->identity);
  g_free (t);
}

const gchar *
pp_cuda_tuning_folder (const PpCudaTuning * t)
{
  return t->folder;
}

/* The file of @op's @key for @t's identity. */
static gchar *
choice_path (const PpCudaTuning * t, const gchar * op, const gchar * key)
{
  g_autofree gchar *what = g_strjoin ("\n", t->identity, op, key, NULL);
  g_autofree gchar *hash = g_compute_checksum_for_string (G_CHECKSUM_SHA256,
      what, -1);
  g_autofree gchar *name = g_strdup_printf ("%s-%.*s", op,
      NAME_HASH_DIGITS, hash);

  return g_build_filename (t->folder, name, NULL);
}

gboolean
pp_cuda_tuning_lookup (PpCudaTuning * t, const gchar * op, const gchar * key,
    gint64 * values, guint n)
{
  g_autofree gchar *path = choice_path (t, op, key);
  g_autoptr (GKeyFile) file = g_key_file_new ();
  g_autoptr (GError) error = NULL;
  g_autofree gchar *identity = NULL, *file_op = NULL, *file_key = NULL;
  g_auto (GStrv) kept = NULL;
  gsize count = 0;

  if (!g_key_file_load_from_file (file, path, G_KEY_FILE_NONE, &error)) {
    if (!g_error_matches (error, G_FILE_ERROR, G_FILE_ERROR_NOENT))
      g_message ("%s: not a choice kept by ppdiffuse (%s): the choice is "
          "made again, and the file replaced", path, error->message);
    return FALSE;
  }
  identity = g_key_file_get_string (file, GROUP, "identity", NULL);
  file_op = g_key_file_get_string (file, GROUP, "op", NULL);
  file_key = g_key_file_get_string (file, GROUP, "key", NULL);
  kept = g_key_file_get_string_list (file, GROUP, "values", &count, NULL);
  if (identity == NULL || file_op == NULL || file_key == NULL
      || kept == NULL || count != n) {
    g_message ("%s: not a choice kept by ppdiffuse (no group \"" GROUP
        "\" with identity, op, key and %u values): the choice is made again, "
        "and the file replaced", path, n);
    return FALSE;
  }
  /* Another device's, library's or shape's, which hashed the same. */
  if (!g_str_equal (identity, t->identity) || !g_str_equal (file_op, op)
      || !g_str_equal (file_key, key))
    return FALSE;
  for (guint i = 0; i < n; i++)
    if (!g_ascii_string_to_signed (kept[i], 10, G_MININT64, G_MAXINT64,
            &values[i], NULL)) {
      g_message ("%s: value %u, \"%s\", is not a number: the choice is made "
          "again, and the file replaced", path, i, kept[i]);
      return FALSE;
    }
  return TRUE;
}

void
pp_cuda_tuning_store (PpCudaTuning * t, const gchar * op, const gchar * key,
    const gint64 * values, guint n)
{
  g_autofree gchar *path = choice_path (t, op, key);
  g_autoptr (GKeyFile) file = g_key_file_new ();
  g_autoptr (GError) error = NULL;
  g_autofree gchar *text = NULL;
  g_auto (GStrv) strings = g_new0 (gchar *, n + 1);

  for (guint i = 0; i < n; i++)
    strings[i] = g_strdup_printf ("%" G_GINT64_FORMAT, values[i]);
  g_key_file_set_comment (file, NULL, NULL, " A choice of ppdiffuse's CUDA "
      "backend, timed once and kept for\n the same device, libraries and "
      "shape (" PP_CUDA_TUNING_ENV ").", NULL);
  g_key_file_set_string (file, GROUP, "identity", t->identity);
  g_key_file_set_string (file, GROUP, "op", op);
  g_key_file_set_string (file, GROUP, "key", key);
  g_key_file_set_string_list (file, GROUP, "values",
      (const gchar * const *) strings, n);
  text = g_key_file_to_data (file, NULL, NULL);
  /* Written to a temporary file and renamed: processes that start
   * together never read half a choice. */
  if (g_mkdir_with_parents (t->folder, 0700) != 0)
    g_set_error (&error, G_FILE_ERROR, g_file_error_from_errno (errno),
        "%s", g_strerror (errno));
  else
    g_file_set_contents (path, text, -1, &error);
  if (error != NULL && !t->said_unwritable) {
    t->said_unwritable = TRUE;
    g_message ("%s: the CUDA backend's timed choices cannot be kept there "
        "(%s): each process times its own (" PP_CUDA_TUNING_ENV "=FOLDER "
        "names another folder)", t->folder, error->message);
  }
}
