/* Unit tests for the chunk envelope: encode/decode, byte layout, corrupt
 * heads and pp_chunk_check. */
#include "pp-envelope.h"
#include "pp-error.h"

#include <string.h>
#include <zlib.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

static PpTensor *
make_tensor (const gchar * name, PpDType dtype, guint ndim,
    const gint64 * shape)
{
  g_autoptr (GError) error = NULL;
  PpTensor *t = pp_tensor_new (name, dtype, ndim, shape, &error);

  g_assert_no_error (error);
  for (gsize i = 0; i < t->nbytes; i++)
    ((guint8 *) t->data)[i] = (guint8) (i * 7 + 1);
  return t;
}

/* A chunk with every header field away from its zero default. */
static PpChunk *
make_chunk (void)
{
  static const gint64 f32_shape[4] = { 1, 3, 4, 5 };
  static const gint64 u8_shape[2] = { 7, 2 };
  PpChunk *c = pp_chunk_new ();

  c->flags = PP_CHUNK_FLAG_SHUTDOWN;
  c->chunk_id = G_GUINT64_CONSTANT (0x0102030405060708);
  c->cache_epoch = 0xa1b2c3d4;
  c->plan_id = 0x11223344;
  c->pts = G_GUINT64_CONSTANT (123456789012);
  c->next_step = 3;
  c->n_steps = 9;
  c->submit_us = G_GUINT64_CONSTANT (0xfedcba9876543210);
  pp_chunk_add_tensor (c, make_tensor ("sample", PP_DTYPE_F32, 4, f32_shape));
  pp_chunk_add_tensor (c, make_tensor ("mask", PP_DTYPE_U8, 2, u8_shape));
  return c;
}

static GBytes *
encode (const PpChunk * c)
{
  g_autoptr (GError) error = NULL;
  GBytes *b = pp_envelope_encode_head (c, &error);

  g_assert_no_error (error);
  g_assert_nonnull (b);
  return b;
}

static void
assert_same_tensor_manifest (const PpTensor * a, const PpTensor * b)
{
  g_assert_cmpstr (a->name, ==, b->name);
  g_assert_cmpint (a->dtype, ==, b->dtype);
  g_assert_cmpuint (a->ndim, ==, b->ndim);
  for (guint d = 0; d < a->ndim; d++)
    g_assert_cmpint (a->shape[d], ==, b->shape[d]);
  g_assert_cmpuint (a->nbytes, ==, b->nbytes);
}

static void
test_round_trip (void)
{
  g_autoptr (PpChunk) c = make_chunk ();
  g_autoptr (GBytes) head = encode (c);
  g_autoptr (PpChunk) d = NULL;
  g_autoptr (GError) error = NULL;
  gsize len;
  const guint8 *data = g_bytes_get_data (head, &len);

  g_assert_cmpuint (len, <=, PP_ENVELOPE_HEAD_MAX);
  d = pp_envelope_decode_head (data, len, &error);
  g_assert_no_error (error);
  g_assert_nonnull (d);
  g_assert_cmpuint (d->flags, ==, c->flags);
  g_assert_cmpuint (d->chunk_id, ==, c->chunk_id);
  g_assert_cmpuint (d->cache_epoch, ==, c->cache_epoch);
  g_assert_cmpuint (d->plan_id, ==, c->plan_id);
  g_assert_cmpuint (d->pts, ==, c->pts);
  g_assert_cmpuint (d->next_step, ==, c->next_step);
  g_assert_cmpuint (d->n_steps, ==, c->n_steps);
  g_assert_cmpuint (d->submit_us, ==, c->submit_us);
  g_assert_cmpuint (d->tensors->len, ==, 2);
  for (guint i = 0; i < 2; i++) {
    const PpTensor *a = g_ptr_array_index (c->tensors, i);
    const PpTensor *b = g_ptr_array_index (d->tensors, i);
    assert_same_tensor_manifest (a, b);
    /* Ready to receive the payload. */
    g_assert_nonnull (b->data);
  }
  g_assert_cmpuint (pp_chunk_payload_bytes (d), ==, 1 * 3 * 4 * 5 * 4 + 14);
  g_assert_true (pp_chunk_get_tensor (d, "mask")
      == g_ptr_array_index (d->tensors, 1));
  g_assert_null (pp_chunk_get_tensor (d, "nope"));
}

/* Other shapes and "no pts", no flags, no tensors. */
static void
test_round_trip_variants (void)
{
  static const gint64 s1[1] = { 33 };
  static const gint64 s3[3] = { 2, 1, 9 };
  g_autoptr (PpChunk) c = pp_chunk_new ();
  g_autoptr (PpChunk) empty = pp_chunk_new ();
  g_autoptr (GBytes) head = NULL;
  g_autoptr (PpChunk) d = NULL;
  g_autoptr (GError) error = NULL;

  c->pts = G_MAXUINT64;
  c->chunk_id = 0;
  c->n_steps = 1;
  pp_chunk_add_tensor (c, make_tensor ("a", PP_DTYPE_U8, 1, s1));
  pp_chunk_add_tensor (c, make_tensor ("b", PP_DTYPE_F32, 3, s3));
  pp_chunk_add_tensor (c, make_tensor ("c", PP_DTYPE_F64, 1, s1));
  head = encode (c);
  d = pp_envelope_decode_head (g_bytes_get_data (head, NULL),
      g_bytes_get_size (head), &error);
  g_assert_no_error (error);
  g_assert_cmpuint (d->pts, ==, G_MAXUINT64);
  g_assert_cmpuint (d->flags, ==, 0);
  g_assert_cmpuint (d->tensors->len, ==, 3);
  for (guint i = 0; i < 3; i++)
    assert_same_tensor_manifest (g_ptr_array_index (c->tensors, i),
        g_ptr_array_index (d->tensors, i));
  g_clear_pointer (&head, g_bytes_unref);
  g_clear_pointer (&d, pp_chunk_free);

  head = encode (empty);
  d = pp_envelope_decode_head (g_bytes_get_data (head, NULL),
      g_bytes_get_size (head), &error);
  g_assert_no_error (error);
  g_assert_cmpuint (d->tensors->len, ==, 0);
}

static void
test_deterministic (void)
{
  g_autoptr (PpChunk) c1 = make_chunk ();
  g_autoptr (PpChunk) c2 = make_chunk ();
  g_autoptr (GBytes) a = encode (c1);
  g_autoptr (GBytes) b = encode (c1);
  g_autoptr (GBytes) other = encode (c2);

  g_assert_true (g_bytes_equal (a, b));
  /* Equal chunks built separately serialise the same too. */
  g_assert_true (g_bytes_equal (a, other));
}

static guint16
rd16 (const guint8 * p)
{
  return (guint16) (p[0] | p[1] << 8);
}

static guint32
rd32 (const guint8 * p)
{
  return (guint32) p[0] | (guint32) p[1] << 8 | (guint32) p[2] << 16
      | (guint32) p[3] << 24;
}

static guint64
rd64 (const guint8 * p)
{
  return (guint64) rd32 (p) | (guint64) rd32 (p + 4) << 32;
}

/* The documented header layout, read byte by byte (little-endian). */
static void
test_layout (void)
{
  g_autoptr (PpChunk) c = make_chunk ();
  g_autoptr (GBytes) head = encode (c);
  gsize len;
  const guint8 *p = g_bytes_get_data (head, &len);
  guint32 meta_len, manifest_len;
  g_autoptr (GVariant) meta = NULL;
  g_autoptr (GVariant) manifest = NULL;
  guint32 next_step, n_steps;
  guint64 submit_us;

  g_assert_cmpuint (len, >, PP_ENVELOPE_HEADER_SIZE);
  g_assert_cmpmem (p, 4, "PPDF", 4);
  g_assert_cmpuint (rd32 (p), ==, PP_ENVELOPE_MAGIC);
  g_assert_cmpuint (p[4], ==, PP_ENVELOPE_MAJOR);
  g_assert_cmpuint (p[5], ==, PP_ENVELOPE_MINOR);
  g_assert_cmpuint (rd16 (p + 6), ==, PP_CHUNK_FLAG_SHUTDOWN);
  g_assert_cmpuint (rd64 (p + 8), ==, c->chunk_id);
  /* chunk_id 0x0102030405060708: least significant byte first. */
  g_assert_cmpuint (p[8], ==, 0x08);
  g_assert_cmpuint (p[15], ==, 0x01);
  g_assert_cmpuint (rd32 (p + 16), ==, c->cache_epoch);
  g_assert_cmpuint (rd32 (p + 20), ==, c->plan_id);
  g_assert_cmpuint (rd64 (p + 24), ==, c->pts);
  g_assert_cmpuint (rd32 (p + 32), ==, 2);
  meta_len = rd32 (p + 36);
  manifest_len = rd32 (p + 40);
  g_assert_cmpuint (PP_ENVELOPE_HEADER_SIZE + meta_len + manifest_len, ==,
      len);
  g_assert_cmpuint (rd32 (p + 44), ==,
      (guint32) crc32 (0L, p + PP_ENVELOPE_HEADER_SIZE,
          meta_len + manifest_len));

  /* meta and manifest are the documented GVariant types. */
  meta = g_variant_ref_sink (g_variant_new_from_data (G_VARIANT_TYPE
          (PP_ENVELOPE_META_TYPE), p + PP_ENVELOPE_HEADER_SIZE, meta_len,
          FALSE, NULL, NULL));
  g_assert_true (g_variant_is_normal_form (meta));
  g_variant_get (meta, PP_ENVELOPE_META_TYPE, &next_step, &n_steps,
      &submit_us);
  g_assert_cmpuint (next_step, ==, c->next_step);
  g_assert_cmpuint (n_steps, ==, c->n_steps);
  g_assert_cmpuint (submit_us, ==, c->submit_us);
  manifest = g_variant_ref_sink (g_variant_new_from_data (G_VARIANT_TYPE
          (PP_ENVELOPE_MANIFEST_TYPE), p + PP_ENVELOPE_HEADER_SIZE + meta_len,
          manifest_len, FALSE, NULL, NULL));
  g_assert_true (g_variant_is_normal_form (manifest));
  g_assert_cmpuint (g_variant_n_children (manifest), ==, 2);
  {
    const gchar *name;
    guchar dtype;
    g_autoptr (GVariant) shape = NULL;
    guint64 nbytes;
    gsize ndim;
    const gint64 *dims;

    g_variant_get_child (manifest, 1, "(&sy@axt)", &name, &dtype, &shape,
        &nbytes);
    dims = g_variant_get_fixed_array (shape, &ndim, sizeof (gint64));
    g_assert_cmpstr (name, ==, "mask");
    g_assert_cmpuint (dtype, ==, PP_DTYPE_U8);
    g_assert_cmpuint (ndim, ==, 2);
    g_assert_cmpint (dims[0], ==, 7);
    g_assert_cmpint (dims[1], ==, 2);
    g_assert_cmpuint (nbytes, ==, 14);
  }
}

/* Assembles a head the way the layout documents it, from variants chosen
 * by the test (so a decoder can be fed well-framed but wrong content). */
static GBytes *
assemble_head (guint8 major, guint16 flags, guint32 n_tensors,
    GVariant * meta, GVariant * manifest)
{
  gsize meta_len = g_variant_get_size (meta);
  gsize manifest_len = g_variant_get_size (manifest);
  gsize total = PP_ENVELOPE_HEADER_SIZE + meta_len + manifest_len;
  guint8 *buf = g_malloc0 (total);
  guint32 v32;
  guint16 v16;

  memcpy (buf + PP_ENVELOPE_HEADER_SIZE, g_variant_get_data (meta), meta_len);
  memcpy (buf + PP_ENVELOPE_HEADER_SIZE + meta_len,
      g_variant_get_data (manifest), manifest_len);
  v32 = GUINT32_TO_LE (PP_ENVELOPE_MAGIC);
  memcpy (buf, &v32, 4);
  buf[4] = major;
  buf[5] = PP_ENVELOPE_MINOR;
  v16 = GUINT16_TO_LE (flags);
  memcpy (buf + 6, &v16, 2);
  v32 = GUINT32_TO_LE (n_tensors);
  memcpy (buf + 32, &v32, 4);
  v32 = GUINT32_TO_LE ((guint32) meta_len);
  memcpy (buf + 36, &v32, 4);
  v32 = GUINT32_TO_LE ((guint32) manifest_len);
  memcpy (buf + 40, &v32, 4);
  v32 = GUINT32_TO_LE ((guint32) crc32 (0L, buf + PP_ENVELOPE_HEADER_SIZE,
          meta_len + manifest_len));
  memcpy (buf + 44, &v32, 4);
  return g_bytes_new_take (buf, total);
}

static void
test_assembled_matches (void)
{
  g_autoptr (PpChunk) c = pp_chunk_new ();
  static const gint64 shape[2] = { 3, 4 };
  g_autoptr (GVariant) meta = NULL;
  g_autoptr (GVariant) manifest = NULL;
  g_autoptr (GBytes) ours = NULL;
  g_autoptr (GBytes) theirs = NULL;
  GVariantBuilder b;

  c->next_step = 2;
  c->n_steps = 5;
  c->submit_us = 77;
  pp_chunk_add_tensor (c, make_tensor ("x", PP_DTYPE_F32, 2, shape));
  meta = g_variant_ref_sink (g_variant_new (PP_ENVELOPE_META_TYPE, 2u, 5u,
          (guint64) 77));
  g_variant_builder_init (&b, G_VARIANT_TYPE (PP_ENVELOPE_MANIFEST_TYPE));
  g_variant_builder_add (&b, "(sy@axt)", "x", (guchar) PP_DTYPE_F32,
      g_variant_new_fixed_array (G_VARIANT_TYPE_INT64, shape, 2,
          sizeof (gint64)), (guint64) 48);
  manifest = g_variant_ref_sink (g_variant_builder_end (&b));
  ours = assemble_head (PP_ENVELOPE_MAJOR, 0, 1, meta, manifest);
  theirs = encode (c);
  g_assert_true (g_bytes_equal (ours, theirs));
}

static void
assert_decode_fails (const guint8 * data, gsize len, const gchar * field)
{
  g_autoptr (GError) error = NULL;
  PpChunk *d = pp_envelope_decode_head (data, len, &error);

  g_assert_null (d);
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
  if (strstr (error->message, field) == NULL)
    g_error ("expected '%s' in: %s", field, error->message);
}

/* A copy of a valid head that a test may corrupt. */
static guint8 *
valid_head (gsize * len)
{
  g_autoptr (PpChunk) c = make_chunk ();
  g_autoptr (GBytes) head = encode (c);

  return g_bytes_unref_to_data (g_steal_pointer (&head), len);
}

static void
test_bad_magic (void)
{
  gsize len;
  g_autofree guint8 *p = valid_head (&len);

  p[0] = 'X';
  assert_decode_fails (p, len, "magic");
}

static void
test_bad_version (void)
{
  gsize len;
  g_autofree guint8 *p = valid_head (&len);

  p[4] = PP_ENVELOPE_MAJOR + 1;
  assert_decode_fails (p, len, "major version");
  p[4] = 0;
  assert_decode_fails (p, len, "major version");
}

/* Another minor version of the same major is accepted: a minor bump only
 * adds what an older receiver may ignore. */
static void
test_other_minor (void)
{
  gsize len;
  g_autofree guint8 *p = valid_head (&len);
  g_autoptr (GError) error = NULL;
  g_autoptr (PpChunk) c = NULL;

  p[5] = PP_ENVELOPE_MINOR + 7;
  c = pp_envelope_decode_head (p, len, &error);
  g_assert_no_error (error);
  g_assert_nonnull (c);
}

static void
test_bad_flags (void)
{
  gsize len;
  g_autofree guint8 *p = valid_head (&len);

  /* two kinds at once */
  p[6] = PP_CHUNK_FLAG_SHUTDOWN | PP_CHUNK_FLAG_DATA;
  assert_decode_fails (p, len, "flags");
  p[6] = PP_CHUNK_FLAG_WARMUP | PP_CHUNK_FLAG_ABORT;
  assert_decode_fails (p, len, "flags");
  /* reset on a kind that carries no stream state */
  p[6] = PP_CHUNK_FLAG_SHUTDOWN | PP_CHUNK_FLAG_RESET;
  assert_decode_fails (p, len, "flags");
  /* unknown bits */
  p[6] = 0x01;
  p[7] = 0x80;
  assert_decode_fails (p, len, "flags");
  p[6] = 0x40;
  p[7] = 0;
  assert_decode_fails (p, len, "flags");
}

/* Every valid combination passes both ways, and encode refuses an invalid
 * one before anything is sent. */
static void
test_flag_combinations (void)
{
  static const guint16 valid[] = {
    0, PP_CHUNK_FLAG_DATA, PP_CHUNK_FLAG_WARMUP, PP_CHUNK_FLAG_SHUTDOWN,
    PP_CHUNK_FLAG_ABORT, PP_CHUNK_FLAG_RESET,
    PP_CHUNK_FLAG_DATA | PP_CHUNK_FLAG_RESET,
    PP_CHUNK_FLAG_WARMUP | PP_CHUNK_FLAG_RESET,
  };
  g_autoptr (PpChunk) c = make_chunk ();
  g_autoptr (GError) error = NULL;

  for (guint i = 0; i < G_N_ELEMENTS (valid); i++) {
    g_autoptr (GBytes) head = NULL;
    g_autoptr (PpChunk) back = NULL;
    gsize len;
    const guint8 *p;

    c->flags = valid[i];
    head = encode (c);
    p = g_bytes_get_data (head, &len);
    back = pp_envelope_decode_head (p, len, &error);
    g_assert_no_error (error);
    g_assert_cmpuint (back->flags, ==, valid[i]);
  }
  c->flags = PP_CHUNK_FLAG_DATA | PP_CHUNK_FLAG_SHUTDOWN;
  g_assert_null (pp_envelope_encode_head (c, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
}

static void
test_bad_crc (void)
{
  gsize len;
  g_autofree guint8 *p = valid_head (&len);
  guint32 meta_len = rd32 (p + 36);

  /* One bit in the meta region, then one in the manifest region. */
  p[PP_ENVELOPE_HEADER_SIZE + 1] ^= 0x01;
  assert_decode_fails (p, len, "crc");
  p[PP_ENVELOPE_HEADER_SIZE + 1] ^= 0x01;
  p[PP_ENVELOPE_HEADER_SIZE + meta_len + 2] ^= 0x40;
  assert_decode_fails (p, len, "crc");
  p[PP_ENVELOPE_HEADER_SIZE + meta_len + 2] ^= 0x40;
  /* The stored CRC itself. */
  p[44] ^= 0xff;
  assert_decode_fails (p, len, "crc");
}

static void
test_truncated (void)
{
  gsize len;
  g_autofree guint8 *p = valid_head (&len);

  assert_decode_fails (p, 0, "header size");
  assert_decode_fails (p, 20, "header size");
  assert_decode_fails (p, PP_ENVELOPE_HEADER_SIZE - 1, "header size");
  assert_decode_fails (p, PP_ENVELOPE_HEADER_SIZE, "meta length");
  assert_decode_fails (p, len - 1, "meta length");
}

static void
test_meta_length_mismatch (void)
{
  gsize len;
  g_autofree guint8 *p = valid_head (&len);
  g_autofree guint8 *longer = g_malloc0 (len + 4);

  /* Trailing bytes that the lengths do not account for. */
  memcpy (longer, p, len);
  assert_decode_fails (longer, len + 4, "meta length");
  /* A huge meta length must not be read past the buffer. */
  p[39] = 0xff;
  assert_decode_fails (p, len, "meta length");
}

/* Shifting the meta/manifest boundary keeps the CRC (it covers both) and
 * the total length valid; the decoder must still refuse the head. */
static void
test_boundary_shift (void)
{
  gsize len;
  g_autofree guint8 *p = valid_head (&len);
  guint32 meta_len = rd32 (p + 36), manifest_len = rd32 (p + 40);
  g_autoptr (GError) error = NULL;
  PpChunk *d;

  meta_len -= 1;
  manifest_len += 1;
  p[36] = meta_len & 0xff;
  p[37] = meta_len >> 8 & 0xff;
  p[40] = manifest_len & 0xff;
  p[41] = manifest_len >> 8 & 0xff;
  d = pp_envelope_decode_head (p, len, &error);
  g_assert_null (d);
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
}

static void
test_tensor_count (void)
{
  gsize len;
  g_autofree guint8 *p = valid_head (&len);

  p[32] = PP_ENVELOPE_MAX_TENSORS + 1;
  assert_decode_fails (p, len, "tensor count");
  p[32] = 0;
  p[35] = 0x80;
  assert_decode_fails (p, len, "tensor count");
  /* Within the limit but disagreeing with the manifest (2 entries). */
  p[35] = 0;
  p[32] = 1;
  assert_decode_fails (p, len, "tensor count");
  p[32] = 3;
  assert_decode_fails (p, len, "tensor count");
}

/* A head that is consistent (count = manifest entries, right CRC) but
 * carries more tensors than an envelope may. */
static void
test_too_many_tensors_consistent (void)
{
  static const gint64 shape[1] = { 1 };
  g_autoptr (GVariant) meta = g_variant_ref_sink (g_variant_new
      (PP_ENVELOPE_META_TYPE, 0u, 1u, (guint64) 0));
  g_autoptr (GVariant) manifest = NULL;
  g_autoptr (GBytes) head = NULL;
  GVariantBuilder b;

  g_variant_builder_init (&b, G_VARIANT_TYPE (PP_ENVELOPE_MANIFEST_TYPE));
  for (guint i = 0; i < PP_ENVELOPE_MAX_TENSORS + 1; i++) {
    g_autofree gchar *name = g_strdup_printf ("t%u", i);
    g_variant_builder_add (&b, "(sy@axt)", name, (guchar) PP_DTYPE_U8,
        g_variant_new_fixed_array (G_VARIANT_TYPE_INT64, shape, 1,
            sizeof (gint64)), (guint64) 1);
  }
  manifest = g_variant_ref_sink (g_variant_builder_end (&b));
  head = assemble_head (PP_ENVELOPE_MAJOR, 0, PP_ENVELOPE_MAX_TENSORS + 1, meta, manifest);
  assert_decode_fails (g_bytes_get_data (head, NULL), g_bytes_get_size (head),
      "tensor count");
}

static GVariant *
one_entry_manifest (const gchar * name, guchar dtype, const gint64 * shape,
    gsize ndim, guint64 nbytes)
{
  GVariantBuilder b;

  g_variant_builder_init (&b, G_VARIANT_TYPE (PP_ENVELOPE_MANIFEST_TYPE));
  g_variant_builder_add (&b, "(sy@axt)", name, dtype,
      g_variant_new_fixed_array (G_VARIANT_TYPE_INT64, shape, ndim,
          sizeof (gint64)), nbytes);
  return g_variant_ref_sink (g_variant_builder_end (&b));
}

/* Well-framed heads (right CRC) whose manifest lies. */
static void
test_bad_manifest (void)
{
  static const gint64 shape[2] = { 4, 4 };
  static const gint64 bad_shape[2] = { 4, 0 };
  static const gint64 big[4] = { 1024, 1024, 1024, 1024 };
  g_autoptr (GVariant) meta = g_variant_ref_sink (g_variant_new
      (PP_ENVELOPE_META_TYPE, 0u, 1u, (guint64) 0));
  struct
  {
    GVariant *manifest;
    const gchar *field;
  } cases[] = {
    {one_entry_manifest ("t", 9, shape, 2, 16), "dtype"},
    {one_entry_manifest ("t", PP_DTYPE_U8, shape, 2, 17), "bytes"},
    {one_entry_manifest ("t", PP_DTYPE_F32, shape, 2, 16), "bytes"},
    {one_entry_manifest ("t", PP_DTYPE_U8, shape, 0, 1), "bytes"},
    {one_entry_manifest ("t", PP_DTYPE_U8, big, 4, (guint64) 1 << 40),
        "bytes"},
  };

  for (guint i = 0; i < G_N_ELEMENTS (cases); i++) {
    g_autoptr (GBytes) head = assemble_head (PP_ENVELOPE_MAJOR, 0, 1, meta,
        cases[i].manifest);
    assert_decode_fails (g_bytes_get_data (head, NULL),
        g_bytes_get_size (head), cases[i].field);
    g_variant_unref (cases[i].manifest);
  }

  /* A zero dimension with nbytes 0, and a name longer than a tensor name
   * may be, pass the manifest's own checks and are refused by
   * pp_tensor_new: the head must still be refused cleanly. */
  {
    g_autoptr (GVariant) zero = one_entry_manifest ("t", PP_DTYPE_U8,
        bad_shape, 2, 0);
    g_autoptr (GVariant) long_name = one_entry_manifest
        ("a-tensor-name-well-over-31-bytes-long", PP_DTYPE_U8, shape, 2, 16);
    GVariant *manifests[] = { zero, long_name };

    for (guint i = 0; i < G_N_ELEMENTS (manifests); i++) {
      g_autoptr (GBytes) head = assemble_head (PP_ENVELOPE_MAJOR, 0, 1, meta, manifests[i]);
      g_autoptr (GError) error = NULL;

      g_assert_null (pp_envelope_decode_head (g_bytes_get_data (head, NULL),
              g_bytes_get_size (head), &error));
      g_assert_nonnull (error);
      g_assert_true (error->domain == PP_ERROR);
      g_test_message ("case %u: %s (code %d)", i, error->message,
          error->code);
    }
  }

  /* The same framing with a truthful manifest decodes (the helper is
   * right, so the failures above are the manifest's). */
  {
    g_autoptr (GVariant) ok = one_entry_manifest ("t", PP_DTYPE_U8, shape, 2,
        16);
    g_autoptr (GBytes) head = assemble_head (PP_ENVELOPE_MAJOR, 0, 1, meta, ok);
    g_autoptr (GError) error = NULL;
    g_autoptr (PpChunk) d = pp_envelope_decode_head (g_bytes_get_data (head,
            NULL), g_bytes_get_size (head), &error);

    g_assert_no_error (error);
    g_assert_cmpuint (d->tensors->len, ==, 1);
  }
}

/* Refused before anything is built: the caller can report it at once. */
static void
test_encode_too_big (void)
{
  g_autoptr (PpChunk) c = make_chunk ();
  PpTensor *t = g_ptr_array_index (c->tensors, 1);
  gsize saved = t->nbytes;
  g_autoptr (GError) error = NULL;
  GBytes *head;

  t->nbytes = (gsize) G_MAXINT + 1;
  head = pp_envelope_encode_head (c, &error);
  t->nbytes = saved;
  g_assert_null (head);
  g_assert_nonnull (error);
  g_assert_true (error->domain == PP_ERROR);
  g_assert_nonnull (strstr (error->message, "mask"));
  g_clear_error (&error);

  /* Exactly G_MAXINT is still addressable by one message. */
  t->nbytes = G_MAXINT;
  head = pp_envelope_encode_head (c, &error);
  t->nbytes = saved;
  g_assert_no_error (error);
  g_assert_nonnull (head);
  g_bytes_unref (head);
}

static void
test_encode_too_many_tensors (void)
{
  static const gint64 shape[1] = { 1 };
  g_autoptr (PpChunk) c = pp_chunk_new ();
  g_autoptr (GError) error = NULL;
  g_autoptr (GBytes) head = NULL;

  for (guint i = 0; i < PP_ENVELOPE_MAX_TENSORS; i++) {
    g_autofree gchar *name = g_strdup_printf ("t%u", i);
    pp_chunk_add_tensor (c, make_tensor (name, PP_DTYPE_U8, 1, shape));
  }
  head = encode (c);
  g_assert_nonnull (head);
  pp_chunk_add_tensor (c, make_tensor ("extra", PP_DTYPE_U8, 1, shape));
  g_assert_null (pp_envelope_encode_head (c, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
}

static PpChunkExpect
expect_of (const PpChunk * c)
{
  PpChunkExpect e = {
    .chunk_id = c->chunk_id,
    .plan_id = c->plan_id,
    .next_step = c->next_step,
    .n_steps = c->n_steps,
    .min_cache_epoch = c->cache_epoch,
  };
  return e;
}

static void
assert_check_fails (const PpChunk * c, const PpChunkExpect * e,
    const gchar * text)
{
  g_autoptr (GError) error = NULL;

  g_assert_false (pp_chunk_check (c, e, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
  if (strstr (error->message, text) == NULL)
    g_error ("expected '%s' in: %s", text, error->message);
}

static void
test_check (void)
{
  g_autoptr (PpChunk) c = pp_chunk_new ();
  PpChunkExpect e;
  g_autoptr (GError) error = NULL;

  c->chunk_id = 7;
  c->plan_id = 0x1234;
  c->next_step = 4;
  c->n_steps = 9;
  c->cache_epoch = 3;
  e = expect_of (c);
  g_assert_true (pp_chunk_check (c, &e, &error));
  g_assert_no_error (error);

  e = expect_of (c);
  e.chunk_id = 5;
  assert_check_fails (c, &e, "chunk_id: expected 5, received 7");
  e = expect_of (c);
  e.plan_id = 0xabcd;
  assert_check_fails (c, &e, "plan_id");
  assert_check_fails (c, &e, "abcd");
  assert_check_fails (c, &e, "1234");
  e = expect_of (c);
  e.next_step = 2;
  assert_check_fails (c, &e, "next_step: expected 2, received 4");
  e = expect_of (c);
  e.n_steps = 8;
  assert_check_fails (c, &e, "n_steps: expected 8, received 9");
  e = expect_of (c);
  e.min_cache_epoch = 4;
  assert_check_fails (c, &e, "cache_epoch");
  assert_check_fails (c, &e, "at least 4, received 3");

  /* A newer cache epoch than the minimum is fine. */
  e = expect_of (c);
  e.min_cache_epoch = 2;
  g_assert_true (pp_chunk_check (c, &e, NULL));
}

static void
test_check_unchecked (void)
{
  g_autoptr (PpChunk) c = pp_chunk_new ();
  PpChunkExpect any = { G_MAXUINT64, G_MAXUINT32, G_MAXUINT32, G_MAXUINT32,
    G_MAXUINT32
  };

  c->chunk_id = 99;
  c->plan_id = 1;
  c->next_step = 1;
  c->n_steps = 2;
  c->cache_epoch = 0;
  g_assert_true (pp_chunk_check (c, &any, NULL));
}

/* A shutdown chunk carries no steps: only its identity is checked. */
static void
test_check_shutdown (void)
{
  g_autoptr (PpChunk) c = pp_chunk_new ();
  PpChunkExpect e;

  c->flags = PP_CHUNK_FLAG_SHUTDOWN;
  c->chunk_id = 10;
  c->plan_id = 42;
  e = expect_of (c);
  e.next_step = 3;
  e.n_steps = 5;
  e.min_cache_epoch = 1;
  g_assert_true (pp_chunk_check (c, &e, NULL));
  e.chunk_id = 11;
  assert_check_fails (c, &e, "chunk_id");
  e.chunk_id = 10;
  e.plan_id = 43;
  assert_check_fails (c, &e, "plan_id");
}

/* Decoding must not leak: a worker decodes one head per chunk for as long
 * as the stream runs.  Measured with glibc's allocator statistics. */
static void
test_decode_no_leak (void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  gsize len;
  g_autofree guint8 *p = valid_head (&len);
  gsize before, after, grown;
  const guint rounds = 2000;

  /* Warm up GLib's type caches first. */
  pp_chunk_free (pp_envelope_decode_head (p, len, NULL));
  before = mallinfo2 ().uordblks;
  for (guint i = 0; i < rounds; i++) {
    PpChunk *d = pp_envelope_decode_head (p, len, NULL);
    g_assert_nonnull (d);
    pp_chunk_free (d);
  }
  after = mallinfo2 ().uordblks;
  grown = after > before ? after - before : 0;
  g_test_message ("heap grew by %" G_GSIZE_FORMAT " bytes over %u decodes "
      "of a %" G_GSIZE_FORMAT "-byte head", grown, rounds, len);
  /* A leaked copy of meta + manifest would be a few hundred bytes per
   * decode; allow 16 per decode of noise. */
  g_assert_cmpuint (grown, <=, 16 * rounds);
#else
  g_test_skip ("needs glibc's mallinfo2");
#endif
}

/* The hand-written meta is GVariant's own serialisation of its type. */
static void
test_meta_is_gvariant (void)
{
  g_autoptr (PpChunk) c = make_chunk ();
  g_autoptr (GBytes) head = encode (c);
  g_autoptr (GVariant) meta = g_variant_ref_sink (g_variant_new
      (PP_ENVELOPE_META_TYPE, c->next_step, c->n_steps, c->submit_us));
  const guint8 *p = g_bytes_get_data (head, NULL);

  g_assert_cmpuint (g_variant_get_size (meta), ==, PP_ENVELOPE_META_SIZE);
  g_assert_cmpuint (rd32 (p + 36), ==, PP_ENVELOPE_META_SIZE);
  g_assert_cmpmem (p + PP_ENVELOPE_HEADER_SIZE, PP_ENVELOPE_META_SIZE,
      g_variant_get_data (meta), PP_ENVELOPE_META_SIZE);
}

/* Through one codec, chunk after chunk: each head is the one
 * pp_envelope_encode_head writes, whether the manifest is the last one
 * (kept) or another. */
static void
test_codec_write (void)
{
  static const gint64 other_shape[2] = { 3, 3 };
  PpEnvelopeCodec *codec = pp_envelope_codec_new ();
  g_autoptr (PpChunk) c = make_chunk ();
  g_autoptr (PpChunk) empty = pp_chunk_new ();
  PpChunk *stream[] = { c, c, empty, c };

  for (guint round = 0; round < 2; round++) {
    for (guint i = 0; i < G_N_ELEMENTS (stream); i++) {
      g_autoptr (GBytes) expected = NULL;
      g_autoptr (GError) error = NULL;
      const guint8 *head;
      gsize len;

      stream[i]->chunk_id++;
      expected = encode (stream[i]);
      g_assert_true (pp_envelope_write_head (codec, stream[i], &head, &len,
              &error));
      g_assert_no_error (error);
      g_assert_cmpmem (head, len, g_bytes_get_data (expected, NULL),
          g_bytes_get_size (expected));
    }
    /* The same tensor list but for a shape. */
    pp_tensor_free (g_ptr_array_index (c->tensors, 1));
    g_ptr_array_index (c->tensors, 1) = make_tensor ("mask", PP_DTYPE_U8, 2,
        other_shape);
  }
  pp_envelope_codec_free (codec);
}

static void
assert_read (PpEnvelopeCodec * codec, const guint8 * data, gsize len,
    PpChunk * into, const PpChunk * expected)
{
  g_autoptr (GError) error = NULL;

  g_assert_true (pp_envelope_read_head (codec, data, len, into, &error));
  g_assert_no_error (error);
  g_assert_cmpuint (into->chunk_id, ==, expected->chunk_id);
  g_assert_cmpuint (into->next_step, ==, expected->next_step);
  g_assert_cmpuint (into->submit_us, ==, expected->submit_us);
  g_assert_cmpuint (into->tensors->len, ==, expected->tensors->len);
  for (guint i = 0; i < into->tensors->len; i++)
    assert_same_tensor_manifest (g_ptr_array_index (expected->tensors, i),
        g_ptr_array_index (into->tensors, i));
}

/* Reading into one chunk through one codec: the tensors of the last head
 * are kept when the next lists the same, replaced when it lists others,
 * dropped when it lists fewer. */
static void
test_codec_read (void)
{
  static const gint64 other_shape[2] = { 3, 3 };
  PpEnvelopeCodec *codec = pp_envelope_codec_new ();
  g_autoptr (PpChunk) c = make_chunk ();
  g_autoptr (PpChunk) into = pp_chunk_new ();
  g_autoptr (PpChunk) one = pp_chunk_new ();
  g_autoptr (GBytes) first = encode (c);
  g_autoptr (GBytes) second = NULL;
  g_autoptr (GBytes) reshaped = NULL;
  g_autoptr (GBytes) fewer = NULL;
  PpTensor *sample, *mask;
  gpointer sample_data;

  assert_read (codec, g_bytes_get_data (first, NULL),
      g_bytes_get_size (first), into, c);
  sample = g_ptr_array_index (into->tensors, 0);
  mask = g_ptr_array_index (into->tensors, 1);
  sample_data = sample->data;

  c->chunk_id++;
  c->next_step++;
  second = encode (c);
  assert_read (codec, g_bytes_get_data (second, NULL),
      g_bytes_get_size (second), into, c);
  g_assert_true (g_ptr_array_index (into->tensors, 0) == sample);
  g_assert_true (sample->data == sample_data);
  g_assert_true (g_ptr_array_index (into->tensors, 1) == mask);

  pp_tensor_free (g_ptr_array_index (c->tensors, 1));
  g_ptr_array_index (c->tensors, 1) = make_tensor ("mask", PP_DTYPE_U8, 2,
      other_shape);
  reshaped = encode (c);
  assert_read (codec, g_bytes_get_data (reshaped, NULL),
      g_bytes_get_size (reshaped), into, c);
  g_assert_true (g_ptr_array_index (into->tensors, 0) == sample);
  g_assert_cmpint (((PpTensor *) g_ptr_array_index (into->tensors,
              1))->shape[0], ==, 3);

  pp_chunk_add_tensor (one, make_tensor ("sample", PP_DTYPE_F32, 4,
          sample->shape));
  fewer = encode (one);
  assert_read (codec, g_bytes_get_data (fewer, NULL),
      g_bytes_get_size (fewer), into, one);
  g_assert_true (g_ptr_array_index (into->tensors, 0) == sample);
  pp_envelope_codec_free (codec);
}

/* A head whose manifest the codec knows is still checked: its tensor
 * count and its meta. */
static void
test_codec_read_checks (void)
{
  PpEnvelopeCodec *codec = pp_envelope_codec_new ();
  g_autoptr (PpChunk) c = make_chunk ();
  g_autoptr (PpChunk) into = pp_chunk_new ();
  gsize len;
  g_autofree guint8 *p = valid_head (&len);
  g_autofree guint8 *bad = NULL;
  g_autoptr (GError) error = NULL;
  guint32 v;

  assert_read (codec, p, len, into, c);
  bad = g_memdup2 (p, len);
  v = GUINT32_TO_LE (1);
  memcpy (bad + 32, &v, 4);
  g_assert_false (pp_envelope_read_head (codec, bad, len, into, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
  g_assert_nonnull (strstr (error->message, "tensor count"));
  g_clear_error (&error);

  /* A byte more of meta before the same manifest, the CRC made right. */
  g_free (bad);
  bad = g_malloc (len + 1);
  memcpy (bad, p, PP_ENVELOPE_HEADER_SIZE + PP_ENVELOPE_META_SIZE);
  bad[PP_ENVELOPE_HEADER_SIZE + PP_ENVELOPE_META_SIZE] = 0;
  memcpy (bad + PP_ENVELOPE_HEADER_SIZE + PP_ENVELOPE_META_SIZE + 1,
      p + PP_ENVELOPE_HEADER_SIZE + PP_ENVELOPE_META_SIZE,
      len - PP_ENVELOPE_HEADER_SIZE - PP_ENVELOPE_META_SIZE);
  v = GUINT32_TO_LE (PP_ENVELOPE_META_SIZE + 1);
  memcpy (bad + 36, &v, 4);
  v = GUINT32_TO_LE ((guint32) crc32 (0L, bad + PP_ENVELOPE_HEADER_SIZE,
          len + 1 - PP_ENVELOPE_HEADER_SIZE));
  memcpy (bad + 44, &v, 4);
  g_assert_false (pp_envelope_read_head (codec, bad, len + 1, into, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_PROTOCOL);
  g_assert_nonnull (strstr (error->message, "meta/manifest"));
  g_clear_error (&error);

  /* And the codec still reads good heads. */
  assert_read (codec, p, len, into, c);
  pp_envelope_codec_free (codec);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/envelope/round-trip", test_round_trip);
  g_test_add_func ("/envelope/round-trip-variants", test_round_trip_variants);
  g_test_add_func ("/envelope/deterministic", test_deterministic);
  g_test_add_func ("/envelope/layout", test_layout);
  g_test_add_func ("/envelope/layout-assembled", test_assembled_matches);
  g_test_add_func ("/envelope/corrupt/magic", test_bad_magic);
  g_test_add_func ("/envelope/corrupt/version", test_bad_version);
  g_test_add_func ("/envelope/corrupt/flags", test_bad_flags);
  g_test_add_func ("/envelope/flags", test_flag_combinations);
  g_test_add_func ("/envelope/minor-version", test_other_minor);
  g_test_add_func ("/envelope/corrupt/crc", test_bad_crc);
  g_test_add_func ("/envelope/corrupt/truncated", test_truncated);
  g_test_add_func ("/envelope/corrupt/meta-length", test_meta_length_mismatch);
  g_test_add_func ("/envelope/corrupt/boundary-shift", test_boundary_shift);
  g_test_add_func ("/envelope/corrupt/tensor-count", test_tensor_count);
  g_test_add_func ("/envelope/corrupt/too-many-tensors",
      test_too_many_tensors_consistent);
  g_test_add_func ("/envelope/corrupt/manifest", test_bad_manifest);
  g_test_add_func ("/envelope/encode/too-big", test_encode_too_big);
  g_test_add_func ("/envelope/encode/too-many-tensors",
      test_encode_too_many_tensors);
  g_test_add_func ("/envelope/decode/no-leak", test_decode_no_leak);
  g_test_add_func ("/envelope/meta-is-gvariant", test_meta_is_gvariant);
  g_test_add_func ("/envelope/codec/write", test_codec_write);
  g_test_add_func ("/envelope/codec/read", test_codec_read);
  g_test_add_func ("/envelope/codec/read-checks", test_codec_read_checks);
  g_test_add_func ("/envelope/check/fields", test_check);
  g_test_add_func ("/envelope/check/unchecked", test_check_unchecked);
  g_test_add_func ("/envelope/check/shutdown", test_check_shutdown);
  return g_test_run ();
}
