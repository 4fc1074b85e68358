/* libFuzzer target for the chunk envelope decoder: any bytes must give either
 * a chunk that satisfies every invariant the receiver relies on, or an error
 * that says why — never a crash, a leak or undefined behaviour (built with
 * ASan and UBSan). */
#include "pp-envelope.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>

int LLVMFuzzerTestOneInput (const uint8_t * data, size_t size);

static void
check_error (GError * error)
{
  /* Every failure must say why. */
  if (error == NULL || error->message == NULL || *error->message == '\0')
    __builtin_trap ();
  g_error_free (error);
}

static guint32
other_u32 (guint32 v)
{
  /* Differs from @v without turning into "unchecked". */
  return (v ^ 1) == G_MAXUINT32 ? 0 : v ^ 1;
}

/* pp_chunk_check against the chunk's own fields, then with each field
 * wrong in turn: shutdown chunks carry no steps, so only their ids count. */
static void
check_expect (const PpChunk * chunk)
{
  const gboolean shutdown = (chunk->flags & PP_CHUNK_FLAG_SHUTDOWN) != 0;
  const PpChunkExpect own = { .chunk_id = chunk->chunk_id,
    .plan_id = chunk->plan_id, .next_step = chunk->next_step,
    .n_steps = chunk->n_steps, .min_cache_epoch = chunk->cache_epoch
  };
  GError *error = NULL;

  if (!pp_chunk_check (chunk, &own, &error))
    __builtin_trap ();
  for (guint field = 0; field < 5; field++) {
    PpChunkExpect e = own;
    gboolean counts = TRUE;

    switch (field) {
      case 0:
        e.chunk_id = (chunk->chunk_id ^ 1) == G_MAXUINT64
            ? 0 : chunk->chunk_id ^ 1;
        break;
      case 1:
        e.plan_id = other_u32 (chunk->plan_id);
        break;
      case 2:
        e.next_step = other_u32 (chunk->next_step);
        counts = !shutdown;
        break;
      case 3:
        e.n_steps = other_u32 (chunk->n_steps);
        counts = !shutdown;
        break;
      case 4:
        /* An epoch older than the one expected, where expecting a newer
         * one is possible without reaching "unchecked". */
        if (chunk->cache_epoch >= G_MAXUINT32 - 1)
          continue;
        e.min_cache_epoch = chunk->cache_epoch + 1;
        counts = !shutdown;
        break;
    }
    if (pp_chunk_check (chunk, &e, &error) == counts)
      __builtin_trap ();
    if (counts)
      check_error (error);
    else if (error != NULL)
      __builtin_trap ();
    error = NULL;
  }
}

static void
check_chunk (const PpChunk * chunk, const uint8_t * data, size_t size)
{
  /* Every field left unchecked. */
  const PpChunkExpect any = { .chunk_id = G_MAXUINT64,
    .plan_id = G_MAXUINT32, .next_step = G_MAXUINT32,
    .n_steps = G_MAXUINT32, .min_cache_epoch = G_MAXUINT32
  };
  GBytes *again;
  const guint8 *encoded;
  GError *error = NULL;
  gsize total = 0;

  if (!pp_chunk_flags_valid (chunk->flags)
      || chunk->tensors->len > PP_ENVELOPE_MAX_TENSORS)
    __builtin_trap ();
  for (guint i = 0; i < chunk->tensors->len; i++) {
    PpTensor *t = g_ptr_array_index (chunk->tensors, i);
    PpTensor *found = pp_chunk_get_tensor (chunk, t->name);

    if (!pp_dtype_is_valid (t->dtype) || t->ndim < 1
        || t->ndim > PP_TENSOR_MAX_DIMS || t->data == NULL
        || strlen (t->name) > PP_TENSOR_NAME_MAX
        || t->nbytes != pp_tensor_shape_bytes (t->dtype, t->ndim, t->shape)
        || t->nbytes > G_MAXINT || found == NULL
        || strcmp (found->name, t->name) != 0)
      __builtin_trap ();
    /* The payload lands here: both ends of the buffer must be writable.
     * Touching only the ends keeps multi-GiB tensors cheap. */
    ((guint8 *) t->data)[0] = 0xa5;
    ((guint8 *) t->data)[t->nbytes - 1] = 0x5a;
    total += t->nbytes;
  }
  if (pp_chunk_payload_bytes (chunk) != total)
    __builtin_trap ();

  if (!pp_chunk_check (chunk, &any, &error))
    __builtin_trap ();
  check_expect (chunk);

  /* Both halves serialise deterministically and the decoder only takes
   * normal forms, so whatever it accepts must encode back to the same
   * bytes, but for the minor version: any is accepted, ours is written. */
  again = pp_envelope_encode_head (chunk, &error);
  if (again == NULL)
    __builtin_trap ();
  encoded = g_bytes_get_data (again, NULL);
  if (g_bytes_get_size (again) != size || encoded[5] != PP_ENVELOPE_MINOR
      || memcmp (encoded, data, 5) != 0
      || memcmp (encoded + 6, data + 6, size - 6) != 0)
    __builtin_trap ();
  g_bytes_unref (again);
}

static void
check_same (const PpChunk * a, const PpChunk * b)
{
  if (a->flags != b->flags || a->chunk_id != b->chunk_id
      || a->cache_epoch != b->cache_epoch || a->plan_id != b->plan_id
      || a->pts != b->pts || a->next_step != b->next_step
      || a->n_steps != b->n_steps || a->submit_us != b->submit_us
      || a->tensors->len != b->tensors->len)
    __builtin_trap ();
  for (guint i = 0; i < a->tensors->len; i++) {
    const PpTensor *s = g_ptr_array_index (a->tensors, i);
    const PpTensor *t = g_ptr_array_index (b->tensors, i);

    if (strcmp (s->name, t->name) != 0 || s->dtype != t->dtype
        || s->ndim != t->ndim || s->nbytes != t->nbytes
        || memcmp (s->shape, t->shape, s->ndim * sizeof s->shape[0]) != 0)
      __builtin_trap ();
  }
}

/* The same bytes read twice through one codec into one chunk, as a
 * receiver reads a stream: the second read reuses the manifest and the
 * tensors of the first, and must come to the verdict and the chunk of a
 * fresh decode (@fresh, NULL when that failed). */
static void
decode_twice (const uint8_t * data, size_t size, const PpChunk * fresh)
{
  PpEnvelopeCodec *codec = pp_envelope_codec_new ();
  PpChunk *chunk = pp_chunk_new ();

  for (guint pass = 0; pass < 2; pass++) {
    GError *error = NULL;

    if (pp_envelope_read_head (codec, data, size, chunk, &error)
        != (fresh != NULL))
      __builtin_trap ();
    if (fresh == NULL)
      check_error (error);
    else if (error != NULL)
      __builtin_trap ();
    else
      check_same (chunk, fresh);
  }
  pp_chunk_free (chunk);
  pp_envelope_codec_free (codec);
}

static void
decode_one (const uint8_t * data, size_t size)
{
  GError *error = NULL;
  PpChunk *chunk = pp_envelope_decode_head (data, size, &error);

  if (chunk == NULL) {
    check_error (error);
  } else {
    if (error != NULL)
      __builtin_trap ();
    check_chunk (chunk, data, size);
  }
  decode_twice (data, size, chunk);
  pp_chunk_free (chunk);
}

int
LLVMFuzzerTestOneInput (const uint8_t * data, size_t size)
{
  guint32 meta_len, manifest_len, crc;
  guint8 *copy;

  decode_one (data, size);

  /* Almost every mutation of meta or manifest breaks the CRC, which would
   * keep the fuzzer away from the GVariant and manifest checks.  When the
   * lengths add up, decode a copy with the CRC made right as well. */
  if (size < PP_ENVELOPE_HEADER_SIZE)
    return 0;
  memcpy (&meta_len, data + 36, 4);
  memcpy (&manifest_len, data + 40, 4);
  meta_len = GUINT32_FROM_LE (meta_len);
  manifest_len = GUINT32_FROM_LE (manifest_len);
  if ((guint64) PP_ENVELOPE_HEADER_SIZE + meta_len + manifest_len != size)
    return 0;
  crc = GUINT32_TO_LE ((guint32) crc32 (0L, data + PP_ENVELOPE_HEADER_SIZE,
          size - PP_ENVELOPE_HEADER_SIZE));
  if (memcmp (data + 44, &crc, 4) == 0)
    return 0;
  copy = g_memdup2 (data, size);
  memcpy (copy + 44, &crc, 4);
  decode_one (copy, size);
  g_free (copy);
  return 0;
}
