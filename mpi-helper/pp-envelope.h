/* ppdiffuse — chunk envelope v1: what travels with every chunk.
 *
 * Head message = fixed header (little-endian) + meta + tensor manifest:
 *
 *   off size field
 *     0   4  magic "PPDF"
 *     4   2  version (1)
 *     6   2  flags (PP_CHUNK_FLAG_*)
 *     8   8  chunk_id
 *    16   4  cache_epoch
 *    20   4  plan_id
 *    24   8  pts (GstClockTime, all ones = none)
 *    32   4  tensor count
 *    36   4  meta length
 *    40   4  manifest length
 *    44   4  CRC-32 of meta + manifest
 *
 * meta is a GVariant of type PP_ENVELOPE_META_TYPE, the manifest one of type
 * PP_ENVELOPE_MANIFEST_TYPE (both serialise deterministically).  The
 * payloads follow as one message per tensor, in manifest order. */
#pragma once

#include "pp-tensor.h"

G_BEGIN_DECLS

#define PP_ENVELOPE_MAGIC 0x46445050u   /* "PPDF" read little-endian */
#define PP_ENVELOPE_VERSION 1
#define PP_ENVELOPE_HEADER_SIZE 48
#define PP_ENVELOPE_HEAD_MAX (64 * 1024)
#define PP_ENVELOPE_MAX_TENSORS 16
/* (next step to run, steps in the schedule, rank 0's submit time in µs) */
#define PP_ENVELOPE_META_TYPE "(uut)"
/* [(name, dtype, shape, bytes)] */
#define PP_ENVELOPE_MANIFEST_TYPE "a(syaxt)"

typedef enum
{
  /* The last chunk of a mesh: each worker forwards it after its in-flight
   * work and then leaves its loop. */
  PP_CHUNK_FLAG_SHUTDOWN = 1 << 0,
} PpChunkFlags;
#define PP_CHUNK_FLAGS_KNOWN (PP_CHUNK_FLAG_SHUTDOWN)

typedef struct
{
  guint16 flags;
  guint64 chunk_id;
  guint32 cache_epoch;
  guint32 plan_id;
  guint64 pts;
  guint32 next_step;
  guint32 n_steps;
  guint64 submit_us;
  GPtrArray *tensors;           /* PpTensor*, owned */
} PpChunk;

PpChunk  *pp_chunk_new           (void);
void      pp_chunk_free          (PpChunk * chunk);
void      pp_chunk_add_tensor    (PpChunk * chunk, PpTensor * tensor);
PpTensor *pp_chunk_get_tensor    (const PpChunk * chunk, const gchar * name);
gsize     pp_chunk_payload_bytes (const PpChunk * chunk);

/* Serialises header + meta + manifest.  Fails (before anything is sent)
 * when the head would exceed PP_ENVELOPE_HEAD_MAX or a payload cannot be
 * addressed by one message. */
GBytes   *pp_envelope_encode_head (const PpChunk * chunk, GError ** error);
/* Parses and validates a head; returns a chunk whose tensors are allocated
 * and ready to receive their payloads.  Errors name the field, the
 * expected and the received value. */
PpChunk  *pp_envelope_decode_head (const guint8 * data, gsize len,
                                   GError ** error);

/* What a receiver expects of the next chunk; G_MAXUINT64 / G_MAXUINT32
 * leave a field unchecked. */
typedef struct
{
  guint64 chunk_id;
  guint32 plan_id;
  guint32 next_step;
  guint32 n_steps;
  guint32 min_cache_epoch;
} PpChunkExpect;

gboolean  pp_chunk_check         (const PpChunk * chunk,
                                  const PpChunkExpect * expect,
                                  GError ** error);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (PpChunk, pp_chunk_free)

G_END_DECLS
