/* ppdiffuse — liveness, shared by rank 0 and the workers: the heartbeat
 * thread and its watchdog (pp-liveness.h). */
#include "pp-liveness.h"
#include "pp-error.h"
#include "pp-proc.h"
#include "pp-recorder.h"
#include "pp-sigpipe.h"
#include "pp-transport.h"

#include <string.h>

/* The heartbeat thread's poll period: arrivals, verdicts, sends. */
#define PP_LIVENESS_POLL_US 5000

gboolean
pp_liveness_watchdog_enabled (void)
{
  return g_strcmp0 (g_getenv (PP_NO_WATCHDOG_ENV), "1") != 0;
}

typedef struct
{
  gint rank;
  gint64 heard_us;              /* when its last heartbeat came */
  PpHeartbeat beat;             /* the last it sent */
  MPI_Request req;              /* our heartbeat to it, in flight */
  guint8 *out;                  /* its buffer, PP_HEARTBEAT_SIZE bytes */
  gboolean farewell;            /* its last message came (under lock) */
} Peer;

struct _PpLiveness
{
  MPI_Comm world;
  gint rank;
  guint timeout_ms;
  gboolean watchdog;
  PpLivenessCallbacks cb;
  gpointer data;
  guint n_peers;
  Peer *peers;
  GThread *thread;
  gint stop;                    /* atomic */
  guint64 seq;                  /* heartbeat thread only */
  /* Where heartbeats are received, by one draining thread at a time. */
  GMutex inbox_lock;
  guint8 *inbox;                /* PP_HEARTBEAT_MAX bytes; left to MPI
                                 * (NULL) after a receive that did not
                                 * complete, which cb.broken was told */

  /* One lock for this rank's state and the peers' heartbeats: a
   * heartbeat reads (state, chunk, since) and the last chunks received
   * and sent as one snapshot. */
  GMutex lock;
  PpWorkState state;
  guint64 state_chunk;
  gint64 state_since_us;
  guint64 last_received;
  guint64 last_sent;
  guint64 busy_us;
  guint64 cache_builds;
  guint64 stream_bytes;
  guint64 batched_steps;
  PpPace pace;
};

PpLiveness *
pp_liveness_new (MPI_Comm world, gint rank, const gint * peers,
    guint n_peers, guint timeout_ms, gboolean watchdog,
    const PpLivenessCallbacks * callbacks, gpointer data)
{
  PpLiveness *lv = g_new0 (PpLiveness, 1);
  const gint64 now = g_get_monotonic_time ();

  lv->world = world;
  lv->rank = rank;
  lv->timeout_ms = timeout_ms;
  lv->watchdog = watchdog;
  if (callbacks != NULL)
    lv->cb = *callbacks;
  lv->data = data;
  lv->n_peers = n_peers;
  lv->peers = g_new0 (Peer, n_peers);
  for (guint i = 0; i < n_peers; i++) {
    Peer *p = &lv->peers[i];

    p->rank = peers[i];
    p->heard_us = now;
    p->beat.rank = (guint32) peers[i];
    p->beat.state = PP_WORK_IDLE;
    p->beat.chunk_id = p->beat.received = p->beat.sent = PP_HEARTBEAT_NONE;
    p->req = MPI_REQUEST_NULL;
    p->out = g_malloc (PP_HEARTBEAT_SIZE);
  }
  g_mutex_init (&lv->lock);
  g_mutex_init (&lv->inbox_lock);
  lv->inbox = g_malloc (PP_HEARTBEAT_MAX);
  lv->state = PP_WORK_IDLE;
  lv->state_chunk = lv->last_received = lv->last_sent = PP_HEARTBEAT_NONE;
  lv->state_since_us = now;
  return lv;
}

void
pp_liveness_set_state (PpLiveness * lv, PpWorkState state, guint64 chunk_id)
{
  g_mutex_lock (&lv->lock);
  lv->state = state;
  lv->state_chunk = chunk_id;
  lv->state_since_us = g_get_monotonic_time ();
  g_mutex_unlock (&lv->lock);
}

void
pp_liveness_note_received (PpLiveness * lv, guint64 chunk_id)
{
  g_mutex_lock (&lv->lock);
  lv->last_received = chunk_id;
  g_mutex_unlock (&lv->lock);
}

void
pp_liveness_note_sent (PpLiveness * lv, guint64 chunk_id)
{
  g_mutex_lock (&lv->lock);
  lv->last_sent = chunk_id;
  g_mutex_unlock (&lv->lock);
}

void
pp_liveness_set_busy (PpLiveness * lv, guint64 busy_us, const PpPace * pace)
{
  g_mutex_lock (&lv->lock);
  lv->busy_us = busy_us;
  lv->pace = *pace;
  g_mutex_unlock (&lv->lock);
}

void
pp_liveness_set_cache_builds (PpLiveness * lv, guint64 cache_builds)
{
  g_mutex_lock (&lv->lock);
  lv->cache_builds = cache_builds;
  g_mutex_unlock (&lv->lock);
}

void
pp_liveness_set_stream_bytes (PpLiveness * lv, guint64 stream_bytes)
{
  g_mutex_lock (&lv->lock);
  lv->stream_bytes = stream_bytes;
  g_mutex_unlock (&lv->lock);
}

void
pp_liveness_set_batched_steps (PpLiveness * lv, guint64 batched_steps)
{
  g_mutex_lock (&lv->lock);
  lv->batched_steps = batched_steps;
  g_mutex_unlock (&lv->lock);
}

PpWorkState
pp_liveness_state (PpLiveness * lv)
{
  PpWorkState state;

  g_mutex_lock (&lv->lock);
  state = lv->state;
  g_mutex_unlock (&lv->lock);
  return state;
}

/* This rank's heartbeat, one snapshot of its state. */
static PpHeartbeat
own_beat (PpLiveness * lv, gint64 now)
{
  PpHeartbeat hb;

  g_mutex_lock (&lv->lock);
  hb.rank = (guint32) lv->rank;
  hb.state = lv->state;
  hb.chunk_id = lv->state_chunk;
  hb.state_us = (guint64) (now - lv->state_since_us);
  hb.received = lv->last_received;
  hb.sent = lv->last_sent;
  hb.busy_us = lv->busy_us;
  hb.cache_builds = lv->cache_builds;
  hb.stream_bytes = lv->stream_bytes;
  hb.batched_steps = lv->batched_steps;
  hb.pace = lv->pace;
  g_mutex_unlock (&lv->lock);
  hb.cpu_us = pp_proc_cpu_us ();
  hb.seq = lv->seq++;
  return hb;
}

static gint
peer_index (PpLiveness * lv, gint rank)
{
  for (guint i = 0; i < lv->n_peers; i++)
    if (lv->peers[i].rank == rank)
      return (gint) i;
  return -1;
}

void
pp_liveness_drain (PpLiveness * lv)
{
  GError *error = NULL;
  gint source;
  gsize len;

  if (lv->cb.drain != NULL)
    lv->cb.drain (lv->data);
  g_mutex_lock (&lv->inbox_lock);
  while (lv->inbox != NULL
      && pp_transport_try_recv_into (lv->world, PP_TAG_HEARTBEAT, &lv->inbox,
          PP_HEARTBEAT_MAX, &len, &source, &error)) {
    const gint i = peer_index (lv, source);
    PpHeartbeat hb;

    if (i >= 0 && len == 0) {
      /* A farewell: nothing more comes from it (pp_liveness_farewell). */
      g_mutex_lock (&lv->lock);
      lv->peers[i].farewell = TRUE;
      g_mutex_unlock (&lv->lock);
    } else if (i >= 0 && pp_heartbeat_read (lv->inbox, len, &hb, &error)) {
      g_mutex_lock (&lv->lock);
      lv->peers[i].beat = hb;
      lv->peers[i].heard_us = g_get_monotonic_time ();
      g_mutex_unlock (&lv->lock);
    }
    if (error != NULL)
      break;
  }
  g_mutex_unlock (&lv->inbox_lock);
  if (error != NULL) {
    if (lv->cb.broken != NULL)
      lv->cb.broken (lv->data, error);
    g_error_free (error);
  }
}

void
pp_liveness_peer (PpLiveness * lv, guint index, PpHeartbeat * beat,
    gint64 * silent_us)
{
  const gint64 now = g_get_monotonic_time ();

  g_mutex_lock (&lv->lock);
  *beat = lv->peers[index].beat;
  *silent_us = now - lv->peers[index].heard_us;
  g_mutex_unlock (&lv->lock);
}

gchar *
pp_liveness_describe_peer (PpLiveness * lv, guint index)
{
  PpHeartbeat beat;
  gint64 silent_us;

  if (lv == NULL)
    return g_strdup ("not heard from yet");
  pp_liveness_peer (lv, index, &beat, &silent_us);
  return pp_heartbeat_describe (&beat, silent_us);
}

/* The watchdog: the first peer silent for timeout-ms, or computing one
 * chunk for longer than its allowance, is dead. */
static void
judge_peers (PpLiveness * lv)
{
  const gint64 limit = (gint64) lv->timeout_ms * 1000;

  for (guint i = 0; i < lv->n_peers; i++) {
    PpHeartbeat hb;
    gint64 silent_us;
    gboolean farewell;

    pp_liveness_peer (lv, i, &hb, &silent_us);
    g_mutex_lock (&lv->lock);
    farewell = lv->peers[i].farewell;
    g_mutex_unlock (&lv->lock);
    if (farewell)
      continue;                 /* it ended its heartbeats cleanly */
    if (silent_us > limit) {
      pp_recorder_note (PP_REC_HEARTBEAT, hb.chunk_id, lv->peers[i].rank, 0,
          PP_REC_FAILED);
      lv->cb.dead (lv->data, i, PP_PEER_SILENT, &hb, silent_us);
      return;
    }
    if (hb.state == PP_WORK_COMPUTING && (gint64) hb.state_us > limit
        && (lv->cb.allowance == NULL
            || (gint64) hb.state_us > lv->cb.allowance (lv->data, i, &hb))) {
      lv->cb.dead (lv->data, i, PP_PEER_STALLED, &hb, silent_us);
      return;
    }
  }
}

/* Sends each peer this rank's heartbeat, unless the last one to it is
 * still in flight. */
static void
send_beats (PpLiveness * lv, gint64 now)
{
  for (guint i = 0; i < lv->n_peers; i++) {
    Peer *p = &lv->peers[i];
    int done = p->req == MPI_REQUEST_NULL;
    PpHeartbeat hb;

    if (!done)
      MPI_Test (&p->req, &done, MPI_STATUS_IGNORE);
    if (!done)
      continue;
    hb = own_beat (lv, now);
    pp_heartbeat_write (&hb, p->out);
    MPI_Isend (p->out, PP_HEARTBEAT_SIZE, MPI_BYTE, p->rank,
        PP_TAG_HEARTBEAT, lv->world, &p->req);
  }
}

static gpointer
liveness_thread (gpointer data)
{
  PpLiveness *lv = data;
  const gint64 period = (gint64) pp_heartbeat_period_ms (lv->timeout_ms)
      * 1000;
  gint64 next_beat = 0;

  while (!g_atomic_int_get (&lv->stop)) {
    const gint64 now = g_get_monotonic_time ();

    pp_liveness_drain (lv);
    if (lv->watchdog && lv->cb.dead != NULL
        && (lv->cb.watching == NULL || lv->cb.watching (lv->data)))
      judge_peers (lv);
    if (now >= next_beat) {
      send_beats (lv, now);
      next_beat = now + period;
    }
    g_usleep (MIN (period, PP_LIVENESS_POLL_US));
  }
  return NULL;
}

void
pp_liveness_start (PpLiveness * lv)
{
  g_return_if_fail (lv->thread == NULL);
  lv->thread = pp_thread_new ("pp-heartbeat", liveness_thread, lv);
}

void
pp_liveness_stop (PpLiveness * lv)
{
  if (lv == NULL || lv->thread == NULL)
    return;
  g_atomic_int_set (&lv->stop, 1);
  g_thread_join (lv->thread);
  lv->thread = NULL;
  for (guint i = 0; i < lv->n_peers; i++) {
    Peer *p = &lv->peers[i];
    int done = p->req == MPI_REQUEST_NULL;

    if (!done)
      MPI_Test (&p->req, &done, MPI_STATUS_IGNORE);
    if (done)
      g_clear_pointer (&p->out, g_free);
    else
      p->out = NULL;            /* MPI may still read it: leaked */
  }
}

void
pp_liveness_beat_now (PpLiveness * lv)
{
  guint8 out[PP_HEARTBEAT_SIZE];

  for (guint i = 0; i < lv->n_peers; i++) {
    const PpHeartbeat hb = own_beat (lv, g_get_monotonic_time ());

    pp_heartbeat_write (&hb, out);
    MPI_Send (out, PP_HEARTBEAT_SIZE, MPI_BYTE, lv->peers[i].rank,
        PP_TAG_HEARTBEAT, lv->world);
  }
}

void
pp_liveness_farewell (PpLiveness * lv)
{
  g_return_if_fail (lv->thread == NULL);

  for (guint i = 0; i < lv->n_peers; i++)
    MPI_Send (NULL, 0, MPI_BYTE, lv->peers[i].rank, PP_TAG_HEARTBEAT,
        lv->world);
}

/* Whether every peer's farewell came. */
static gboolean
all_farewells (PpLiveness * lv)
{
  gboolean all = TRUE;

  g_mutex_lock (&lv->lock);
  for (guint i = 0; i < lv->n_peers; i++)
    all &= lv->peers[i].farewell;
  g_mutex_unlock (&lv->lock);
  return all;
}

gboolean
pp_liveness_await_farewells (PpLiveness * lv, gint64 deadline_us)
{
  g_return_val_if_fail (lv->thread == NULL, FALSE);

  for (;;) {
    pp_liveness_drain (lv);
    if (all_farewells (lv))
      return TRUE;
    if (g_get_monotonic_time () >= deadline_us)
      return FALSE;
    g_usleep (PP_LIVENESS_POLL_US);
  }
}

void
pp_liveness_free (PpLiveness * lv)
{
  if (lv == NULL)
    return;
  pp_liveness_stop (lv);
  for (guint i = 0; i < lv->n_peers; i++)
    if (lv->peers[i].req == MPI_REQUEST_NULL)
      g_clear_pointer (&lv->peers[i].out, g_free);
  g_free (lv->peers);
  g_free (lv->inbox);
  g_mutex_clear (&lv->inbox_lock);
  g_mutex_clear (&lv->lock);
  g_free (lv);
}
