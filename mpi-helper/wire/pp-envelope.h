/* ppdiffuse — chunk envelope v1: what travels with every chunk.
 *
 * Head message = fixed header (little-endian) + meta + tensor manifest:
 *
 *   off size field
 *     0   4  magic "PPDF"
 *     4   1  major version (1)
 *     5   1  minor version (1)
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
 * payloads follow as one message per tensor, in manifest order.
 *
 * Versions: a receiver refuses another major version (an incompatible
 * layout or meaning) and accepts any minor version of its major (a minor
 * bump only adds what an older receiver may ignore).  The init handshake
 * also compares both numbers across ranks (parity). */
#pragma once

#include "pp-tensor.h"

G_BEGIN_DECLS

#define PP_ENVELOPE_MAGIC 0x46445050u   /* "PPDF" read little-endian */
#define PP_ENVELOPE_MAJOR 1
#define PP_ENVELOPE_MINOR 1
#define PP_ENVELOPE_HEADER_SIZE 48
#define PP_ENVELOPE_HEAD_MAX (64 * 1024)
#define PP_ENVELOPE_MAX_TENSORS 16
/* (next step to run, steps in the schedule, rank 0's submit time in µs) */
#define PP_ENVELOPE_META_TYPE "(uut)"
/* Its serialisation: a fixed-size tuple, the members in native byte order
 * at their natural alignment (u at 0 and 4, t at 8). */
#define PP_ENVELOPE_META_SIZE 16
/* [(name, dtype, shape, bytes)] */
#define PP_ENVELOPE_MANIFEST_TYPE "a(syaxt)"

/* A chunk's kind is at most one of DATA, WARMUP, SHUTDOWN and ABORT (none
 * reads as DATA); RESET may accompany DATA or WARMUP. */
typedef enum
{
  /* The last chunk of a mesh: each worker forwards it after its in-flight
   * work and then leaves its loop. */
  PP_CHUNK_FLAG_SHUTDOWN = 1 << 0,
  /* A frame's sample. */
  PP_CHUNK_FLAG_DATA = 1 << 1,
  /* A warm-up pass: computed like a frame, then dropped by rank 0 and left
   * out of every statistic. */
  PP_CHUNK_FLAG_WARMUP = 1 << 2,
  /* The first chunk of a new cache_epoch: per-stream state starts over. */
  PP_CHUNK_FLAG_RESET = 1 << 3,
  /* The sender gave up on this chunk after its head went out: no payloads
   * follow, the receiver fails naming the sender. */
  PP_CHUNK_FLAG_ABORT = 1 << 4,
} PpChunkFlags;
#define PP_CHUNK_KIND_FLAGS (PP_CHUNK_FLAG_SHUTDOWN | PP_CHUNK_FLAG_DATA \
    | PP_CHUNK_FLAG_WARMUP | PP_CHUNK_FLAG_ABORT)
#define PP_CHUNK_FLAGS_KNOWN (PP_CHUNK_KIND_FLAGS | PP_CHUNK_FLAG_RESET)

typedef struct _PpChunk PpChunk;

/* What a chunk that is lent (by a pool) calls when it is freed. */
typedef struct
{
  void (*release) (PpChunk * chunk);
} PpChunkOwner;

struct _PpChunk
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
  /* Where its tensors live (NULL: the host), and who pp_chunk_free gives
   * it back to (NULL: freed).  Set by its owner, a pool (pp-chunk-pool.h):
   * the chunk calls back without knowing what a pool is. */
  struct _PpBackend *backend;
  /* A fence on @backend's stream that a transfer of the payloads on
   * another stream waits for (pp_chunk_mark_ready): behind the work that
   * wrote them, or, for payload tensors just allocated, behind the earlier
   * users of their memory; owned; NULL: none. */
  gpointer ready;
  const PpChunkOwner *owner;
  gpointer owner_data;
  PpChunk *next_free;           /* in its owner's free list */
};

/* What a manifest entry says of a tensor. */
typedef struct
{
  gchar name[PP_TENSOR_NAME_MAX + 1];
  PpDType dtype;
  guint ndim;
  gint64 shape[PP_TENSOR_MAX_DIMS];
  gsize nbytes;
} PpTensorSpec;

/* The spec of @tensor, and whether @tensor is a host tensor of @spec's
 * dtype and shape (its name aside). */
void      pp_tensor_spec_of      (const PpTensor * tensor,
                                  PpTensorSpec * spec);
gboolean  pp_tensor_has_spec     (const PpTensor * tensor,
                                  const PpTensorSpec * spec);
/* The same for a tensor on @backend's device (NULL: the host). */
gboolean  pp_tensor_has_spec_on  (const PpTensor * tensor,
                                  const PpTensorSpec * spec,
                                  struct _PpBackend * backend);

PpChunk  *pp_chunk_new           (void);
/* A deep copy: header fields and tensors (a device tensor copied on its
 * backend); NULL when memory runs out. */
PpChunk  *pp_chunk_copy          (const PpChunk * chunk, GError ** error);
/* Frees @chunk, or gives it back to its owner. */
void      pp_chunk_free          (PpChunk * chunk);
void      pp_chunk_add_tensor    (PpChunk * chunk, PpTensor * tensor);
PpTensor *pp_chunk_get_tensor    (const PpChunk * chunk, const gchar * name);
gsize     pp_chunk_payload_bytes (const PpChunk * chunk);
/* Makes tensor @index of @chunk one of @spec: the one there when its
 * dtype and shape already are (renamed if need be), else a new one; the
 * tensors before @index must exist.  A chunk on a backend (one of a pool
 * made by pp_chunk_pool_new_on) gets its tensors in that backend's memory,
 * and a new one marks the chunk ready (pp_chunk_mark_ready): the memory
 * may be the backend's stream's until the work queued on it so far is
 * done, and a receive into it on another stream waits for that fence.
 * NULL (with @error) when the spec cannot be allocated. */
PpTensor *pp_chunk_fit_tensor    (PpChunk * chunk, guint index,
                                  const PpTensorSpec * spec,
                                  GError ** error);
/* Drops the tensors from @index on. */
void      pp_chunk_truncate      (PpChunk * chunk, guint n_tensors);
/* Device payloads are written by work queued on their backend's stream,
 * and sent from another stream (a data plane's own).  mark_ready, called
 * by the thread that queued the work, records a fence behind all it
 * queued so far (PpBackendMemory.fence; replacing an earlier one; nothing
 * for a chunk on the host or on a backend without fences).  wait_ready
 * makes the work queued later on @stream wait for that fence on the
 * device, and returns FALSE when the chunk has none: the caller then
 * synchronizes the backend, which also waits for whatever was queued
 * after the payloads.  clear_ready lets the fence go (a receive that
 * waited for it has written the payloads since). */
void      pp_chunk_mark_ready    (PpChunk * chunk);
gboolean  pp_chunk_wait_ready    (const PpChunk * chunk, gpointer stream);
void      pp_chunk_clear_ready   (PpChunk * chunk);
/* After a transfer that did not complete, MPI may still read or write the
 * payloads: they are left to it, never freed, and @chunk keeps none. */
void      pp_chunk_abandon_payloads (PpChunk * chunk);

/* Serialises header + meta + manifest.  Fails (before anything is sent)
 * when the head would exceed PP_ENVELOPE_HEAD_MAX, a payload cannot be
 * addressed by one message or the flags are not a valid combination. */
GBytes   *pp_envelope_encode_head (const PpChunk * chunk, GError ** error);
/* TRUE when @flags name at most one kind, only known bits, and RESET only
 * with DATA or WARMUP. */
gboolean  pp_chunk_flags_valid    (guint16 flags);
/* Parses and validates a head; returns a chunk whose tensors are allocated
 * and ready to receive their payloads.  Errors name the field, the
 * expected and the received value. */
PpChunk  *pp_envelope_decode_head (const guint8 * data, gsize len,
                                   GError ** error);

/* What one direction of a chunk stream keeps from head to head, so that a
 * warm head is written and read without allocating: a buffer grown to the
 * largest head so far, and the last manifest written or read, serialised
 * and parsed (a stream's chunks carry the same tensors, chunk after
 * chunk).  One thread at a time. */
typedef struct _PpEnvelopeCodec PpEnvelopeCodec;

PpEnvelopeCodec *pp_envelope_codec_new  (void);
void      pp_envelope_codec_free         (PpEnvelopeCodec * codec);
/* The head buffer, grown to at least @len bytes if need be: its contents
 * are kept only when it need not grow.  Valid until the next call. */
guint8   *pp_envelope_codec_buffer       (PpEnvelopeCodec * codec,
                                          gsize len);
/* MPI may still use the head buffer after a transfer that did not
 * complete: it is left to MPI, never freed; the next head gets another. */
void      pp_envelope_codec_abandon_buffer (PpEnvelopeCodec * codec);
/* pp_envelope_encode_head into the codec's buffer: *@head (@len bytes)
 * stays valid until the codec's next use. */
gboolean  pp_envelope_write_head  (PpEnvelopeCodec * codec,
                                   const PpChunk * chunk,
                                   const guint8 ** head, gsize * len,
                                   GError ** error);
/* pp_envelope_decode_head into @chunk: its header fields are set and its
 * tensors fitted to the manifest (pp_chunk_fit_tensor), ready to receive
 * the payloads.  @data may be the codec's buffer. */
gboolean  pp_envelope_read_head   (PpEnvelopeCodec * codec,
                                   const guint8 * data, gsize len,
                                   PpChunk * chunk, GError ** error);

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
