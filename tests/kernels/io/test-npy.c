/* Unit tests for the .npy reader and writer. */
#include "pp-npy.h"
#include "io-test-util.h"

static gchar *tmp_dir;

#define NPY_PREFIX_V1 "\x93NUMPY\x01\x00"
#define NPY_PREFIX_V2 "\x93NUMPY\x02\x00"
#define NPY_PREFIX_LEN 8

/* A .npy file from a version prefix, a header dict (padded and ended with a
 * newline here) and raw data. */
static gchar *
write_npy (const gchar * name, const gchar * prefix, const gchar * dict,
    const void *data, gsize data_len)
{
  gboolean v2 = prefix[6] == 2;
  gsize len_bytes = v2 ? 4 : 2;
  g_autoptr (GString) header = g_string_new (dict);
  g_autoptr (GByteArray) file = g_byte_array_new ();
  gchar *path = g_build_filename (tmp_dir, name, NULL);
  guint32 len;

  while ((NPY_PREFIX_LEN + len_bytes + header->len + 1) % 64)
    g_string_append_c (header, ' ');
  g_string_append_c (header, '\n');
  len = GUINT32_TO_LE ((guint32) header->len);
  g_byte_array_append (file, (const guint8 *) prefix, NPY_PREFIX_LEN);
  g_byte_array_append (file, (const guint8 *) &len, (guint) len_bytes);
  g_byte_array_append (file, (const guint8 *) header->str,
      (guint) header->len);
  g_byte_array_append (file, data, (guint) data_len);
  io_write_file (path, file->data, file->len);
  return path;
}

static void
test_roundtrip (void)
{
  static const gint64 s1[] = { 5 };
  static const gint64 s2[] = { 2, 3 };
  static const gint64 s4[] = { 2, 4, 6, 10 };
  const gint64 *shapes[] = { s1, s2, s4 };
  const guint ndims[] = { 1, 2, 4 };

  for (guint k = 0; k < G_N_ELEMENTS (shapes); k++) {
    g_autoptr (GError) error = NULL;
    g_autoptr (PpTensor) t = pp_tensor_new ("x", PP_DTYPE_F32, ndims[k],
        shapes[k], &error);
    g_autoptr (PpTensor) back = NULL;
    g_autofree gchar *name = g_strdup_printf ("tap-down_blocks.%u.npy", k);
    g_autofree gchar *path = g_build_filename (tmp_dir, name, NULL);
    g_autofree gchar *contents = NULL;
    gsize len;
    guint16 hlen;

    for (gint64 i = 0; i < pp_tensor_numel (t); i++)
      ((gfloat *) t->data)[i] = (gfloat) i / 7.0f - 1.5f;
    g_assert_true (pp_npy_save (path, t, &error));
    g_assert_no_error (error);

    /* v1.0, '<f4', data 64-aligned, header ends with a newline. */
    g_file_get_contents (path, &contents, &len, &error);
    g_assert_no_error (error);
    g_assert_cmpmem (contents, NPY_PREFIX_LEN, NPY_PREFIX_V1, NPY_PREFIX_LEN);
    memcpy (&hlen, contents + NPY_PREFIX_LEN, 2);
    hlen = GUINT16_FROM_LE (hlen);
    g_assert_cmpuint ((NPY_PREFIX_LEN + 2 + hlen) % 64, ==, 0);
    g_assert_cmpint (contents[NPY_PREFIX_LEN + 2 + hlen - 1], ==, '\n');
    g_assert_nonnull (g_strstr_len (contents + NPY_PREFIX_LEN + 2, hlen,
            "'descr': '<f4'"));
    g_assert_cmpuint (len, ==, NPY_PREFIX_LEN + 2 + hlen + t->nbytes);

    back = pp_npy_load (path, &error);
    g_assert_no_error (error);
    g_assert_true (g_str_has_suffix (name, ".npy"));
    g_assert_cmpint (strncmp (back->name, name, strlen (name) - 4), ==, 0);
    g_assert_cmpuint (strlen (back->name), ==, strlen (name) - 4);
    g_assert_cmpint (back->dtype, ==, PP_DTYPE_F32);
    g_assert_cmpuint (back->ndim, ==, ndims[k]);
    g_assert_cmpmem (back->shape, ndims[k] * sizeof (gint64), shapes[k],
        ndims[k] * sizeof (gint64));
    g_assert_cmpmem (back->data, back->nbytes, t->data, t->nbytes);
    if (k == 0)
      g_assert_nonnull (g_strstr_len (contents + NPY_PREFIX_LEN + 2, hlen,
              "'shape': (5,)"));
    if (k == 1)
      g_assert_nonnull (g_strstr_len (contents + NPY_PREFIX_LEN + 2, hlen,
              "'shape': (2, 3)"));
  }
}

/* A header written by hand, float64 data. */
static void
test_f8 (void)
{
  static const gdouble values[6] = { 1.0, -2.5, 0.1, 1e10, -0.0, 3.25 };
  guint64 le[6];
  g_autoptr (GError) error = NULL;
  g_autoptr (PpTensor) t = NULL;
  g_autofree gchar *path = NULL;

  for (guint i = 0; i < 6; i++) {
    memcpy (&le[i], &values[i], 8);
    le[i] = GUINT64_TO_LE (le[i]);
  }
  path = write_npy ("f8.npy", NPY_PREFIX_V1,
      "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }", le,
      sizeof le);
  t = pp_npy_load (path, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (t->name, ==, "f8");
  g_assert_cmpint (t->dtype, ==, PP_DTYPE_F32);
  g_assert_cmpuint (t->ndim, ==, 2);
  g_assert_cmpint (t->shape[0], ==, 2);
  g_assert_cmpint (t->shape[1], ==, 3);
  for (guint i = 0; i < 6; i++)
    g_assert_cmpfloat (((gfloat *) t->data)[i], ==, (gfloat) values[i]);
}

/* Version 2.0, keys in another order, double quotes, no trailing comma. */
static void
test_v2 (void)
{
  static const gfloat values[4] = { 1, 2, 3, 4 };
  g_autoptr (GError) error = NULL;
  g_autoptr (PpTensor) t = NULL;
  g_autofree gchar *path = write_npy ("v2.npy", NPY_PREFIX_V2,
      "{\"shape\": (1, 1, 2, 2), \"fortran_order\": False, \"descr\": \"<f4\"}",
      values, sizeof values);

  t = pp_npy_load (path, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (t->ndim, ==, 4);
  g_assert_cmpmem (t->data, t->nbytes, values, sizeof values);
}

static void
test_long_name (void)
{
  static const gint64 shape[] = { 1 };
  g_autoptr (GError) error = NULL;
  g_autoptr (PpTensor) t = pp_tensor_new ("x", PP_DTYPE_F32, 1, shape, NULL);
  g_autoptr (PpTensor) back = NULL;
  g_autofree gchar *path = g_build_filename (tmp_dir,
      "tap-up_blocks.1.attentions.0.transformer.npy", NULL);

  g_assert_true (pp_npy_save (path, t, &error));
  back = pp_npy_load (path, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (strlen (back->name), ==, PP_TENSOR_NAME_MAX);
  g_assert_true (g_str_has_prefix (back->name, "tap-up_blocks.1.attentions"));
}

#define assert_npy_error(name, prefix, dict, data, len, ...) \
  G_STMT_START { \
    g_autofree gchar *p_ = write_npy ((name), (prefix), (dict), (data), (len)); \
    GError *e_ = NULL; \
    g_assert_null (pp_npy_load (p_, &e_)); \
    io_assert_error (e_, p_, __VA_ARGS__, NULL); \
  } G_STMT_END

static void
test_errors (void)
{
  static const gfloat data[8] = { 0 };
  g_autofree gchar *missing = g_build_filename (tmp_dir, "missing.npy", NULL);
  g_autofree gchar *junk = g_build_filename (tmp_dir, "junk.npy", NULL);
  GError *error = NULL;

  assert_npy_error ("fortran.npy", NPY_PREFIX_V1,
      "{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", data, 8,
      "Fortran");
  assert_npy_error ("big.npy", NPY_PREFIX_V1,
      "{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }", data, 8,
      "'>f4'");
  assert_npy_error ("int.npy", NPY_PREFIX_V1,
      "{'descr': '<i8', 'fortran_order': False, 'shape': (1,), }", data, 8,
      "'<i8'");
  assert_npy_error ("short.npy", NPY_PREFIX_V1,
      "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", data, 8,
      "needs 12 data bytes", "has 8");
  assert_npy_error ("long.npy", NPY_PREFIX_V1,
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", data, 8,
      "needs 4 data bytes");
  assert_npy_error ("dims.npy", NPY_PREFIX_V1,
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,2), }",
      data, 8, "more than 4 dimensions");
  assert_npy_error ("scalar.npy", NPY_PREFIX_V1,
      "{'descr': '<f4', 'fortran_order': False, 'shape': (), }", data, 4,
      "0-d");
  assert_npy_error ("zero.npy", NPY_PREFIX_V1,
      "{'descr': '<f4', 'fortran_order': False, 'shape': (0, 2), }", data, 0,
      "dimension 0");
  assert_npy_error ("noshape.npy", NPY_PREFIX_V1,
      "{'descr': '<f4', 'fortran_order': False, }", data, 4, "'shape'");
  assert_npy_error ("extra.npy", NPY_PREFIX_V1,
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), 'x': 1}",
      data, 4, "'x'");
  assert_npy_error ("garbage.npy", NPY_PREFIX_V1, "{'descr' '<f4'}", data, 4,
      "bad .npy header", "expected ':'");
  assert_npy_error ("v3.npy", "\x93NUMPY\x03\x00",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }", data, 4,
      "version 3.0");

  g_assert_null (pp_npy_load (missing, &error));
  io_assert_error (error, missing, NULL);
  io_write_file (junk, "PK\x03\x04 not numpy", 15);
  error = NULL;
  g_assert_null (pp_npy_load (junk, &error));
  io_assert_error (error, junk, "magic", NULL);
  /* Header length past the end. */
  io_write_file (junk, NPY_PREFIX_V1 "\xff\x00{", 11);
  error = NULL;
  g_assert_null (pp_npy_load (junk, &error));
  io_assert_error (error, junk, "past the end", NULL);
}

static void
test_save_errors (void)
{
  static const gint64 shape[] = { 2 };
  g_autoptr (PpTensor) u8 = pp_tensor_new ("img", PP_DTYPE_U8, 1, shape, NULL);
  g_autofree gchar *path = g_build_filename (tmp_dir, "u8.npy", NULL);
  GError *error = NULL;

  g_assert_false (pp_npy_save (path, u8, &error));
  io_assert_error (error, path, "U8", NULL);
}

int
main (int argc, char **argv)
{
  int ret;

  g_test_init (&argc, &argv, NULL);
  tmp_dir = io_tmp_dir ();
  g_test_add_func ("/io/npy/roundtrip", test_roundtrip);
  g_test_add_func ("/io/npy/f8", test_f8);
  g_test_add_func ("/io/npy/v2", test_v2);
  g_test_add_func ("/io/npy/long-name", test_long_name);
  g_test_add_func ("/io/npy/errors", test_errors);
  g_test_add_func ("/io/npy/save-errors", test_save_errors);
  ret = g_test_run ();
  io_rm_dir (tmp_dir);
  g_free (tmp_dir);
  return ret;
}
