/* ppdiffuse — the liveness messages: the heartbeat every rank sends its
 * peers, and the report a failing worker leaves rank 0.  Their formats
 * only: the heartbeat thread and its watchdog are liveness/pp-liveness.h.
 * The handshake writes heartbeats too, while a worker loads its model. */
#pragma once

#include "pp-protocol.h"

G_BEGIN_DECLS

/* (rank, compute state, compute chunk, µs in that state, last chunk
 * received, last chunk sent, sequence number, µs spent computing stream
 * chunks so far, the model's cache builds so far, the bytes of its
 * per-stream state, frame-steps batched, the pace: µs, chunks and
 * work, PpPace, and the process's CPU time in µs); the busy time and
 * cache builds since PP_PROTOCOL_VERSION 5, the state's bytes since 8,
 * the pace since 10, the CPU time since 11. */
#define PP_HEARTBEAT_TYPE "(uuttttttttttttt)"
/* Its serialisation: a fixed-size tuple, as GVariant writes one (the
 * members in native byte order at their natural alignment: u at 0 and 4,
 * t at 8, 16, …, 104). */
#define PP_HEARTBEAT_SIZE 112
/* (rank, rank to blame, error text): a receiver that got a broken chunk
 * blames its sender, so that rank 0 can lead with the rank at fault. */
#define PP_REPORT_TYPE "(uus)"
#define PP_HEARTBEAT_NONE G_MAXUINT64

typedef enum
{
  PP_WORK_IDLE,                 /* waiting for a chunk to compute */
  PP_WORK_COMPUTING,
  PP_WORK_DONE,                 /* left its loop after the shutdown marker */
} PpWorkState;

/* A worker's measure of its own work since the work last changed size (a
 * chunk's sample of another shape than the one before: a caps change):
 * its compute time, and how many of its computes finished stream chunks.
 * A pass that finishes a batch of them (frame-batch) counts once: each of
 * them waited for the whole pass, so a chunk is expected to take @us /
 * @passes, not its share of the pass.  @work counts the sizes, the first
 * chunk's included; every stage sees the same chunks in the same order,
 * and so does rank 0 as it sends them, so two measures of the same @work
 * are of the same frames' size. */
typedef struct
{
  guint64 us;                   /* computing stream chunks (warm-up
                                 * passes left out) */
  guint64 passes;               /* computes that finished stream chunks */
  guint64 work;                 /* which size: 1 from the first chunk on */
} PpPace;

typedef struct
{
  guint32 rank;
  PpWorkState state;
  guint64 chunk_id;             /* of the compute state, or NONE */
  guint64 state_us;             /* how long in that state */
  guint64 received;             /* last chunk received, or NONE */
  guint64 sent;                 /* last chunk sent, or NONE */
  guint64 seq;
  guint64 busy_us;              /* cumulative, computing stream chunks
                                 * (warm-up passes left out); 0 from rank 0 */
  guint64 cache_builds;         /* pp_model_cache_builds; 0 from rank 0 */
  guint64 stream_bytes;         /* pp_model_stream_bytes; 0 from rank 0 */
  guint64 batched_steps;        /* frame-steps run in stream-batch passes
                                 * of two frames or more; 0 from rank 0 */
  PpPace pace;                  /* zeros from rank 0 */
  guint64 cpu_us;               /* the sender's process, user and system,
                                 * all its threads, since it started */
} PpHeartbeat;

guint        pp_heartbeat_period_ms (guint timeout_ms);
/* Written and read by hand, without a GVariant: a heartbeat costs no
 * allocation. */
void         pp_heartbeat_write     (const PpHeartbeat * hb,
                                     guint8 out[PP_HEARTBEAT_SIZE]);
gboolean     pp_heartbeat_read      (const guint8 * data, gsize len,
                                     PpHeartbeat * hb, GError ** error);
GBytes      *pp_report_encode       (gint rank, gint blamed,
                                     const gchar * text);
/* The report's text, newly allocated; NULL with @error if malformed. */
gchar       *pp_report_decode       (GBytes * bytes, gint * rank,
                                     gint * blamed, GError ** error);
const gchar *pp_work_state_name     (PpWorkState state);
/* "computing chunk 3 for 1200 ms, last chunk received 4, sent 2; last
 * heartbeat 120 ms ago" */
gchar       *pp_heartbeat_describe  (const PpHeartbeat * hb,
                                     gint64 age_us);

G_END_DECLS
