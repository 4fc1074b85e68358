/* ppdiffuse — heartbeats and error reports, the liveness side of the
 * control plane (tags PP_TAG_HEARTBEAT and PP_TAG_REPORT of the world
 * communicator; never mixed with chunk traffic).
 *
 * Every PP_HEARTBEAT_DIVISOR-th of timeout-ms, rank 0 sends each worker a
 * heartbeat and each worker sends rank 0 one that also says what it is
 * doing: which chunk its compute thread holds and since when, the last
 * chunk it received and sent.  A rank silent for timeout-ms is declared
 * dead by its peer: rank 0 fails the mesh naming it, a worker exits.
 * A worker that fails sends rank 0 a report (its error text) before it
 * exits, so the element's error names the rank and the reason even when
 * the failure shows up first on another rank. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

#define PP_HEARTBEAT_DIVISOR 4
#define PP_HEARTBEAT_MIN_PERIOD_MS 10
/* (rank, compute state, compute chunk, µs in that state, last chunk
 * received, last chunk sent, sequence number) */
#define PP_HEARTBEAT_TYPE "(uuttttt)"
/* (rank, rank to blame, error text): a receiver that got a broken chunk
 * blames its sender, so that rank 0 can lead with the rank at fault. */
#define PP_REPORT_TYPE "(uus)"
#define PP_REPORT_MAX (16 * 1024)
/* A heartbeat is seven numbers: anything larger is not one. */
#define PP_HEARTBEAT_MAX 256
#define PP_HEARTBEAT_NONE G_MAXUINT64

typedef enum
{
  PP_WORK_IDLE,                 /* waiting for a chunk to compute */
  PP_WORK_COMPUTING,
  PP_WORK_DONE,                 /* left its loop after the shutdown marker */
} PpWorkState;

typedef struct
{
  guint32 rank;
  PpWorkState state;
  guint64 chunk_id;             /* of the compute state, or NONE */
  guint64 state_us;             /* how long in that state */
  guint64 received;             /* last chunk received, or NONE */
  guint64 sent;                 /* last chunk sent, or NONE */
  guint64 seq;
} PpHeartbeat;

guint        pp_heartbeat_period_ms (guint timeout_ms);
GBytes      *pp_heartbeat_encode    (const PpHeartbeat * hb);
gboolean     pp_heartbeat_decode    (GBytes * bytes, PpHeartbeat * hb,
                                     GError ** error);
GBytes      *pp_report_encode       (gint rank, gint blamed,
                                     const gchar * text);
/* The report's text, newly allocated; NULL with @error if malformed. */
gchar       *pp_report_decode       (GBytes * bytes, gint * rank,
                                     gint * blamed, GError ** error);
const gchar *pp_work_state_name     (PpWorkState state);
/* "computing chunk 3 for 1200 ms, last received 4, last sent 2" */
gchar       *pp_heartbeat_describe  (const PpHeartbeat * hb,
                                     gint64 age_us);

G_END_DECLS
