/* Unit tests for the safetensors reader and writer: round trips, F16/BF16
 * decoding, and one malformed file for every rule the reader enforces. */
#include "pp-safetensors.h"
#include "io-test-util.h"

#include <math.h>

static const gchar *data_dir;
static gchar *tmp_dir;

#define BAD_NAME "bad.safetensors"

/* ---- helpers -------------------------------------------------------------- */

/* An 8-byte length, @header verbatim, then @data_len pattern bytes. */
static GBytes *
st_bytes (const gchar * header, gsize data_len)
{
  gsize hlen = strlen (header);
  guint64 len_le = GUINT64_TO_LE ((guint64) hlen);
  guint8 *buf = g_malloc (8 + hlen + data_len);

  memcpy (buf, &len_le, 8);
  memcpy (buf + 8, header, hlen);
  for (gsize i = 0; i < data_len; i++)
    buf[8 + hlen + i] = (guint8) (i * 3 + 1);
  return g_bytes_new_take (buf, 8 + hlen + data_len);
}

/* One header entry. */
#define ENTRY(name, dtype, shape, b, e) \
  "\"" name "\":{\"dtype\":\"" dtype "\",\"shape\":" shape \
  ",\"data_offsets\":[" #b "," #e "]}"

static PpSafetensors *
parse_ok (const gchar * header, gsize data_len)
{
  g_autoptr (GBytes) bytes = st_bytes (header, data_len);
  g_autoptr (GError) error = NULL;
  PpSafetensors *st = pp_safetensors_parse (bytes, "good.safetensors",
      &error);

  g_assert_no_error (error);
  g_assert_nonnull (st);
  return st;
}

/* Parses and expects an error naming the file and every needle. */
#define assert_bad(header, data_len, ...) \
  G_STMT_START { \
    g_autoptr (GBytes) b_ = st_bytes ((header), (data_len)); \
    GError *e_ = NULL; \
    PpSafetensors *st_ = pp_safetensors_parse (b_, BAD_NAME, &e_); \
    g_assert_null (st_); \
    io_assert_error (e_, BAD_NAME, __VA_ARGS__, NULL); \
  } G_STMT_END

static PpTensor *
make_tensor (guint ndim, const gint64 * shape, gfloat offset)
{
  g_autoptr (GError) error = NULL;
  PpTensor *t = pp_tensor_new ("t", PP_DTYPE_F32, ndim, shape, &error);

  g_assert_no_error (error);
  for (gint64 i = 0; i < pp_tensor_numel (t); i++)
    ((gfloat *) t->data)[i] = offset + (gfloat) i *0.25f - 3.0f;
  return t;
}

/* ---- round trips ------------------------------------------------------------ */

static void
test_roundtrip (void)
{
  static const gint64 s0[] = { 1 };
  static const gint64 s1[] = { 3, 4 };
  static const gint64 s2[] = { 2, 3, 4, 5 };
  static const gint64 s3[] = { 7, 1, 1, 2 };
  static const gint64 s4[] = { 5 };
  /* Not in sorted order, one longer than a PpTensor name. */
  const gchar *names[] = {
    "zeta", "down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q.weight",
    "alpha", "conv_in.weight", "b\"quoted\\name",
  };
  const gint64 *shapes[] = { s0, s1, s2, s3, s4 };
  const guint ndims[] = { 1, 2, 4, 4, 1 };
  PpTensor *tensors[G_N_ELEMENTS (names)];
  g_autoptr (GHashTable) meta = g_hash_table_new (g_str_hash, g_str_equal);
  g_autofree gchar *path = g_build_filename (tmp_dir, "rt.safetensors", NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (PpSafetensors) st = NULL;
  g_autofree gchar *contents = NULL;
  gsize len;
  guint64 header_len;

  for (guint i = 0; i < G_N_ELEMENTS (names); i++)
    tensors[i] = make_tensor (ndims[i], shapes[i], (gfloat) i * 100.0f);
  g_hash_table_insert (meta, "format", "pt");
  g_hash_table_insert (meta, "note", "line\nbreak \"quoted\"");
  g_assert_true (pp_safetensors_write (path, G_N_ELEMENTS (names), names,
          (const PpTensor * const *) tensors, meta, &error));
  g_assert_no_error (error);

  /* Header padded to a multiple of 8, keys sorted, data 8-aligned. */
  g_file_get_contents (path, &contents, &len, &error);
  g_assert_no_error (error);
  memcpy (&header_len, contents, 8);
  header_len = GUINT64_FROM_LE (header_len);
  g_assert_cmpuint (header_len % 8, ==, 0);
  g_assert_cmpint (contents[8], ==, '{');
  {
    const gchar *close = g_strrstr_len (contents + 8, (gssize) header_len, "}");

    g_assert_nonnull (close);
    for (const gchar * p = close + 1; p < contents + 8 + header_len; p++)
      g_assert_cmpint (*p, ==, ' ');
  }
  g_assert_nonnull (strstr (contents + 8, "\"__metadata__\":{\"format\":\"pt\""));

  st = pp_safetensors_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpstr (pp_safetensors_path (st), ==, path);
  g_assert_cmpuint (pp_safetensors_n_entries (st), ==, G_N_ELEMENTS (names));
  for (guint i = 1; i < pp_safetensors_n_entries (st); i++)
    g_assert_cmpint (strcmp (pp_safetensors_entry (st, i - 1)->name,
            pp_safetensors_entry (st, i)->name), <, 0);
  for (guint i = 0; i < G_N_ELEMENTS (names); i++) {
    const PpStEntry *e = pp_safetensors_find (st, names[i]);
    g_autofree gfloat *back = NULL;

    g_assert_nonnull (e);
    g_assert_cmpstr (e->name, ==, names[i]);
    g_assert_cmpint (e->dtype, ==, PP_ST_F32);
    g_assert_cmpuint (e->ndim, ==, ndims[i]);
    g_assert_cmpmem (e->shape, ndims[i] * sizeof (gint64), shapes[i],
        ndims[i] * sizeof (gint64));
    g_assert_cmpuint (e->nbytes, ==, tensors[i]->nbytes);
    g_assert_cmpuint (pp_st_entry_numel (e), ==, pp_tensor_numel (tensors[i]));
    back = g_new (gfloat, pp_st_entry_numel (e));
    g_assert_true (pp_safetensors_read_f32 (e, back));
    g_assert_cmpmem (back, e->nbytes, tensors[i]->data, tensors[i]->nbytes);
  }
  g_assert_null (pp_safetensors_find (st, "missing"));
  g_assert_cmpuint (g_hash_table_size (pp_safetensors_metadata (st)), ==, 2);
  g_assert_cmpstr (g_hash_table_lookup (pp_safetensors_metadata (st),
          "format"), ==, "pt");
  g_assert_cmpstr (g_hash_table_lookup (pp_safetensors_metadata (st),
          "note"), ==, "line\nbreak \"quoted\"");
  for (guint i = 0; i < G_N_ELEMENTS (names); i++)
    pp_tensor_free (tensors[i]);
}

/* No tensors at all, and no metadata: "{}" padded to 8 bytes. */
static void
test_roundtrip_empty (void)
{
  g_autofree gchar *path = g_build_filename (tmp_dir, "empty.safetensors",
      NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (PpSafetensors) st = NULL;

  g_assert_true (pp_safetensors_write (path, 0, NULL, NULL, NULL, &error));
  g_assert_no_error (error);
  st = pp_safetensors_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (pp_safetensors_n_entries (st), ==, 0);
  g_assert_cmpuint (g_hash_table_size (pp_safetensors_metadata (st)), ==, 0);
}

static void
test_write_errors (void)
{
  static const gint64 shape[] = { 2 };
  g_autofree gchar *path = g_build_filename (tmp_dir, "never.safetensors",
      NULL);
  g_autoptr (PpTensor) f32 = make_tensor (1, shape, 0.0f);
  g_autoptr (PpTensor) u8 = pp_tensor_new ("u", PP_DTYPE_U8, 1, shape, NULL);
  const PpTensor *two[] = { f32, f32 };
  const gchar *dup_names[] = { "a", "a" };
  const gchar *meta_name[] = { PP_ST_METADATA_KEY };
  const PpTensor *bytes[] = { u8 };
  GError *error = NULL;

  g_assert_false (pp_safetensors_write (path, 2, dup_names, two, NULL,
          &error));
  io_assert_error (error, path, "'a'", "twice", NULL);
  error = NULL;
  g_assert_false (pp_safetensors_write (path, 1, dup_names, bytes, NULL,
          &error));
  io_assert_error (error, path, "'a'", "U8", NULL);
  error = NULL;
  g_assert_false (pp_safetensors_write (path, 1, meta_name, two, NULL,
          &error));
  io_assert_error (error, path, PP_ST_METADATA_KEY, NULL);
  g_assert_false (g_file_test (path, G_FILE_TEST_EXISTS));
}

/* Entries of up to 8 dimensions and scalars, through the entry writer. */
static void
test_write_entries (void)
{
  static const gfloat values[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
  PpStEntry entries[2] = {
    {"eight", PP_ST_F32, 8, {1, 2, 1, 2, 1, 2, 1, 1}, sizeof values,
        (const guint8 *) values},
    {"scalar", PP_ST_F32, 0, {0}, sizeof (gfloat), (const guint8 *) values},
  };
  g_autofree gchar *path = g_build_filename (tmp_dir, "dims.safetensors",
      NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (PpSafetensors) st = NULL;
  gfloat back[8];

  g_assert_true (pp_safetensors_write_entries (path, 2, entries, NULL,
          &error));
  g_assert_no_error (error);
  st = pp_safetensors_open (path, &error);
  g_assert_no_error (error);
  g_assert_cmpuint (pp_safetensors_find (st, "eight")->ndim, ==, 8);
  g_assert_cmpuint (pp_safetensors_find (st, "scalar")->ndim, ==, 0);
  g_assert_true (pp_safetensors_read_f32 (pp_safetensors_find (st, "eight"),
          back));
  g_assert_cmpmem (back, sizeof back, values, sizeof values);
  g_assert_true (pp_safetensors_read_f32 (pp_safetensors_find (st, "scalar"),
          back));
  g_assert_cmpfloat (back[0], ==, 1.0f);
}

/* ---- F16 and BF16 ------------------------------------------------------------ */

typedef struct
{
  guint16 bits;
  gfloat value;
} Known;

static void
check_known (gfloat (*convert) (guint16), const Known * k, guint n)
{
  for (guint i = 0; i < n; i++) {
    gfloat got = convert (k[i].bits);

    if (isnan (k[i].value))
      g_assert_true (isnan (got));
    else {
      g_assert_cmpfloat (got, ==, k[i].value);
      g_assert_cmpint (!!signbit (got), ==, !!signbit (k[i].value));
    }
  }
}

static void
test_f16_bits (void)
{
  const Known known[] = {
    {0x3c00, 1.0f},
    {0xc100, -2.5f},
    {0x7bff, 65504.0f},         /* largest finite */
    {0x0001, 5.9604644775390625e-8f},   /* smallest subnormal, 2^-24 */
    {0x8001, -5.9604644775390625e-8f},
    {0x03ff, 6.097555160522461e-5f},    /* largest subnormal */
    {0x0400, 6.103515625e-5f},  /* smallest normal, 2^-14 */
    {0x0200, 3.0517578125e-5f}, /* 2^-15 */
    {0x3555, 0.333251953125f},
    {0x0000, 0.0f},
    {0x8000, -0.0f},
    {0x7c00, INFINITY},
    {0xfc00, -INFINITY},
    {0x7e00, NAN},
    {0xfd01, NAN},
  };

  check_known (pp_half_to_float, known, G_N_ELEMENTS (known));
}

static void
test_bf16_bits (void)
{
  const Known known[] = {
    {0x3f80, 1.0f},
    {0xc020, -2.5f},
    {0x4049, 3.140625f},
    {0x477f, 65280.0f},
    {0x7f7f, 3.3895313892515355e38f},   /* largest finite */
    {0x0001, 9.183549615799121e-41f},   /* smallest subnormal */
    {0x0080, 1.1754943508222875e-38f},  /* smallest normal */
    {0x8000, -0.0f},
    {0x7f80, INFINITY},
    {0xff80, -INFINITY},
    {0x7fc0, NAN},
  };

  check_known (pp_bf16_to_float, known, G_N_ELEMENTS (known));
}

/* F16 and BF16 entries in a file decode through read_f32, at odd data
 * offsets (unaligned) too. */
static void
test_half_entries (void)
{
  static const guint8 f16[] = { 0x00, 0x3c, 0x00, 0xc1, 0x01, 0x00, 0x00, 0x7c };
  static const guint8 bf16[] = { 0x80, 0x3f, 0x20, 0xc0, 0xc0, 0x7f };
  static const guint8 one_byte_f16[] = { 0xff, 0x7b };
  const gchar *header = "{\"h\":{\"dtype\":\"F16\",\"shape\":[2,2],"
      "\"data_offsets\":[0,8]},\"b\":{\"dtype\":\"BF16\",\"shape\":[3],"
      "\"data_offsets\":[8,14]},\"m\":{\"dtype\":\"F16\",\"shape\":[1],"
      "\"data_offsets\":[14,16]}}";
  gsize hlen = strlen (header);
  guint64 len_le = GUINT64_TO_LE ((guint64) hlen);
  g_autoptr (GByteArray) file = g_byte_array_new ();
  g_autoptr (GBytes) bytes = NULL;
  g_autoptr (GError) error = NULL;
  g_autoptr (PpSafetensors) st = NULL;
  gfloat out[4];

  g_byte_array_append (file, (const guint8 *) &len_le, 8);
  g_byte_array_append (file, (const guint8 *) header, (guint) hlen);
  g_byte_array_append (file, f16, sizeof f16);
  g_byte_array_append (file, bf16, sizeof bf16);
  g_byte_array_append (file, one_byte_f16, sizeof one_byte_f16);
  bytes = g_byte_array_free_to_bytes (g_steal_pointer (&file));
  st = pp_safetensors_parse (bytes, "half", &error);
  g_assert_no_error (error);

  g_assert_cmpint (pp_safetensors_find (st, "h")->dtype, ==, PP_ST_F16);
  g_assert_true (pp_safetensors_read_f32 (pp_safetensors_find (st, "h"), out));
  g_assert_cmpfloat (out[0], ==, 1.0f);
  g_assert_cmpfloat (out[1], ==, -2.5f);
  g_assert_cmpfloat (out[2], ==, 5.9604644775390625e-8f);
  g_assert_true (isinf (out[3]) && out[3] > 0);
  g_assert_cmpint (pp_safetensors_find (st, "b")->dtype, ==, PP_ST_BF16);
  g_assert_true (pp_safetensors_read_f32 (pp_safetensors_find (st, "b"), out));
  g_assert_cmpfloat (out[0], ==, 1.0f);
  g_assert_cmpfloat (out[1], ==, -2.5f);
  g_assert_true (isnan (out[2]));
  g_assert_true (pp_safetensors_read_f32 (pp_safetensors_find (st, "m"), out));
  g_assert_cmpfloat (out[0], ==, 65504.0f);
}

/* ---- accepted oddities -------------------------------------------------------- */

static void
test_accepts (void)
{
  PpSafetensors *st;

  /* Padded with spaces, metadata, a zero-size tensor and a scalar. */
  st = parse_ok ("{\"__metadata__\":{\"format\":\"pt\"},"
      "\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
      "\"z\":{\"dtype\":\"F32\",\"shape\":[0,3],\"data_offsets\":[8,8]},"
      "\"s\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[8,12]}}     ",
      12);
  g_assert_cmpuint (pp_safetensors_n_entries (st), ==, 3);
  g_assert_cmpstr (pp_safetensors_entry (st, 0)->name, ==, "a");
  g_assert_cmpuint (pp_safetensors_find (st, "z")->nbytes, ==, 0);
  g_assert_cmpuint (pp_st_entry_numel (pp_safetensors_find (st, "s")), ==, 1);
  g_assert_cmpstr (g_hash_table_lookup (pp_safetensors_metadata (st),
          "format"), ==, "pt");
  pp_safetensors_free (st);

  /* Entries listed out of data order; whitespace everywhere. */
  st = parse_ok (" {\n \"b\" : { \"dtype\" : \"BF16\", \"shape\" : [ 1 ] ,"
      " \"data_offsets\" : [ 4 , 6 ] } ,\n \"a\" : {\"data_offsets\":[0,4],"
      "\"shape\":[2],\"dtype\":\"F16\"}\n}\n", 6);
  g_assert_cmpstr (pp_safetensors_entry (st, 0)->name, ==, "a");
  g_assert_cmpstr (pp_safetensors_entry (st, 1)->name, ==, "b");
  pp_safetensors_free (st);

  /* Escapes, a surrogate pair among them, in a key. */
  st = parse_ok ("{" ENTRY ("\\ud83d\\ude00 \\u00e9\\n\\/", "F32", "[1]", 0, 4)
      "}", 4);
  g_assert_nonnull (pp_safetensors_find (st, "\xf0\x9f\x98\x80 \xc3\xa9\n/"));
  pp_safetensors_free (st);

  /* Empty header object and no data. */
  st = parse_ok ("{}", 0);
  g_assert_cmpuint (pp_safetensors_n_entries (st), ==, 0);
  pp_safetensors_free (st);
}

/* ---- malformed files ---------------------------------------------------------- */

static void
test_bad_header_length (void)
{
  guint8 raw[16] = { 0 };
  guint64 len_le = GUINT64_TO_LE (1000);
  g_autoptr (GBytes) bytes = NULL;
  GError *error = NULL;

  memcpy (raw, &len_le, 8);
  bytes = g_bytes_new (raw, sizeof raw);
  g_assert_null (pp_safetensors_parse (bytes, BAD_NAME, &error));
  io_assert_error (error, "header length 1000 past the end of " BAD_NAME
      " (size 16)", NULL);

  /* A length that overflows when added to 8. */
  len_le = GUINT64_TO_LE (G_MAXUINT64 - 4);
  memcpy (raw, &len_le, 8);
  g_bytes_unref (bytes);
  bytes = g_bytes_new (raw, sizeof raw);
  error = NULL;
  g_assert_null (pp_safetensors_parse (bytes, BAD_NAME, &error));
  io_assert_error (error, "past the end of " BAD_NAME, NULL);

  /* Shorter than the length field itself. */
  g_bytes_unref (bytes);
  bytes = g_bytes_new (raw, 5);
  error = NULL;
  g_assert_null (pp_safetensors_parse (bytes, BAD_NAME, &error));
  io_assert_error (error, BAD_NAME, "5 bytes", "too short", NULL);
}

/* A valid file cut short on disk, at several points. */
static void
test_truncated_file (void)
{
  static const gint64 shape[] = { 4, 4 };
  g_autoptr (PpTensor) t = make_tensor (2, shape, 0.0f);
  const gchar *names[] = { "w" };
  const PpTensor *tensors[] = { t };
  g_autofree gchar *good = g_build_filename (tmp_dir, "good.safetensors",
      NULL);
  g_autofree gchar *cut = g_build_filename (tmp_dir, "cut.safetensors", NULL);
  g_autoptr (GError) error = NULL;
  g_autofree gchar *contents = NULL;
  gsize len;
  const gsize cuts[] = { 0, 3, 8, 20, 0 /* len - 1, set below */  };
  gsize cut_at[G_N_ELEMENTS (cuts)];

  g_assert_true (pp_safetensors_write (good, 1, names, tensors, NULL, &error));
  g_assert_no_error (error);
  g_file_get_contents (good, &contents, &len, &error);
  g_assert_no_error (error);
  memcpy (cut_at, cuts, sizeof cuts);
  cut_at[G_N_ELEMENTS (cuts) - 1] = len - 1;
  for (guint i = 0; i < G_N_ELEMENTS (cut_at); i++) {
    GError *e = NULL;

    io_write_file (cut, contents, cut_at[i]);
    g_assert_null (pp_safetensors_open (cut, &e));
    io_assert_error (e, cut, NULL);
  }
  /* The last cut leaves the header whole: the tensor runs past the data. */
  {
    GError *e = NULL;

    g_assert_null (pp_safetensors_open (cut, &e));
    io_assert_error (e, cut, "'w'", "past the end", NULL);
  }
}

static void
test_missing_file (void)
{
  g_autofree gchar *path = g_build_filename (tmp_dir, "nope.safetensors",
      NULL);
  GError *error = NULL;

  g_assert_null (pp_safetensors_open (path, &error));
  io_assert_error (error, path, NULL);
}

static void
test_bad_json (void)
{
  assert_bad ("{\"a\":{\"dtype\":\"F32\",", 0, "bad JSON");
  assert_bad ("", 0, "bad JSON", "not a JSON object");
  assert_bad ("[1,2]", 0, "not a JSON object");
  /* Things json-glib alone would let through. */
  assert_bad ("{'a':1}", 0, "bad JSON");
  assert_bad ("{/*c*/}", 0, "bad JSON");
  assert_bad ("{} {}", 0, "bad JSON", "after the JSON object");
  assert_bad ("{\"a\":{\"dtype\":\"F32\",\"shape\":[0x2],"
      "\"data_offsets\":[0,8]}}", 8, "bad JSON");
  assert_bad ("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
      "\"data_offsets\":[0,18446744073709551624]}}", 8, "integer too large");
  assert_bad ("{\"a\\u0000b\":1}", 0, "NUL");
  assert_bad ("{\"a\":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]"
      "]]]]]]]]]]]]]]]]]]]}", 0, "nested too deeply");
  assert_bad ("{\"\xff\":1}", 0, "not UTF-8");
  assert_bad ("{\"a\":\"x\ty\"}", 0, "control character");
  assert_bad ("{\"\\udc00\":1}", 0, "low surrogate");
  assert_bad ("{\"\\ud83dx\":1}", 0, "high surrogate");
  assert_bad ("{\"\\ud83d\\u0041\":1}", 0, "without its low half");
  assert_bad ("{\"\\u12\":1}", 0, "four hex digits");
}

static void
test_bad_entries (void)
{
  /* Missing fields. */
  assert_bad ("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "'a'",
      "no data_offsets");
  assert_bad ("{\"a\":{\"dtype\":\"F32\",\"data_offsets\":[0,8]}}", 8, "'a'",
      "no shape");
  assert_bad ("{\"a\":{\"shape\":[2],\"data_offsets\":[0,8]}}", 8, "'a'",
      "no dtype");
  assert_bad ("{\"a\":5}", 0, "'a'", "must be an object");
  /* Wrong types inside an entry. */
  assert_bad ("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],"
      "\"data_offsets\":[0,8]}}", 8, "'a'", "shape[0]");
  assert_bad ("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],"
      "\"data_offsets\":[0,8]}}", 8, "'a'", "shape[0]");
  assert_bad ("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
      "\"data_offsets\":[0]}}", 8, "'a'", "data_offsets");
  assert_bad ("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],"
      "\"data_offsets\":[0,\"8\"]}}", 8, "'a'", "data_offsets[1]");
  assert_bad ("{\"a\":{\"dtype\":32,\"shape\":[2],\"data_offsets\":[0,8]}}",
      8, "'a'", "dtype must be a string");
  assert_bad ("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],"
      "\"data_offsets\":[0,4]}}", 4, "'a'", "9 dimensions");
  /* Unknown dtype, named with its key. */
  assert_bad ("{" ENTRY ("mask", "BOOL", "[1]", 0, 1) "}", 1, "'mask'",
      "BOOL");
  assert_bad ("{" ENTRY ("a", "F64", "[1]", 0, 8) "}", 8, "'a'", "F64");
  /* Metadata that is not string → string. */
  assert_bad ("{\"__metadata__\":{\"n\":1}}", 0, "__metadata__", "'n'",
      "must be a string");
  assert_bad ("{\"__metadata__\":[]}", 0, "__metadata__");
}

static void
test_bad_offsets (void)
{
  /* Offsets not matching the shape. */
  assert_bad ("{" ENTRY ("a", "F32", "[2,3]", 0, 20) "}", 20, "'a'",
      "needs 24 bytes", "[0, 20]");
  assert_bad ("{" ENTRY ("a", "F16", "[3]", 0, 8) "}", 8, "'a'",
      "needs 6 bytes");
  /* Shape whose size overflows. */
  assert_bad ("{" ENTRY ("a", "F32",
          "[4294967296,4294967296,4294967296]", 0, 8) "}", 8, "'a'",
      "overflows");
  /* Huge but representable: compared, not multiplied into an overflow. */
  assert_bad ("{" ENTRY ("a", "F32", "[1073741824,1073741824]", 0, 8) "}", 8,
      "'a'", "needs 4611686018427387904 bytes");
  /* End before begin. */
  assert_bad ("{" ENTRY ("a", "F32", "[0]", 8, 4) "}", 8, "'a'",
      "end before they begin");
  /* Overlap, named by both keys. */
  assert_bad ("{" ENTRY ("a", "F32", "[2]", 0, 8) ","
      ENTRY ("b", "F32", "[2]", 4, 12) "}", 12, "'a'", "'b'", "overlap");
  /* The same range twice. */
  assert_bad ("{" ENTRY ("a", "F32", "[2]", 0, 8) ","
      ENTRY ("b", "F32", "[2]", 0, 8) "}", 8, "'a'", "'b'", "overlap");
  /* A zero-size tensor inside another one. */
  assert_bad ("{" ENTRY ("a", "F32", "[2]", 0, 8) ","
      ENTRY ("z", "F32", "[0]", 4, 4) "}", 8, "'a'", "'z'", "overlap");
  /* Hole between tensors. */
  assert_bad ("{" ENTRY ("a", "F32", "[2]", 0, 8) ","
      ENTRY ("b", "F32", "[2]", 12, 20) "}", 20, "gap of 4 bytes", "'a'",
      "'b'");
  /* Hole at the start. */
  assert_bad ("{" ENTRY ("a", "F32", "[2]", 4, 12) "}", 12, "gap of 4 bytes",
      "before tensor 'a'");
  /* Trailing bytes past the last tensor. */
  assert_bad ("{" ENTRY ("a", "F32", "[2]", 0, 8) ","
      ENTRY ("b", "F32", "[1]", 8, 12) "}", 15, "3 trailing bytes", "'b'");
  assert_bad ("{}", 4, "4 bytes of data but no tensors");
  /* Past the end of the data region. */
  assert_bad ("{" ENTRY ("a", "F32", "[4]", 0, 16) "}", 12, "'a'",
      "past the end of the 12-byte data region");
}

static void
test_duplicate_keys (void)
{
  assert_bad ("{" ENTRY ("a", "F32", "[1]", 0, 4) ","
      ENTRY ("a", "F32", "[1]", 4, 8) "}", 8, "duplicate key 'a'");
  assert_bad ("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F16\",\"shape\":[1],"
      "\"data_offsets\":[0,4]}}", 4, "duplicate key 'dtype'");
  assert_bad ("{\"__metadata__\":{},\"__metadata__\":{}}", 0,
      "duplicate key '__metadata__'");
}

/* ---- the Python-written fixture ----------------------------------------------- */

static void
test_fixture (void)
{
  static const gint64 conv_in[] = { 32, 4, 3, 3 };
  g_autofree gchar *path = g_build_filename (data_dir, "unet-sd15-tiny",
      "diffusion_pytorch_model.safetensors", NULL);
  g_autoptr (GError) error = NULL;
  g_autoptr (PpSafetensors) st = NULL;
  const PpStEntry *e;
  g_autofree gfloat *data = NULL;

  if (!g_file_test (path, G_FILE_TEST_IS_REGULAR)) {
    g_test_skip ("no Python-written fixture (tests/data/unet-sd15-tiny)");
    return;
  }
  st = pp_safetensors_open (path, &error);
  g_assert_no_error (error);
  e = pp_safetensors_find (st, "conv_in.weight");
  g_assert_nonnull (e);
  g_assert_cmpint (e->dtype, ==, PP_ST_F32);
  g_assert_cmpuint (e->ndim, ==, 4);
  g_assert_cmpmem (e->shape, sizeof conv_in, conv_in, sizeof conv_in);
  data = g_new (gfloat, pp_st_entry_numel (e));
  g_assert_true (pp_safetensors_read_f32 (e, data));
  for (gsize i = 0; i < pp_st_entry_numel (e); i++)
    g_assert_true (isfinite (data[i]));
}

int
main (int argc, char **argv)
{
  int ret;

  g_test_init (&argc, &argv, NULL);
  data_dir = argc > 1 ? argv[1] : "tests/data";
  tmp_dir = io_tmp_dir ();
  g_test_add_func ("/io/safetensors/roundtrip", test_roundtrip);
  g_test_add_func ("/io/safetensors/roundtrip-empty", test_roundtrip_empty);
  g_test_add_func ("/io/safetensors/write-entries", test_write_entries);
  g_test_add_func ("/io/safetensors/write-errors", test_write_errors);
  g_test_add_func ("/io/safetensors/f16-bits", test_f16_bits);
  g_test_add_func ("/io/safetensors/bf16-bits", test_bf16_bits);
  g_test_add_func ("/io/safetensors/half-entries", test_half_entries);
  g_test_add_func ("/io/safetensors/accepts", test_accepts);
  g_test_add_func ("/io/safetensors/bad-header-length",
      test_bad_header_length);
  g_test_add_func ("/io/safetensors/truncated-file", test_truncated_file);
  g_test_add_func ("/io/safetensors/missing-file", test_missing_file);
  g_test_add_func ("/io/safetensors/bad-json", test_bad_json);
  g_test_add_func ("/io/safetensors/bad-entries", test_bad_entries);
  g_test_add_func ("/io/safetensors/bad-offsets", test_bad_offsets);
  g_test_add_func ("/io/safetensors/duplicate-keys", test_duplicate_keys);
  g_test_add_func ("/io/safetensors/fixture", test_fixture);
  ret = g_test_run ();
  io_rm_dir (tmp_dir);
  g_free (tmp_dir);
  return ret;
}
