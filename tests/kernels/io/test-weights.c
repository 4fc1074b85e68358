/* Unit tests for the weights binder: file and random sources, shape checks,
 * unused keys, determinism, save and digest. */
#include "pp-weights.h"
#include "io-test-util.h"

#include <glib/gstdio.h>
#include <math.h>
#include <time.h>
#include <utime.h>

static const gchar *data_dir;
static gchar *tmp_dir;

/* n tensors "w0".."w{n-1}" of shape [2, 3], values k * 100 + i. */
static gchar *
write_weights (const gchar * name, guint n)
{
  static const gint64 shape[] = { 2, 3 };
  gchar *path = g_build_filename (tmp_dir, name, NULL);
  g_autoptr (GPtrArray) tensors =
      g_ptr_array_new_with_free_func ((GDestroyNotify) pp_tensor_free);
  g_autoptr (GPtrArray) names = g_ptr_array_new_with_free_func (g_free);
  g_autoptr (GError) error = NULL;

  for (guint k = 0; k < n; k++) {
    PpTensor *t = pp_tensor_new ("t", PP_DTYPE_F32, 2, shape, &error);

    g_assert_no_error (error);
    for (guint i = 0; i < 6; i++)
      ((gfloat *) t->data)[i] = (gfloat) (k * 100 + i);
    g_ptr_array_add (tensors, t);
    g_ptr_array_add (names, g_strdup_printf ("w%u", k));
  }
  g_assert_true (pp_safetensors_write (path, n,
          (const gchar * const *) names->pdata,
          (const PpTensor * const *) tensors->pdata, NULL, &error));
  g_assert_no_error (error);
  return path;
}

static void
test_file_get (void)
{
  static const gint64 shape[] = { 2, 3 };
  g_autofree gchar *path = write_weights ("get.safetensors", 3);
  g_autoptr (GError) error = NULL;
  g_autoptr (PpWeights) w = pp_weights_open (path, &error);
  const gfloat *a, *b;

  g_assert_no_error (error);
  g_assert_false (pp_weights_is_random (w));
  g_assert_cmpstr (pp_weights_source (w), ==, path);
  g_assert_cmpuint (pp_weights_n_tensors (w), ==, 3);
  g_assert_cmpuint (pp_weights_n_params (w), ==, 18);
  g_assert_true (pp_weights_has (w, "w1"));
  g_assert_false (pp_weights_has (w, "w9"));
  a = pp_weights_get (w, "w1", 2, shape, &error);
  g_assert_no_error (error);
  for (guint i = 0; i < 6; i++)
    g_assert_cmpfloat (a[i], ==, 100.0f + i);
  b = pp_weights_get_kind (w, "w1", PP_WEIGHT_BIAS, 2, shape, &error);
  g_assert_true (a == b);
  /* The writer aligns F32 data: used in place, inside the mapping. */
  g_assert_cmpuint ((guintptr) a % G_ALIGNOF (gfloat), ==, 0);
}

static void
test_missing_key (void)
{
  static const gint64 shape[] = { 320, 4, 3, 3 };
  g_autofree gchar *path = write_weights ("missing.safetensors", 1);
  g_autoptr (GError) open_error = NULL;
  g_autoptr (PpWeights) w = pp_weights_open (path, &open_error);
  GError *error = NULL;

  g_assert_no_error (open_error);
  g_assert_null (pp_weights_get (w, "conv_in.weight", 4, shape, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_MODEL);
  io_assert_error (error, path, "'conv_in.weight'", "missing",
      "[320, 4, 3, 3]", NULL);
}

static void
test_wrong_shape (void)
{
  static const gint64 transposed[] = { 3, 2 };
  static const gint64 flat[] = { 6 };
  g_autofree gchar *path = write_weights ("shape.safetensors", 1);
  g_autoptr (GError) open_error = NULL;
  g_autoptr (PpWeights) w = pp_weights_open (path, &open_error);
  GError *error = NULL;

  g_assert_no_error (open_error);
  g_assert_null (pp_weights_get (w, "w0", 2, transposed, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_SHAPE);
  io_assert_error (error, path, "'w0'", "has shape [2, 3]",
      "expects [3, 2]", NULL);
  error = NULL;
  g_assert_null (pp_weights_get (w, "w0", 1, flat, &error));
  io_assert_error (error, path, "'w0'", "[2, 3]", "[6]", NULL);
}

static void
test_unused (void)
{
  static const gint64 shape[] = { 2, 3 };
  g_autofree gchar *path = write_weights ("unused.safetensors", 9);
  g_autoptr (GError) open_error = NULL;
  g_autoptr (PpWeights) w = pp_weights_open (path, &open_error);
  GError *error = NULL;

  g_assert_no_error (open_error);
  g_assert_nonnull (pp_weights_get (w, "w3", 2, shape, &error));
  g_assert_nonnull (pp_weights_get (w, "w5", 2, shape, &error));
  g_assert_no_error (error);
  /* 7 unused: the first 5 by name, then "and 2 more". */
  g_assert_false (pp_weights_check_all_used (w, &error));
  g_assert_nonnull (error);
  g_assert_null (strstr (error->message, "'w3'"));
  g_assert_null (strstr (error->message, "'w7'"));
  io_assert_error (error, path, "7 weights", "'w0'", "'w1'", "'w2'", "'w4'",
      "'w6'", "and 2 more", NULL);
  error = NULL;

  for (guint k = 0; k < 9; k++) {
    g_autofree gchar *key = g_strdup_printf ("w%u", k);
    g_assert_nonnull (pp_weights_get (w, key, 2, shape, NULL));
  }
  g_assert_true (pp_weights_check_all_used (w, &error));
  g_assert_no_error (error);
}

/* F16 and BF16 are converted to F32 once. */
static void
test_half_file (void)
{
  static const gint64 shape[] = { 2 };
  static const guint8 data[] = { 0x00, 0x3c, 0x00, 0xc1, 0x80, 0x3f, 0x20,
    0xc0
  };
  const gchar *header = "{\"b\":{\"dtype\":\"BF16\",\"shape\":[2],"
      "\"data_offsets\":[4,8]},\"h\":{\"dtype\":\"F16\",\"shape\":[2],"
      "\"data_offsets\":[0,4]}}";
  guint64 len_le = GUINT64_TO_LE ((guint64) strlen (header));
  g_autofree gchar *path = g_build_filename (tmp_dir, "half.safetensors",
      NULL);
  g_autofree gchar *saved = g_build_filename (tmp_dir, "half-f32.safetensors",
      NULL);
  g_autoptr (GByteArray) file = g_byte_array_new ();
  g_autoptr (GError) error = NULL;
  g_autoptr (PpWeights) w = NULL;
  g_autoptr (PpWeights) w2 = NULL;
  g_autoptr (PpSafetensors) st = NULL;
  const gfloat *h, *b;

  g_byte_array_append (file, (const guint8 *) &len_le, 8);
  g_byte_array_append (file, (const guint8 *) header, (guint) strlen (header));
  g_byte_array_append (file, data, sizeof data);
  io_write_file (path, file->data, file->len);

  w = pp_weights_open (path, &error);
  g_assert_no_error (error);
  h = pp_weights_get (w, "h", 1, shape, &error);
  b = pp_weights_get (w, "b", 1, shape, &error);
  g_assert_no_error (error);
  g_assert_cmpfloat (h[0], ==, 1.0f);
  g_assert_cmpfloat (h[1], ==, -2.5f);
  g_assert_cmpfloat (b[0], ==, 1.0f);
  g_assert_cmpfloat (b[1], ==, -2.5f);
  g_assert_true (pp_weights_get (w, "h", 1, shape, &error) == h);

  /* Saved as F32. */
  g_assert_true (pp_weights_save (w, saved, &error));
  g_assert_no_error (error);
  st = pp_safetensors_open (saved, &error);
  g_assert_no_error (error);
  g_assert_cmpint (pp_safetensors_find (st, "h")->dtype, ==, PP_ST_F32);
  w2 = pp_weights_open (saved, &error);
  g_assert_no_error (error);
  g_assert_cmpmem (pp_weights_get (w2, "b", 1, shape, &error), 8, b, 8);
}

/* The same requests in the same order from the same seed. */
static PpWeights *
random_model (guint64 seed)
{
  static const gint64 conv[] = { 8, 4, 3, 3 };
  static const gint64 vec[] = { 8 };
  PpWeights *w = pp_weights_new_random (seed);
  g_autoptr (GError) error = NULL;

  g_assert_nonnull (pp_weights_get (w, "conv.weight", 4, conv, &error));
  g_assert_nonnull (pp_weights_get_kind (w, "conv.bias", PP_WEIGHT_BIAS, 1,
          vec, &error));
  g_assert_nonnull (pp_weights_get_kind (w, "norm.weight",
          PP_WEIGHT_NORM_SCALE, 1, vec, &error));
  g_assert_nonnull (pp_weights_get_kind (w, "norm.bias",
          PP_WEIGHT_NORM_SHIFT, 1, vec, &error));
  g_assert_no_error (error);
  return w;
}

static void
test_random_determinism (void)
{
  g_autoptr (PpWeights) a = random_model (42);
  g_autoptr (PpWeights) b = random_model (42);
  g_autoptr (PpWeights) c = random_model (43);
  g_autoptr (PpWeights) big = random_model (G_GUINT64_CONSTANT (1) << 40);
  g_autoptr (PpWeights) zero = random_model (0);
  g_autoptr (GError) error = NULL;
  static const gint64 conv[] = { 8, 4, 3, 3 };
  static const gint64 vec[] = { 8 };

  g_assert_true (pp_weights_is_random (a));
  g_assert_cmpstr (pp_weights_source (a), ==, "random weights (seed 42)");
  g_assert_cmpuint (strlen (pp_weights_digest (a)), ==, 64);
  g_assert_cmpstr (pp_weights_digest (a), ==, pp_weights_digest (b));
  g_assert_cmpstr (pp_weights_digest (a), !=, pp_weights_digest (c));
  /* The upper 32 bits of the seed matter too. */
  g_assert_cmpstr (pp_weights_digest (big), !=, pp_weights_digest (zero));
  g_assert_cmpmem (pp_weights_get (a, "conv.weight", 4, conv, &error),
      288 * sizeof (gfloat), pp_weights_get (b, "conv.weight", 4, conv,
          &error), 288 * sizeof (gfloat));
  g_assert_cmpuint (pp_weights_n_tensors (a), ==, 4);
  g_assert_cmpuint (pp_weights_n_params (a), ==, 288 + 3 * 8);
  g_assert_true (pp_weights_has (a, "norm.bias"));
  g_assert_true (pp_weights_check_all_used (a, &error));
  g_assert_no_error (error);

  /* Asking again returns the same data and leaves the digest alone. */
  {
    g_autofree gchar *before = g_strdup (pp_weights_digest (a));

    g_assert_true (pp_weights_get_kind (a, "conv.bias", PP_WEIGHT_BIAS, 1, vec,
            &error) == pp_weights_get_kind (a, "conv.bias", PP_WEIGHT_BIAS, 1,
            vec, &error));
    g_assert_cmpstr (pp_weights_digest (a), ==, before);
    g_assert_nonnull (pp_weights_get (a, "more", 1, vec, &error));
    g_assert_cmpstr (pp_weights_digest (a), !=, before);
  }
}

static void
test_random_wrong_shape (void)
{
  static const gint64 vec[] = { 8 };
  static const gint64 other[] = { 9 };
  g_autoptr (PpWeights) w = pp_weights_new_random (1);
  GError *error = NULL;

  g_assert_nonnull (pp_weights_get (w, "x", 1, vec, &error));
  g_assert_null (pp_weights_get (w, "x", 1, other, &error));
  io_assert_error (error, "random weights (seed 1)", "'x'", "[8]", "[9]",
      NULL);
}

static void
check_stats (PpWeights * w, const gchar * key, PpWeightKind kind,
    gdouble mean, gdouble std)
{
  static const gint64 shape[] = { 400, 250 };
  const gsize n = 400 * 250;
  g_autoptr (GError) error = NULL;
  const gfloat *x = pp_weights_get_kind (w, key, kind, 2, shape, &error);
  gdouble sum = 0, sq = 0, m, s;

  g_assert_no_error (error);
  for (gsize i = 0; i < n; i++) {
    sum += x[i];
    sq += (gdouble) x[i] * x[i];
  }
  m = sum / n;
  s = sqrt (sq / n - m * m);
  g_test_message ("%s: mean %f std %f", key, m, s);
  g_assert_cmpfloat (fabs (m - mean), <, 0.01 * (std + 0.1));
  g_assert_cmpfloat (fabs (s - std), <, 0.02 * std);
}

static void
test_random_kinds (void)
{
  g_autoptr (PpWeights) w = pp_weights_new_random (7);

  check_stats (w, "weight", PP_WEIGHT_DEFAULT, 0.0, PP_WEIGHT_STD_DEFAULT);
  check_stats (w, "bias", PP_WEIGHT_BIAS, 0.0, PP_WEIGHT_STD_BIAS);
  check_stats (w, "gamma", PP_WEIGHT_NORM_SCALE, 1.0,
      PP_WEIGHT_STD_NORM_SCALE);
  check_stats (w, "beta", PP_WEIGHT_NORM_SHIFT, 0.0, PP_WEIGHT_STD_NORM_SHIFT);
}

/* The file digest computed the slow way: SHA-256 over the size and each
 * block's SHA-256, one block after the other. */
static gchar *
reference_tree_digest (const guint8 * data, gsize size)
{
  g_autoptr (GChecksum) top = g_checksum_new (G_CHECKSUM_SHA256);
  guint64 size_le = GUINT64_TO_LE ((guint64) size);

  g_checksum_update (top, (const guchar *) &size_le, sizeof size_le);
  for (gsize at = 0; at < size; at += PP_WEIGHTS_DIGEST_BLOCK) {
    g_autoptr (GChecksum) block = g_checksum_new (G_CHECKSUM_SHA256);
    guint8 sum[PP_WEIGHTS_DIGEST_BYTES];
    gsize len = sizeof sum;

    g_checksum_update (block, data + at, (gssize) MIN (size - at,
            PP_WEIGHTS_DIGEST_BLOCK));
    g_checksum_get_digest (block, sum, &len);
    g_checksum_update (top, sum, (gssize) len);
  }
  return g_strdup (g_checksum_get_string (top));
}

/* The parallel digest is the slow one's, on any number of threads, for
 * sizes around a block; any changed byte changes it; it counts as load
 * progress. */
static void
test_tree_digest (void)
{
  const gsize block = PP_WEIGHTS_DIGEST_BLOCK;
  const gsize sizes[] = { 0, 1, block - 1, block, block + 1, 3 * block + 5 };
  g_autofree guint8 *data = g_malloc (3 * block + 5);

  for (gsize i = 0; i < 3 * block + 5; i++)
    data[i] = (guint8) (i * 2654435761u >> 13);
  for (guint k = 0; k < G_N_ELEMENTS (sizes); k++) {
    g_autofree gchar *want = reference_tree_digest (data, sizes[k]);

    for (guint threads = 1; threads <= 5; threads += 2) {
      const guint64 before = pp_weights_load_progress ();
      g_autofree gchar *got = pp_weights_tree_digest (data, sizes[k],
          threads);

      g_assert_cmpstr (got, ==, want);
      g_assert_cmpuint (pp_weights_load_progress () - before, ==, sizes[k]);
    }
  }
  {
    const gsize size = 3 * block + 5;
    g_autofree gchar *whole = pp_weights_tree_digest (data, size, 4);
    const gsize at[] = { 0, block - 1, block, 2 * block + 7, size - 1 };

    for (guint k = 0; k < G_N_ELEMENTS (at); k++) {
      g_autofree gchar *changed = NULL;

      data[at[k]] ^= 1;
      changed = pp_weights_tree_digest (data, size, 4);
      data[at[k]] ^= 1;
      g_assert_cmpstr (changed, !=, whole);
    }
    /* The size is part of it: a file and its copy cut short differ even
     * where their blocks' digests would line up. */
    g_autofree gchar *shorter = pp_weights_tree_digest (data, 2 * block, 4);
    g_autofree gchar *shorter_ref = reference_tree_digest (data, 2 * block);
    g_assert_cmpstr (shorter, ==, shorter_ref);
    g_assert_cmpstr (shorter, !=, whole);
  }
}

/* Saved random weights read back identically; the file digest covers
 * every byte of it (pp_weights_tree_digest). */
static void
test_random_save (void)
{
  static const gint64 conv[] = { 8, 4, 3, 3 };
  static const gint64 vec[] = { 8 };
  g_autoptr (PpWeights) w = random_model (5);
  g_autoptr (PpWeights) back = NULL;
  g_autofree gchar *path = g_build_filename (tmp_dir, "random.safetensors",
      NULL);
  g_autoptr (GError) error = NULL;
  g_autofree gchar *contents = NULL;
  g_autofree gchar *sha = NULL;
  gsize len;

  g_assert_true (pp_weights_save (w, path, &error));
  g_assert_no_error (error);
  back = pp_weights_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (pp_weights_n_tensors (back), ==, 4);
  g_assert_cmpuint (pp_weights_n_params (back), ==, pp_weights_n_params (w));
  g_assert_cmpmem (pp_weights_get (back, "conv.weight", 4, conv, &error),
      288 * 4, pp_weights_get (w, "conv.weight", 4, conv, &error), 288 * 4);
  g_assert_cmpmem (pp_weights_get_kind (back, "norm.weight",
          PP_WEIGHT_NORM_SCALE, 1, vec, &error), 32,
      pp_weights_get_kind (w, "norm.weight", PP_WEIGHT_NORM_SCALE, 1, vec,
          &error), 32);
  g_assert_no_error (error);

  g_file_get_contents (path, &contents, &len, &error);
  g_assert_no_error (error);
  sha = reference_tree_digest ((const guint8 *) contents, len);
  g_assert_cmpstr (pp_weights_digest (back), ==, sha);
  /* Saving again gives the same bytes. */
  {
    g_autofree gchar *again = g_build_filename (tmp_dir, "again.safetensors",
        NULL);
    g_autofree gchar *contents2 = NULL;
    gsize len2;

    g_assert_true (pp_weights_save (w, again, &error));
    g_file_get_contents (again, &contents2, &len2, &error);
    g_assert_no_error (error);
    g_assert_cmpmem (contents, len, contents2, len2);
  }
}

static void
test_model_dir (void)
{
  g_autofree gchar *dir = g_build_filename (tmp_dir, "component", NULL);
  g_autofree gchar *main_path = g_build_filename (dir, PP_WEIGHTS_FILE, NULL);
  g_autofree gchar *fp16_path = g_build_filename (dir, PP_WEIGHTS_FILE_FP16,
      NULL);
  g_autoptr (GError) error = NULL;
  GError *expected = NULL;
  gchar *path;

  g_assert_cmpint (g_mkdir (dir, 0755), ==, 0);
  g_assert_null (pp_model_dir_weights_path (dir, &expected));
  io_assert_error (expected, dir, PP_WEIGHTS_FILE, PP_WEIGHTS_FILE_FP16, NULL);

  io_write_file (fp16_path, "x", 1);
  path = pp_model_dir_weights_path (dir, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (path, ==, fp16_path);
  g_free (path);

  io_write_file (main_path, "x", 1);
  path = pp_model_dir_weights_path (dir, &error);
  g_assert_cmpstr (path, ==, main_path);
  g_free (path);
  g_unlink (main_path);
  g_unlink (fp16_path);
  g_rmdir (dir);
}

static void
test_open_error (void)
{
  g_autofree gchar *path = g_build_filename (tmp_dir, "none.safetensors",
      NULL);
  GError *error = NULL;

  g_assert_null (pp_weights_open (path, &error));
  io_assert_error (error, path, NULL);
}

static void
test_fixture (void)
{
  static const gint64 conv_in[] = { 32, 4, 3, 3 };
  g_autofree gchar *dir = g_build_filename (data_dir, "unet-sd15-tiny", NULL);
  g_autofree gchar *path = NULL;
  g_autoptr (GError) error = NULL;
  g_autoptr (PpWeights) w = NULL;

  path = pp_model_dir_weights_path (dir, NULL);
  if (path == NULL) {
    g_test_skip ("no Python-written fixture (tests/data/unet-sd15-tiny)");
    return;
  }
  w = pp_weights_open (path, &error);
  g_assert_no_error (error);
  g_assert_nonnull (pp_weights_get (w, "conv_in.weight", 4, conv_in, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (strlen (pp_weights_digest (w)), ==, 64);
}

/* A file's digest is computed once: a later open reads the cache (a
 * planted value proves it), and a changed file is digested again. */
static void
test_digest_cache (void)
{
  g_autofree gchar *path = g_build_filename (tmp_dir, "cached.safetensors",
      NULL);
  g_autofree gchar *cache = pp_weights_digest_cache_path (path);
  g_autoptr (GError) error = NULL;
  g_autofree gchar *first = NULL;
  g_autofree gchar *text = NULL;
  g_auto (GStrv) lines = NULL;
  const gchar *planted =
      "00000000000000000000000000000000000000000000000000000000000000ff";

  {
    g_autoptr (PpWeights) w = random_model (11);
    g_autoptr (PpWeights) back = NULL;

    g_assert_true (pp_weights_save (w, path, &error));
    g_assert_no_error (error);
    back = pp_weights_open (path, &error);
    g_assert_no_error (error);
    first = g_strdup (pp_weights_digest (back));
  }
  g_assert_true (g_str_has_prefix (cache, tmp_dir));
  g_assert_true (g_file_get_contents (cache, &text, NULL, &error));
  lines = g_strsplit (text, "\n", -1);
  g_assert_true (g_str_has_prefix (lines[0], PP_WEIGHTS_DIGEST_FORMAT " "));
  g_assert_cmpstr (lines[1], ==, first);
  {
    g_autofree gchar *fake = g_strdup_printf ("%s\n%s\n", lines[0], planted);
    g_autoptr (PpWeights) again = NULL;

    g_assert_true (g_file_set_contents (cache, fake, -1, &error));
    again = pp_weights_open (path, &error);
    g_assert_no_error (error);
    g_assert_cmpstr (pp_weights_digest (again), ==, planted);
  }
  /* Other bytes under the same name: a new mtime, a new digest. */
  {
    g_autoptr (PpWeights) other = random_model (12);
    g_autoptr (PpWeights) back = NULL;
    g_autofree gchar *contents = NULL;
    g_autofree gchar *want = NULL;
    struct utimbuf later = { time (NULL) + 5, time (NULL) + 5 };
    gsize len;

    g_assert_true (pp_weights_save (other, path, &error));
    g_assert_no_error (error);
    g_assert_cmpint (g_utime (path, &later), ==, 0);
    g_assert_true (g_file_get_contents (path, &contents, &len, &error));
    want = reference_tree_digest ((const guint8 *) contents, len);
    back = pp_weights_open (path, &error);
    g_assert_no_error (error);
    g_assert_cmpstr (pp_weights_digest (back), ==, want);
    g_assert_cmpstr (pp_weights_digest (back), !=, planted);
    g_assert_cmpstr (pp_weights_digest (back), !=, first);
  }
}

/* A file's digest made without loading it (a worker's, beside its model's
 * load) is the file's digest, and serves the later open without reading
 * the file again, the user's cache gone or not. */
static void
test_file_digest (void)
{
  g_autofree gchar *path = g_build_filename (tmp_dir, "ahead.safetensors",
      NULL);
  g_autofree gchar *cache = pp_weights_digest_cache_path (path);
  g_autoptr (GError) error = NULL;
  g_autoptr (PpWeights) w = random_model (13);
  g_autoptr (PpWeights) back = NULL;
  g_autofree gchar *contents = NULL, *want = NULL, *ahead = NULL;
  guint64 before;
  gsize len;

  g_assert_true (pp_weights_save (w, path, &error));
  g_assert_no_error (error);
  g_assert_true (g_file_get_contents (path, &contents, &len, &error));
  want = reference_tree_digest ((const guint8 *) contents, len);
  ahead = pp_weights_file_digest (path, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (ahead, ==, want);
  g_assert_cmpint (g_unlink (cache), ==, 0);
  before = pp_weights_load_progress ();
  back = pp_weights_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (pp_weights_digest (back), ==, want);
  g_assert_cmpuint (pp_weights_load_progress (), ==, before);
  /* Not a weights file: the error names it. */
  g_assert_null (pp_weights_file_digest (tmp_dir, &error));
  g_assert_nonnull (error);
}

int
main (int argc, char **argv)
{
  int ret;

  g_test_init (&argc, &argv, NULL);
  data_dir = argc > 1 ? argv[1] : "tests/data";
  tmp_dir = io_tmp_dir ();
  /* The digest cache goes under the test's own directory. */
  g_setenv ("XDG_CACHE_HOME", tmp_dir, TRUE);
  g_test_add_func ("/io/weights/file-get", test_file_get);
  g_test_add_func ("/io/weights/missing-key", test_missing_key);
  g_test_add_func ("/io/weights/wrong-shape", test_wrong_shape);
  g_test_add_func ("/io/weights/unused", test_unused);
  g_test_add_func ("/io/weights/half-file", test_half_file);
  g_test_add_func ("/io/weights/random-determinism", test_random_determinism);
  g_test_add_func ("/io/weights/random-wrong-shape", test_random_wrong_shape);
  g_test_add_func ("/io/weights/random-kinds", test_random_kinds);
  g_test_add_func ("/io/weights/random-save", test_random_save);
  g_test_add_func ("/io/weights/tree-digest", test_tree_digest);
  g_test_add_func ("/io/weights/digest-cache", test_digest_cache);
  g_test_add_func ("/io/weights/file-digest", test_file_digest);
  g_test_add_func ("/io/weights/model-dir", test_model_dir);
  g_test_add_func ("/io/weights/open-error", test_open_error);
  g_test_add_func ("/io/weights/fixture", test_fixture);
  ret = g_test_run ();
  io_rm_dir (tmp_dir);
  g_free (tmp_dir);
  return ret;
}
