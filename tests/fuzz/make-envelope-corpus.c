/* Writes the seed corpus for fuzz-envelope (checked in; rerun to
 * regenerate): a few valid heads from the real encoder and a few that break
 * one rule each, so the fuzzer starts from inputs that reach every check of
 * the decoder.  Built by hand, from the source root:
 *
 *   cc -Ikernels -Impi-helper -Impi-helper/wire \
 *     tests/fuzz/make-envelope-corpus.c \
 *     mpi-helper/wire/pp-envelope.c kernels/pp-tensor.c kernels/pp-dtype.c \
 *     kernels/pp-error.c $(pkg-config --cflags --libs glib-2.0 zlib) \
 *     -o make-envelope-corpus
 *   ./make-envelope-corpus tests/fuzz/corpus-envelope
 */
#include "pp-envelope.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static const gchar *out_dir;

static void
write_seed (const gchar * name, const guint8 * data, gsize len)
{
  g_autofree gchar *path = g_build_filename (out_dir, name, NULL);
  g_autoptr (GError) error = NULL;

  if (!g_file_set_contents (path, (const gchar *) data, len, &error)) {
    g_printerr ("%s\n", error->message);
    exit (1);
  }
}

static void
add (PpChunk * chunk, const gchar * name, PpDType dtype, guint ndim, ...)
{
  gint64 shape[PP_TENSOR_MAX_DIMS];
  va_list ap;

  va_start (ap, ndim);
  for (guint i = 0; i < ndim; i++)
    shape[i] = va_arg (ap, gint64);
  va_end (ap);
  pp_chunk_add_tensor (chunk, pp_tensor_new (name, dtype, ndim, shape, NULL));
}

static PpChunk *
base_chunk (void)
{
  PpChunk *c = pp_chunk_new ();

  c->flags = PP_CHUNK_FLAG_DATA;
  c->chunk_id = 7;
  c->cache_epoch = 2;
  c->plan_id = 0x5eed;
  c->pts = 40 * G_GUINT64_CONSTANT (1000000);
  c->next_step = 3;
  c->n_steps = 20;
  c->submit_us = G_GUINT64_CONSTANT (1700000000000000);
  return c;
}

static GBytes *
encode (PpChunk * chunk)
{
  g_autoptr (GError) error = NULL;
  GBytes *head = pp_envelope_encode_head (chunk, &error);

  if (head == NULL) {
    g_printerr ("%s\n", error->message);
    exit (1);
  }
  pp_chunk_free (chunk);
  return head;
}

static void
write_bytes (const gchar * name, GBytes * head)
{
  gsize len;
  const guint8 *data = g_bytes_get_data (head, &len);

  write_seed (name, data, len);
}

/* A valid head with one header byte changed: fields outside the CRC. */
static void
write_patched (const gchar * name, GBytes * head, gsize off, guint8 value)
{
  gsize len;
  g_autofree guint8 *copy = g_bytes_unref_to_data (g_bytes_ref (head), &len);

  copy[off] = value;
  write_seed (name, copy, len);
}

/* The encoder refuses what these seeds carry, so they are laid out here:
 * header (as in pp-envelope.h) + @meta + @manifest, with a correct CRC. */
static void
write_raw (const gchar * name, guint32 n_tensors, GVariant * meta,
    GVariant * manifest)
{
  gsize meta_len = g_variant_get_size (meta);
  gsize manifest_len = g_variant_get_size (manifest);
  gsize len = PP_ENVELOPE_HEADER_SIZE + meta_len + manifest_len;
  g_autofree guint8 *buf = g_malloc0 (len);
  guint32 u32;
  guint16 u16;
  guint64 u64;

  g_variant_ref_sink (meta);
  g_variant_ref_sink (manifest);
  memcpy (buf + PP_ENVELOPE_HEADER_SIZE, g_variant_get_data (meta), meta_len);
  memcpy (buf + PP_ENVELOPE_HEADER_SIZE + meta_len,
      g_variant_get_data (manifest), manifest_len);
#define PUT(off, var, v) (var = (v), memcpy (buf + (off), &var, sizeof var))
  PUT (0, u32, GUINT32_TO_LE (PP_ENVELOPE_MAGIC));
  buf[4] = PP_ENVELOPE_MAJOR;
  buf[5] = PP_ENVELOPE_MINOR;
  PUT (6, u16, GUINT16_TO_LE (PP_CHUNK_FLAG_DATA));
  PUT (8, u64, GUINT64_TO_LE (9));
  PUT (16, u32, GUINT32_TO_LE (1));
  PUT (20, u32, GUINT32_TO_LE (0x5eed));
  PUT (24, u64, G_MAXUINT64);
  PUT (32, u32, GUINT32_TO_LE (n_tensors));
  PUT (36, u32, GUINT32_TO_LE (meta_len));
  PUT (40, u32, GUINT32_TO_LE (manifest_len));
  PUT (44, u32, GUINT32_TO_LE ((guint32) crc32 (0L,
              buf + PP_ENVELOPE_HEADER_SIZE, meta_len + manifest_len)));
#undef PUT
  write_seed (name, buf, len);
  g_variant_unref (meta);
  g_variant_unref (manifest);
}

static GVariant *
meta (void)
{
  return g_variant_new (PP_ENVELOPE_META_TYPE, 1, 20, (guint64) 0);
}

/* A one-entry manifest. */
static GVariant *
manifest1 (const gchar * name, guchar dtype, guint ndim, const gint64 * shape,
    guint64 nbytes)
{
  GVariantBuilder b;

  g_variant_builder_init (&b, G_VARIANT_TYPE (PP_ENVELOPE_MANIFEST_TYPE));
  g_variant_builder_add (&b, "(sy@axt)", name, dtype,
      g_variant_new_fixed_array (G_VARIANT_TYPE_INT64, shape, ndim,
          sizeof (gint64)), nbytes);
  return g_variant_builder_end (&b);
}

int
main (int argc, char **argv)
{
  static const gint64 shape[] = { 2, 3, 4, 5, 6 };
  static const gint64 negative[] = { 4, -2 };
  static const gint64 huge[] = { G_MAXINT64 / 2, 4 };
  GBytes *one;
  PpChunk *c;

  if (argc != 2) {
    g_printerr ("usage: %s OUTPUT-DIR\n", argv[0]);
    return 2;
  }
  out_dir = argv[1];
  g_mkdir_with_parents (out_dir, 0755);

  c = base_chunk ();
  add (c, "latent", PP_DTYPE_F32, 4, (gint64) 1, (gint64) 4, (gint64) 8,
      (gint64) 8);
  one = encode (c);
  write_bytes ("valid-one", one);

  c = base_chunk ();
  c->flags = PP_CHUNK_FLAG_DATA | PP_CHUNK_FLAG_RESET;
  add (c, "latent", PP_DTYPE_F32, 4, (gint64) 1, (gint64) 4, (gint64) 8,
      (gint64) 8);
  add (c, "timesteps", PP_DTYPE_F64, 1, (gint64) 20);
  add (c, "mask", PP_DTYPE_U8, 2, (gint64) 8, (gint64) 8);
  add (c, "", PP_DTYPE_U8, 3, (gint64) 1, (gint64) 1, (gint64) 1);
  write_bytes ("valid-mixed", encode (c));

  c = base_chunk ();
  c->flags = PP_CHUNK_FLAG_WARMUP;
  for (guint i = 0; i < PP_ENVELOPE_MAX_TENSORS; i++) {
    g_autofree gchar *name = g_strdup_printf ("t%02u", i);
    add (c, name, 1 + i % 3, 1, (gint64) (i + 1));
  }
  write_bytes ("valid-max-tensors", encode (c));

  c = base_chunk ();
  c->flags = PP_CHUNK_FLAG_SHUTDOWN;
  c->pts = G_MAXUINT64;
  write_bytes ("valid-shutdown", encode (c));

  c = base_chunk ();
  c->flags = 0;                 /* reads as data */
  add (c, "abcdefghijklmnopqrstuvwxyz01234", PP_DTYPE_F32, 1, (gint64) 1);
  write_bytes ("valid-long-name", encode (c));

  /* Header fields, one at a time. */
  write_patched ("valid-minor", one, 5, PP_ENVELOPE_MINOR + 1);
  write_patched ("valid-abort", one, 6, PP_CHUNK_FLAG_ABORT);
  write_patched ("bad-magic", one, 0, 'X');
  write_patched ("bad-major", one, 4, PP_ENVELOPE_MAJOR + 1);
  write_patched ("bad-flags-unknown", one, 6, 1 << 5);
  write_patched ("bad-flags-kinds", one, 6,
      PP_CHUNK_FLAG_DATA | PP_CHUNK_FLAG_SHUTDOWN);
  write_patched ("bad-flags-reset", one, 6,
      PP_CHUNK_FLAG_RESET | PP_CHUNK_FLAG_ABORT);
  write_patched ("bad-count", one, 32, 2);
  write_patched ("bad-count-max", one, 32, PP_ENVELOPE_MAX_TENSORS + 1);
  write_patched ("bad-meta-length", one, 36, 17);
  write_patched ("bad-crc", one, 44,
      ((const guint8 *) g_bytes_get_data (one, NULL))[44] ^ 0x01);
  write_seed ("bad-short", g_bytes_get_data (one, NULL),
      PP_ENVELOPE_HEADER_SIZE - 1);

  /* Meta and manifest, one rule at a time. */
  write_raw ("bad-meta-type", 1, g_variant_new ("(uu)", 1, 20),
      manifest1 ("x", PP_DTYPE_F32, 1, shape, 8));
  write_raw ("bad-dtype", 1, meta (), manifest1 ("x", 4, 1, shape, 2));
  write_raw ("bad-name", 1, meta (),
      manifest1 ("abcdefghijklmnopqrstuvwxyz012345", PP_DTYPE_U8, 1, shape,
          2));
  write_raw ("bad-ndim-0", 1, meta (), manifest1 ("x", PP_DTYPE_U8, 0,
          shape, 1));
  write_raw ("bad-ndim-5", 1, meta (), manifest1 ("x", PP_DTYPE_U8, 5,
          shape, 720));
  write_raw ("bad-bytes", 1, meta (), manifest1 ("x", PP_DTYPE_F32, 2, shape,
          6));
  write_raw ("bad-shape", 1, meta (), manifest1 ("x", PP_DTYPE_U8, 2,
          negative, 8));
  write_raw ("bad-shape-overflow", 1, meta (), manifest1 ("x", PP_DTYPE_F64,
          2, huge, 8));
  write_raw ("bad-too-large", 1, meta (), manifest1 ("x", PP_DTYPE_U8, 2,
          (const gint64[]) { 65536, 65536 }, G_GUINT64_CONSTANT (1) << 32));

  g_bytes_unref (one);
  return 0;
}
