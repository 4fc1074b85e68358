/* ppdiffuse — liveness, one module for rank 0 and the workers: heartbeats
 * both ways, the watchdog that declares a silent or stalled peer dead,
 * the error reports a failing worker leaves behind, and the deadlines of
 * waits on chunk traffic.
 *
 * Every PP_HEARTBEAT_DIVISOR-th of timeout-ms each rank sends each of its
 * peers (rank 0: every worker; a worker: rank 0) a heartbeat that says
 * what it is doing: which chunk its compute thread holds and since when,
 * the last chunk it received and sent.  A peer silent for timeout-ms, or
 * computing one chunk for longer than its allowance (the callbacks'
 * @allowance: what that compute is expected to take, pp-allowance.h; else
 * timeout-ms), is declared dead by the watchdog: rank 0 fails the mesh
 * naming it, a worker exits.  Heartbeats
 * and reports travel on tags of their own (PP_TAG_HEARTBEAT,
 * PP_TAG_REPORT), never mixed with chunk traffic.
 *
 * The messages themselves (heartbeats, reports) are in pp-heartbeat.h.
 *
 * This rank's own state (pp_liveness_set_state, _note_received,
 * _note_sent) may be written by any thread; a heartbeat always carries a
 * consistent snapshot of it. */
#pragma once

#include <mpi.h>

#include "pp-heartbeat.h"
#include "pp-protocol.h"

G_BEGIN_DECLS

/* ---- deadlines --------------------------------------------------------- */

/* FALSE when the test-only PP_NO_WATCHDOG_ENV switch is set. */
gboolean     pp_liveness_watchdog_enabled (void);

/* ---- the heartbeat thread ---------------------------------------------- */

typedef struct _PpLiveness PpLiveness;

typedef enum
{
  PP_PEER_SILENT,               /* no heartbeat for timeout-ms */
  PP_PEER_STALLED,              /* computing one chunk past its allowance */
} PpPeerVerdict;

/* What each side does with what the heartbeat thread finds; every member
 * may be NULL.  All run on the heartbeat thread, except that @drain also
 * runs wherever pp_liveness_drain is called. */
typedef struct
{
  /* First thing of every poll (rank 0 takes the workers' reports). */
  void     (*drain)    (gpointer data);
  /* Whether the watchdog is to judge the peers now. */
  gboolean (*watching) (gpointer data);
  /* The watchdog's verdict on peer @index (the first it finds). */
  void     (*dead)     (gpointer data, guint index, PpPeerVerdict verdict,
                        const PpHeartbeat * last, gint64 silent_us);
  /* Taking heartbeats failed (a malformed one, an MPI error). */
  void     (*broken)   (gpointer data, const GError * error);
  /* How long (µs) peer @index may compute the chunk its heartbeat @last
   * names before it is stalled; NULL: timeout-ms. */
  gint64   (*allowance) (gpointer data, guint index,
                        const PpHeartbeat * last);
} PpLivenessCallbacks;

/* Heartbeats between this rank (@rank of @world) and @n_peers peers,
 * @peers[i] their ranks; until a peer's first heartbeat it counts as
 * heard now.  This rank starts idle.  @watchdog FALSE: no verdicts. */
PpLiveness *pp_liveness_new   (MPI_Comm world, gint rank, const gint * peers,
                               guint n_peers, guint timeout_ms,
                               gboolean watchdog,
                               const PpLivenessCallbacks * callbacks,
                               gpointer data);
/* Starts the heartbeat thread. */
void        pp_liveness_start (PpLiveness * lv);
/* Stops and joins it (no-op when not running).  Heartbeats still in
 * flight to a dead peer keep their buffers: they are leaked, never freed
 * under MPI. */
void        pp_liveness_stop  (PpLiveness * lv);
void        pp_liveness_free  (PpLiveness * lv);

/* The clean end of the heartbeats between ranks, after pp_liveness_stop.
 * A message that reaches a rank after it freed the communicator waits in
 * Open MPI for a communicator of the same context id, and a later one
 * (the next mesh's, smaller) takes it: from a rank past its end, Open
 * MPI's matching then crashes (mca_pml_ob1_add_comm).  So a rank ends its
 * heartbeats with a farewell to each peer, an empty message on their tag
 * (pp_liveness_farewell), and the peer frees the communicator only once it
 * has each farewell (pp_liveness_await_farewells): MPI keeps one sender's
 * messages of one tag in order, so every heartbeat before it has been
 * taken.  The worker's hook may send one more heartbeat first (the
 * late-beat fault; pp_liveness_beat_now).  Blocking sends: a rank calls
 * them under its exit watchdog. */
void        pp_liveness_beat_now       (PpLiveness * lv);
void        pp_liveness_farewell       (PpLiveness * lv);
/* Drains until every peer's farewell came (TRUE), or until
 * @deadline_us (g_get_monotonic_time) passes (FALSE: the communicator
 * must stay allocated). */
gboolean    pp_liveness_await_farewells (PpLiveness * lv,
                                       gint64 deadline_us);

/* Takes every heartbeat that has arrived (after @drain); any thread. */
void        pp_liveness_drain (PpLiveness * lv);

/* This rank's state, as its next heartbeat says it. */
void        pp_liveness_set_state     (PpLiveness * lv, PpWorkState state,
                                       guint64 chunk_id);
void        pp_liveness_note_received (PpLiveness * lv, guint64 chunk_id);
void        pp_liveness_note_sent     (PpLiveness * lv, guint64 chunk_id);
/* The cumulative busy time and the pace the next heartbeat carries, one
 * snapshot. */
void        pp_liveness_set_busy      (PpLiveness * lv, guint64 busy_us,
                                       const PpPace * pace);
/* The model's cache builds the next heartbeat carries. */
void        pp_liveness_set_cache_builds (PpLiveness * lv,
                                       guint64 cache_builds);
/* The bytes of the model's per-stream state (pp_model_stream_bytes), for
 * the heartbeats. */
void        pp_liveness_set_stream_bytes (PpLiveness * lv,
                                       guint64 stream_bytes);
/* The frame-steps run in stream-batch passes of two frames or more, for
 * the heartbeats. */
void        pp_liveness_set_batched_steps (PpLiveness * lv,
                                       guint64 batched_steps);
PpWorkState pp_liveness_state         (PpLiveness * lv);

/* Peer @index's last heartbeat and how long ago it came. */
void        pp_liveness_peer          (PpLiveness * lv, guint index,
                                       PpHeartbeat * beat,
                                       gint64 * silent_us);
/* pp_heartbeat_describe of peer @index; "not heard from yet" without
 * @lv. */
gchar      *pp_liveness_describe_peer (PpLiveness * lv, guint index);

G_END_DECLS
