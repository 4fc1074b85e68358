/* Helpers shared by the kernels/io tests. */
#pragma once

#include "pp-error.h"

#include <glib.h>
#include <glib/gstdio.h>
#include <string.h>

/* Asserts that @error is a PP_ERROR whose message contains every string of
 * the NULL-terminated list, and frees it. */
static inline void
io_assert_error (GError * error, ...)
{
  va_list ap;
  const gchar *needle;

  g_assert_nonnull (error);
  g_test_message ("error: %s", error->message);
  g_assert_true (error->domain == PP_ERROR);
  va_start (ap, error);
  while ((needle = va_arg (ap, const gchar *)) != NULL) {
    if (strstr (error->message, needle) == NULL)
      g_error ("error message \"%s\" does not contain \"%s\"",
          error->message, needle);
  }
  va_end (ap);
  g_error_free (error);
}

/* A fresh temporary directory and a path inside it. */
static inline gchar *
io_tmp_dir (void)
{
  g_autoptr (GError) error = NULL;
  gchar *dir = g_dir_make_tmp ("pp-io-test-XXXXXX", &error);

  g_assert_no_error (error);
  return dir;
}

/* Removes a directory and the plain files in it. */
static inline void
io_rm_dir (const gchar * dir)
{
  GDir *d = g_dir_open (dir, 0, NULL);
  const gchar *name;

  if (d == NULL)
    return;
  while ((name = g_dir_read_name (d)) != NULL) {
    g_autofree gchar *p = g_build_filename (dir, name, NULL);
    g_unlink (p);
  }
  g_dir_close (d);
  g_rmdir (dir);
}

static inline void
io_write_file (const gchar * path, const void *data, gsize len)
{
  g_autoptr (GError) error = NULL;

  g_file_set_contents (path, data, (gssize) len, &error);
  g_assert_no_error (error);
}
