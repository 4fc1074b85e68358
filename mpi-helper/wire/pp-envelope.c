/* ppdiffuse — chunk envelope v1. */
#include "pp-envelope.h"
#include "pp-backend-impl.h"    /* the memory table only: no backend code */
#include "pp-error.h"

#include <string.h>
#include <zlib.h>

struct _PpEnvelopeCodec
{
  guint8 *head;                 /* the head buffer */
  gsize head_size;
  /* The last manifest written or read, serialised and parsed. */
  gboolean have_manifest;
  guint8 *manifest;
  gsize manifest_len;
  gsize manifest_size;          /* of the allocation */
  guint n_specs;
  PpTensorSpec specs[PP_ENVELOPE_MAX_TENSORS];
};

PpChunk *
pp_chunk_new (void)
{
  PpChunk *c = g_new0 (PpChunk, 1);

  c->tensors = g_ptr_array_new_with_free_func ((GDestroyNotify) pp_tensor_free);
  return c;
}

PpChunk *
pp_chunk_copy (const PpChunk * chunk, GError ** error)
{
  PpChunk *copy = pp_chunk_new ();

  copy->flags = chunk->flags;
  copy->chunk_id = chunk->chunk_id;
  copy->cache_epoch = chunk->cache_epoch;
  copy->plan_id = chunk->plan_id;
  copy->pts = chunk->pts;
  copy->next_step = chunk->next_step;
  copy->n_steps = chunk->n_steps;
  copy->submit_us = chunk->submit_us;
  for (guint i = 0; i < chunk->tensors->len; i++) {
    const PpTensor *t = g_ptr_array_index (chunk->tensors, i);
    PpTensor *c = pp_tensor_new_full (t->backend, t->name, t->dtype,
        t->ndim, t->shape, error);

    if (c == NULL) {
      pp_chunk_free (copy);
      return NULL;
    }
    /* Through the table: the envelope links no backend code. */
    if (t->backend != NULL)
      t->backend->memory->copy (t->backend, c->data, t->data, t->nbytes);
    else
      memcpy (c->data, t->data, t->nbytes);
    pp_chunk_add_tensor (copy, c);
  }
  return copy;
}

static void
chunk_forget_ready (PpChunk * chunk)
{
  if (chunk->ready != NULL)
    chunk->backend->memory->fence_free (chunk->backend, chunk->ready);
  chunk->ready = NULL;
}

void
pp_chunk_mark_ready (PpChunk * chunk)
{
  PpBackend *be = chunk->backend;

  chunk_forget_ready (chunk);
  /* Through the table: the envelope links no backend code. */
  if (be != NULL && be->memory->fence != NULL)
    chunk->ready = be->memory->fence (be);
}

void
pp_chunk_clear_ready (PpChunk * chunk)
{
  chunk_forget_ready (chunk);
}

gboolean
pp_chunk_wait_ready (const PpChunk * chunk, gpointer stream)
{
  if (chunk->ready == NULL)
    return FALSE;
  chunk->backend->memory->fence_wait (chunk->backend, chunk->ready, stream);
  return TRUE;
}

void
pp_chunk_free (PpChunk * chunk)
{
  if (chunk == NULL)
    return;
  chunk_forget_ready (chunk);
  if (chunk->owner != NULL) {
    chunk->owner->release (chunk);
    return;
  }
  g_ptr_array_unref (chunk->tensors);
  g_free (chunk);
}

void
pp_chunk_add_tensor (PpChunk * chunk, PpTensor * tensor)
{
  g_ptr_array_add (chunk->tensors, tensor);
}

PpTensor *
pp_chunk_get_tensor (const PpChunk * chunk, const gchar * name)
{
  for (guint i = 0; i < chunk->tensors->len; i++) {
    PpTensor *t = g_ptr_array_index (chunk->tensors, i);
    if (g_str_equal (t->name, name))
      return t;
  }
  return NULL;
}

gsize
pp_chunk_payload_bytes (const PpChunk * chunk)
{
  gsize total = 0;

  for (guint i = 0; i < chunk->tensors->len; i++)
    total += ((PpTensor *) g_ptr_array_index (chunk->tensors, i))->nbytes;
  return total;
}

void
pp_tensor_spec_of (const PpTensor * t, PpTensorSpec * spec)
{
  memset (spec, 0, sizeof *spec);
  g_strlcpy (spec->name, t->name, sizeof spec->name);
  spec->dtype = t->dtype;
  spec->ndim = t->ndim;
  memcpy (spec->shape, t->shape, t->ndim * sizeof t->shape[0]);
  spec->nbytes = t->nbytes;
}

gboolean
pp_tensor_has_spec (const PpTensor * t, const PpTensorSpec * spec)
{
  return pp_tensor_has_spec_on (t, spec, NULL);
}

gboolean
pp_tensor_has_spec_on (const PpTensor * t, const PpTensorSpec * spec,
    struct _PpBackend * backend)
{
  if (t->backend != backend || t->data == NULL || t->dtype != spec->dtype
      || t->ndim != spec->ndim)
    return FALSE;
  for (guint d = 0; d < spec->ndim; d++)
    if (t->shape[d] != spec->shape[d])
      return FALSE;
  return TRUE;
}

PpTensor *
pp_chunk_fit_tensor (PpChunk * chunk, guint index, const PpTensorSpec * spec,
    GError ** error)
{
  GPtrArray *tensors = chunk->tensors;
  PpTensor *t = index < tensors->len ? g_ptr_array_index (tensors, index)
      : NULL;

  struct _PpBackend *backend = chunk->backend;

  g_return_val_if_fail (index <= tensors->len, NULL);
  if (t != NULL && pp_tensor_has_spec_on (t, spec, backend)) {
    if (strcmp (t->name, spec->name) != 0)
      g_strlcpy (t->name, spec->name, sizeof t->name);
    return t;
  }
  /* Device payloads (a link whose payloads travel over NCCL) are the
   * backend's memory, allocated and freed through its table. */
  t = pp_tensor_new_full (backend, spec->name, spec->dtype, spec->ndim,
      spec->shape, error);
  if (t == NULL)
    return NULL;
  if (index < tensors->len) {
    pp_tensor_free (g_ptr_array_index (tensors, index));
    g_ptr_array_index (tensors, index) = t;
  } else {
    g_ptr_array_add (tensors, t);
  }
  /* A backend hands out freed memory again without a synchronize, its
   * last users queued on its stream before the next one's work: a
   * transfer into the new tensor from another stream waits for them. */
  if (backend != NULL)
    pp_chunk_mark_ready (chunk);
  return t;
}

void
pp_chunk_truncate (PpChunk * chunk, guint n_tensors)
{
  if (n_tensors < chunk->tensors->len)
    g_ptr_array_set_size (chunk->tensors, n_tensors);
}

void
pp_chunk_abandon_payloads (PpChunk * chunk)
{
  for (guint i = 0; i < chunk->tensors->len; i++)
    ((PpTensor *) g_ptr_array_index (chunk->tensors, i))->data = NULL;
  g_ptr_array_set_size (chunk->tensors, 0);
}

static void
put_u16 (guint8 * p, guint16 v)
{
  v = GUINT16_TO_LE (v);
  memcpy (p, &v, sizeof v);
}

static void
put_u32 (guint8 * p, guint32 v)
{
  v = GUINT32_TO_LE (v);
  memcpy (p, &v, sizeof v);
}

static void
put_u64 (guint8 * p, guint64 v)
{
  v = GUINT64_TO_LE (v);
  memcpy (p, &v, sizeof v);
}

static guint16
get_u16 (const guint8 * p)
{
  guint16 v;
  memcpy (&v, p, sizeof v);
  return GUINT16_FROM_LE (v);
}

static guint32
get_u32 (const guint8 * p)
{
  guint32 v;
  memcpy (&v, p, sizeof v);
  return GUINT32_FROM_LE (v);
}

static guint64
get_u64 (const guint8 * p)
{
  guint64 v;
  memcpy (&v, p, sizeof v);
  return GUINT64_FROM_LE (v);
}

static GVariant *
build_manifest (const PpChunk * chunk)
{
  GVariantBuilder b;

  g_variant_builder_init (&b, G_VARIANT_TYPE (PP_ENVELOPE_MANIFEST_TYPE));
  for (guint i = 0; i < chunk->tensors->len; i++) {
    const PpTensor *t = g_ptr_array_index (chunk->tensors, i);
    g_variant_builder_add (&b, "(sy@axt)", t->name, (guchar) t->dtype,
        g_variant_new_fixed_array (G_VARIANT_TYPE_INT64, t->shape, t->ndim,
            sizeof (gint64)), (guint64) t->nbytes);
  }
  return g_variant_ref_sink (g_variant_builder_end (&b));
}

PpEnvelopeCodec *
pp_envelope_codec_new (void)
{
  return g_new0 (PpEnvelopeCodec, 1);
}

static void
codec_clear (PpEnvelopeCodec * codec)
{
  g_free (codec->head);
  g_free (codec->manifest);
}

void
pp_envelope_codec_free (PpEnvelopeCodec * codec)
{
  if (codec == NULL)
    return;
  codec_clear (codec);
  g_free (codec);
}

guint8 *
pp_envelope_codec_buffer (PpEnvelopeCodec * codec, gsize len)
{
  len = MAX (len, 1);
  if (len > codec->head_size) {
    g_free (codec->head);
    codec->head = g_malloc (len);
    codec->head_size = len;
  }
  return codec->head;
}

void
pp_envelope_codec_abandon_buffer (PpEnvelopeCodec * codec)
{
  codec->head = NULL;
  codec->head_size = 0;
}

/* Keeps @len bytes of serialised manifest and their @n parsed entries. */
static void
cache_manifest (PpEnvelopeCodec * codec, const guint8 * data, gsize len,
    const PpTensorSpec * specs, guint n)
{
  if (len > codec->manifest_size) {
    g_free (codec->manifest);
    codec->manifest = g_malloc (len);
    codec->manifest_size = len;
  }
  if (len > 0)
    memcpy (codec->manifest, data, len);
  codec->manifest_len = len;
  memcpy (codec->specs, specs, n * sizeof *specs);
  codec->n_specs = n;
  codec->have_manifest = TRUE;
}

static gboolean
spec_equal (const PpTensorSpec * a, const PpTensorSpec * b)
{
  return strcmp (a->name, b->name) == 0 && a->dtype == b->dtype
      && a->ndim == b->ndim && a->nbytes == b->nbytes
      && memcmp (a->shape, b->shape, a->ndim * sizeof a->shape[0]) == 0;
}

/* Whether the codec's manifest lists @chunk's tensors. */
static gboolean
manifest_lists (const PpEnvelopeCodec * codec, const PpChunk * chunk)
{
  if (!codec->have_manifest || codec->n_specs != chunk->tensors->len)
    return FALSE;
  for (guint i = 0; i < chunk->tensors->len; i++) {
    PpTensorSpec spec;

    pp_tensor_spec_of (g_ptr_array_index (chunk->tensors, i), &spec);
    if (!spec_equal (&spec, &codec->specs[i]))
      return FALSE;
  }
  return TRUE;
}

/* The manifest of @chunk's tensors, serialised once for a stream. */
static void
cache_manifest_of (PpEnvelopeCodec * codec, const PpChunk * chunk)
{
  g_autoptr (GVariant) manifest = build_manifest (chunk);
  PpTensorSpec specs[PP_ENVELOPE_MAX_TENSORS];

  for (guint i = 0; i < chunk->tensors->len; i++)
    pp_tensor_spec_of (g_ptr_array_index (chunk->tensors, i), &specs[i]);
  cache_manifest (codec, g_variant_get_data (manifest),
      g_variant_get_size (manifest), specs, chunk->tensors->len);
}

/* The checks that can fail, all before anything is written. */
static gboolean
check_encodable (const PpChunk * chunk, GError ** error)
{
  if (!pp_chunk_flags_valid (chunk->flags)) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "chunk %" G_GUINT64_FORMAT " has flags 0x%x: unknown bits, more than "
        "one kind, or reset on neither data nor warm-up", chunk->chunk_id,
        chunk->flags);
    return FALSE;
  }
  if (chunk->tensors->len > PP_ENVELOPE_MAX_TENSORS) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "chunk %" G_GUINT64_FORMAT " has %u tensors, at most %d fit an "
        "envelope", chunk->chunk_id, chunk->tensors->len,
        PP_ENVELOPE_MAX_TENSORS);
    return FALSE;
  }
  for (guint i = 0; i < chunk->tensors->len; i++) {
    const PpTensor *t = g_ptr_array_index (chunk->tensors, i);
    if (t->nbytes > G_MAXINT) {
      g_set_error (error, PP_ERROR, PP_ERROR_SHAPE,
          "tensor '%s' of chunk %" G_GUINT64_FORMAT " is %" G_GSIZE_FORMAT
          " bytes; one message carries at most %d", t->name, chunk->chunk_id,
          t->nbytes, G_MAXINT);
      return FALSE;
    }
  }
  return TRUE;
}

/* PP_ENVELOPE_META_TYPE as GVariant serialises it (PP_ENVELOPE_META_SIZE):
 * written by hand, so that a head needs no GVariant of its own. */
static void
write_meta (guint8 * p, const PpChunk * chunk)
{
  memcpy (p, &chunk->next_step, sizeof chunk->next_step);
  memcpy (p + 4, &chunk->n_steps, sizeof chunk->n_steps);
  memcpy (p + 8, &chunk->submit_us, sizeof chunk->submit_us);
}

static void
read_meta (const guint8 * p, PpChunk * chunk)
{
  memcpy (&chunk->next_step, p, sizeof chunk->next_step);
  memcpy (&chunk->n_steps, p + 4, sizeof chunk->n_steps);
  memcpy (&chunk->submit_us, p + 8, sizeof chunk->submit_us);
}

gboolean
pp_envelope_write_head (PpEnvelopeCodec * codec, const PpChunk * chunk,
    const guint8 ** head, gsize * len, GError ** error)
{
  const gsize meta_len = PP_ENVELOPE_META_SIZE;
  gsize total;
  guint8 *buf;
  guint32 crc;

  if (!check_encodable (chunk, error))
    return FALSE;
  if (!manifest_lists (codec, chunk))
    cache_manifest_of (codec, chunk);
  total = PP_ENVELOPE_HEADER_SIZE + meta_len + codec->manifest_len;
  if (total > PP_ENVELOPE_HEAD_MAX) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "chunk %" G_GUINT64_FORMAT " head is %" G_GSIZE_FORMAT " bytes, "
        "more than the %d an envelope allows", chunk->chunk_id, total,
        PP_ENVELOPE_HEAD_MAX);
    return FALSE;
  }
  buf = pp_envelope_codec_buffer (codec, total);
  write_meta (buf + PP_ENVELOPE_HEADER_SIZE, chunk);
  /* An empty manifest (the shutdown marker) serialises to no data at all:
   * no pointer to copy from. */
  if (codec->manifest_len > 0)
    memcpy (buf + PP_ENVELOPE_HEADER_SIZE + meta_len, codec->manifest,
        codec->manifest_len);
  crc = (guint32) crc32 (0L, buf + PP_ENVELOPE_HEADER_SIZE,
      meta_len + codec->manifest_len);
  put_u32 (buf + 0, PP_ENVELOPE_MAGIC);
  buf[4] = PP_ENVELOPE_MAJOR;
  buf[5] = PP_ENVELOPE_MINOR;
  put_u16 (buf + 6, chunk->flags);
  put_u64 (buf + 8, chunk->chunk_id);
  put_u32 (buf + 16, chunk->cache_epoch);
  put_u32 (buf + 20, chunk->plan_id);
  put_u64 (buf + 24, chunk->pts);
  put_u32 (buf + 32, chunk->tensors->len);
  put_u32 (buf + 36, meta_len);
  put_u32 (buf + 40, codec->manifest_len);
  put_u32 (buf + 44, crc);
  *head = buf;
  *len = total;
  return TRUE;
}

GBytes *
pp_envelope_encode_head (const PpChunk * chunk, GError ** error)
{
  PpEnvelopeCodec codec = { NULL };
  const guint8 *head;
  GBytes *bytes = NULL;
  gsize len;

  if (pp_envelope_write_head (&codec, chunk, &head, &len, error))
    bytes = g_bytes_new (head, len);
  codec_clear (&codec);
  return bytes;
}

#define FIELD_ERROR(error, field, fmt_expected, expected, fmt_received, received) \
  g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL, \
      "chunk envelope field %s: expected " fmt_expected ", received " \
      fmt_received, field, expected, received)

/* Checks every entry of @manifest and writes them to @specs. */
static gboolean
parse_manifest (GVariant * manifest, guint32 n_tensors, PpTensorSpec * specs,
    GError ** error)
{
  gsize n = g_variant_n_children (manifest);

  if (n != n_tensors) {
    FIELD_ERROR (error, "tensor count", "%u (manifest entries)", n_tensors,
        "%" G_GSIZE_FORMAT, n);
    return FALSE;
  }
  for (gsize i = 0; i < n; i++) {
    g_autoptr (GVariant) shape_v = NULL;
    const gchar *name;
    guchar dtype;
    guint64 nbytes;
    const gint64 *shape;
    gsize ndim;
    PpTensorSpec *spec = &specs[i];

    g_variant_get_child (manifest, i, "(&sy@axt)", &name, &dtype, &shape_v,
        &nbytes);
    shape = g_variant_get_fixed_array (shape_v, &ndim, sizeof (gint64));
    if (!pp_dtype_is_valid (dtype)) {
      g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
          "chunk envelope field manifest[%" G_GSIZE_FORMAT "].dtype: "
          "expected F32, F64 or U8, received %u", i, dtype);
      return FALSE;
    }
    if (strlen (name) > PP_TENSOR_NAME_MAX) {
      g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
          "chunk envelope field manifest[%" G_GSIZE_FORMAT "].name: "
          "expected at most %d bytes, received '%s'", i, PP_TENSOR_NAME_MAX,
          name);
      return FALSE;
    }
    if (ndim == 0 || ndim > PP_TENSOR_MAX_DIMS || nbytes == 0
        || pp_tensor_shape_bytes (dtype, ndim, shape) != nbytes
        || nbytes > G_MAXINT) {
      g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
          "chunk envelope field manifest[%" G_GSIZE_FORMAT "].bytes: "
          "expected %" G_GSIZE_FORMAT " for %" G_GSIZE_FORMAT
          "-d %s '%s', received %" G_GUINT64_FORMAT, i,
          pp_tensor_shape_bytes (dtype, ndim, shape), ndim,
          pp_dtype_name (dtype), name, nbytes);
      return FALSE;
    }
    memset (spec, 0, sizeof *spec);
    g_strlcpy (spec->name, name, sizeof spec->name);
    spec->dtype = dtype;
    spec->ndim = ndim;
    memcpy (spec->shape, shape, ndim * sizeof *shape);
    spec->nbytes = nbytes;
  }
  return TRUE;
}

/* A GVariant over its own aligned copy of @len bytes at @data. */
static GVariant *
variant_copy (const gchar * type, const guint8 * data, gsize len)
{
  g_autoptr (GBytes) bytes = g_bytes_new (data, len);

  return g_variant_ref_sink (g_variant_new_from_bytes (G_VARIANT_TYPE (type),
          bytes, FALSE));
}

gboolean
pp_chunk_flags_valid (guint16 flags)
{
  const guint16 kind = flags & PP_CHUNK_KIND_FLAGS;

  if (flags & ~PP_CHUNK_FLAGS_KNOWN)
    return FALSE;
  if (kind & (kind - 1))        /* more than one bit */
    return FALSE;
  return !(flags & PP_CHUNK_FLAG_RESET) || kind == 0
      || kind == PP_CHUNK_FLAG_DATA || kind == PP_CHUNK_FLAG_WARMUP;
}

/* Whether @len bytes at @data are the manifest the codec last read or
 * wrote: then its parsed entries stand, checked already. */
static gboolean
manifest_is_cached (const PpEnvelopeCodec * codec, const guint8 * data,
    gsize len)
{
  return codec->have_manifest && codec->manifest_len == len
      && (len == 0 || memcmp (codec->manifest, data, len) == 0);
}

gboolean
pp_envelope_read_head (PpEnvelopeCodec * codec, const guint8 * data,
    gsize len, PpChunk * chunk, GError ** error)
{
  guint32 magic, n_tensors, meta_len, manifest_len, crc, actual_crc;
  const guint8 *manifest_data;
  guint8 major;

  if (len < PP_ENVELOPE_HEADER_SIZE) {
    FIELD_ERROR (error, "header size", "at least %d bytes",
        PP_ENVELOPE_HEADER_SIZE, "%" G_GSIZE_FORMAT " bytes", len);
    return FALSE;
  }
  magic = get_u32 (data);
  if (magic != PP_ENVELOPE_MAGIC) {
    FIELD_ERROR (error, "magic", "0x%08x", PP_ENVELOPE_MAGIC, "0x%08x", magic);
    return FALSE;
  }
  major = data[4];
  if (major != PP_ENVELOPE_MAJOR) {
    FIELD_ERROR (error, "major version", "%d", PP_ENVELOPE_MAJOR, "%u",
        major);
    return FALSE;
  }
  chunk->flags = get_u16 (data + 6);
  if (!pp_chunk_flags_valid (chunk->flags)) {
    FIELD_ERROR (error, "flags", "known bits (0x%x), one kind at most, "
        "reset only on data or warm-up", PP_CHUNK_FLAGS_KNOWN, "0x%x",
        chunk->flags);
    return FALSE;
  }
  chunk->chunk_id = get_u64 (data + 8);
  chunk->cache_epoch = get_u32 (data + 16);
  chunk->plan_id = get_u32 (data + 20);
  chunk->pts = get_u64 (data + 24);
  n_tensors = get_u32 (data + 32);
  meta_len = get_u32 (data + 36);
  manifest_len = get_u32 (data + 40);
  crc = get_u32 (data + 44);
  if (n_tensors > PP_ENVELOPE_MAX_TENSORS) {
    FIELD_ERROR (error, "tensor count", "at most %d", PP_ENVELOPE_MAX_TENSORS,
        "%u", n_tensors);
    return FALSE;
  }
  if ((guint64) PP_ENVELOPE_HEADER_SIZE + meta_len + manifest_len != len) {
    FIELD_ERROR (error, "meta length + manifest length",
        "%" G_GSIZE_FORMAT " (head size less header)",
        len - PP_ENVELOPE_HEADER_SIZE, "%" G_GUINT64_FORMAT,
        (guint64) meta_len + manifest_len);
    return FALSE;
  }
  actual_crc = (guint32) crc32 (0L, data + PP_ENVELOPE_HEADER_SIZE,
      meta_len + manifest_len);
  if (crc != actual_crc) {
    FIELD_ERROR (error, "crc", "0x%08x (computed)", actual_crc, "0x%08x", crc);
    return FALSE;
  }
  manifest_data = data + PP_ENVELOPE_HEADER_SIZE + meta_len;
  /* A fixed-size meta is in normal form exactly when it has its size; a
   * manifest seen before was checked then. */
  if (!manifest_is_cached (codec, manifest_data, manifest_len)) {
    g_autoptr (GVariant) manifest = variant_copy (PP_ENVELOPE_MANIFEST_TYPE,
        manifest_data, manifest_len);
    PpTensorSpec specs[PP_ENVELOPE_MAX_TENSORS];

    if (meta_len != PP_ENVELOPE_META_SIZE
        || !g_variant_is_normal_form (manifest)) {
      FIELD_ERROR (error, "meta/manifest", "%s", "GVariants in normal form",
          "%s", "malformed serialisation");
      return FALSE;
    }
    if (!parse_manifest (manifest, n_tensors, specs, error))
      return FALSE;
    cache_manifest (codec, manifest_data, manifest_len, specs, n_tensors);
  } else if (meta_len != PP_ENVELOPE_META_SIZE) {
    FIELD_ERROR (error, "meta/manifest", "%s", "GVariants in normal form",
        "%s", "malformed serialisation");
    return FALSE;
  } else if (codec->n_specs != n_tensors) {
    FIELD_ERROR (error, "tensor count", "%u (manifest entries)", n_tensors,
        "%u", codec->n_specs);
    return FALSE;
  }
  read_meta (data + PP_ENVELOPE_HEADER_SIZE, chunk);
  for (guint i = 0; i < n_tensors; i++)
    if (pp_chunk_fit_tensor (chunk, i, &codec->specs[i], error) == NULL)
      return FALSE;
  pp_chunk_truncate (chunk, n_tensors);
  return TRUE;
}

PpChunk *
pp_envelope_decode_head (const guint8 * data, gsize len, GError ** error)
{
  PpEnvelopeCodec codec = { NULL };
  PpChunk *chunk = pp_chunk_new ();

  if (!pp_envelope_read_head (&codec, data, len, chunk, error))
    g_clear_pointer (&chunk, pp_chunk_free);
  codec_clear (&codec);
  return chunk;
}

gboolean
pp_chunk_check (const PpChunk * chunk, const PpChunkExpect * e,
    GError ** error)
{
  if (e->plan_id != G_MAXUINT32 && chunk->plan_id != e->plan_id) {
    FIELD_ERROR (error, "plan_id", "0x%08x", e->plan_id, "0x%08x",
        chunk->plan_id);
    return FALSE;
  }
  if (e->chunk_id != G_MAXUINT64 && chunk->chunk_id != e->chunk_id) {
    FIELD_ERROR (error, "chunk_id", "%" G_GUINT64_FORMAT, e->chunk_id,
        "%" G_GUINT64_FORMAT, chunk->chunk_id);
    return FALSE;
  }
  if (chunk->flags & PP_CHUNK_FLAG_SHUTDOWN)
    return TRUE;                /* carries no steps */
  if (e->min_cache_epoch != G_MAXUINT32
      && chunk->cache_epoch < e->min_cache_epoch) {
    FIELD_ERROR (error, "cache_epoch", "at least %u", e->min_cache_epoch,
        "%u", chunk->cache_epoch);
    return FALSE;
  }
  if (e->n_steps != G_MAXUINT32 && chunk->n_steps != e->n_steps) {
    FIELD_ERROR (error, "n_steps", "%u", e->n_steps, "%u", chunk->n_steps);
    return FALSE;
  }
  if (e->next_step != G_MAXUINT32 && chunk->next_step != e->next_step) {
    FIELD_ERROR (error, "next_step", "%u", e->next_step, "%u",
        chunk->next_step);
    return FALSE;
  }
  return TRUE;
}
