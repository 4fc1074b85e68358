/* ppdiffuse — MPI point-to-point under deadlines. */
#include "pp-transport.h"
#include "pp-bells.h"
#include "pp-chunk-pool.h"
#include "pp-error.h"
#include "pp-data-plane.h"
#include "pp-lanes.h"
#include "pp-log.h"
#include "pp-queue.h"
#include "pp-recorder.h"

#include <string.h>

/* A message already matched by a probe is received within this. */
#define PP_TRY_RECV_TIMEOUT_MS 1000

/* A message of @tag to w->peer, sent synchronously (done once the peer
 * took it) with @taken. */
static gboolean
send_bytes (const PpWait * w, gint tag, GBytes * bytes, gboolean taken,
    const gchar * what, GError ** error)
{
  gsize len;
  gconstpointer data = g_bytes_get_data (bytes, &len);
  MPI_Request req;

  if (len > G_MAXINT) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "%s: %" G_GSIZE_FORMAT " bytes do not fit one message", what, len);
    return FALSE;
  }
  if (!pp_mpi_check ((taken ? MPI_Issend : MPI_Isend) (data, (int) len,
              MPI_BYTE, w->peer, tag, w->comm, &req), what, error))
    return FALSE;
  if (!pp_wait_requests (w, &req, 1, NULL, what, error)) {
    g_bytes_ref (bytes);        /* MPI may still read it */
    return FALSE;
  }
  return TRUE;
}

gboolean
pp_transport_send_bytes (const PpWait * w, gint tag, GBytes * bytes,
    const gchar * what, GError ** error)
{
  return send_bytes (w, tag, bytes, FALSE, what, error);
}

gboolean
pp_transport_send_bytes_taken (const PpWait * w, gint tag, GBytes * bytes,
    const gchar * what, GError ** error)
{
  return send_bytes (w, tag, bytes, TRUE, what, error);
}

/* Waits for a message of @tag from w->peer and matches it (*@msg, of
 * *@count bytes, at most @max_len). */
static gboolean
probe_message (const PpWait * w, gint tag, gsize max_len, const gchar * what,
    MPI_Message * msg, int *count, GError ** error)
{
  PpPoll poll;
  MPI_Status status;
  int found = 0;

  pp_poll_start_on (&poll, w);
  for (;;) {
    if (!pp_mpi_check (MPI_Improbe (w->peer, tag, w->comm, &found, msg,
                &status), what, error))
      return FALSE;
    if (found)
      break;
    if (pp_wait_expired (w, &poll, what, error))
      return FALSE;
    pp_poll_sleep (&poll);
  }
  MPI_Get_count (&status, MPI_BYTE, count);
  if (*count < 0 || (gsize) * count > max_len) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "%s (peer rank %d): message of %d bytes, at most %" G_GSIZE_FORMAT
        " allowed", what, w->peer, *count, max_len);
    return FALSE;
  }
  return TRUE;
}

/* Receives the matched @msg into @buf.  FALSE: MPI may still write @buf. */
static gboolean
receive_matched (const PpWait * w, MPI_Message * msg, gpointer buf, int count,
    const gchar * what, GError ** error)
{
  MPI_Request req;

  return pp_mpi_check (MPI_Imrecv (buf, count, MPI_BYTE, msg, &req), what,
      error) && pp_wait_requests (w, &req, 1, NULL, what, error);
}

GBytes *
pp_transport_recv_bytes (const PpWait * w, gint tag, gsize max_len,
    const gchar * what, GError ** error)
{
  MPI_Message msg;
  int count = 0;
  guint8 *buf;

  if (!probe_message (w, tag, max_len, what, &msg, &count, error))
    return NULL;
  buf = g_malloc (MAX (count, 1));
  if (!receive_matched (w, &msg, buf, count, what, error))
    return NULL;                /* buf leaked: MPI may own it */
  return g_bytes_new_take (buf, count);
}

/* A message of @tag from any rank if one has arrived: matched (*@msg, of
 * *@count bytes, at most @max_len).  FALSE without error when none has. */
static gboolean
try_probe (MPI_Comm comm, gint tag, gsize max_len, MPI_Message * msg,
    int *count, gint * source, GError ** error)
{
  MPI_Status status;
  int found = 0;

  if (!pp_mpi_check (MPI_Improbe (MPI_ANY_SOURCE, tag, comm, &found, msg,
              &status), "probe", error) || !found)
    return FALSE;
  MPI_Get_count (&status, MPI_BYTE, count);
  *source = status.MPI_SOURCE;
  if (*count < 0 || (gsize) * count > max_len) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "message of %d bytes with tag %d from rank %d, at most %"
        G_GSIZE_FORMAT " allowed", *count, tag, status.MPI_SOURCE, max_len);
    return FALSE;               /* the caller fails the mesh */
  }
  return TRUE;
}

/* The message has arrived, but a large one may still be on its way in: a
 * bounded wait, like every other.  FALSE: MPI may still write @buf. */
static gboolean
receive_arrived (MPI_Comm comm, gint source, MPI_Message * msg, gpointer buf,
    int count, GError ** error)
{
  PpWait w = { comm, source, pp_deadline_in_ms (PP_TRY_RECV_TIMEOUT_MS),
    NULL, NULL
  };

  return receive_matched (&w, msg, buf, count, "receive", error);
}

GBytes *
pp_transport_try_recv_bytes (MPI_Comm comm, gint tag, gsize max_len,
    gint * source, GError ** error)
{
  MPI_Message msg;
  int count = 0;
  guint8 *buf;

  if (!try_probe (comm, tag, max_len, &msg, &count, source, error))
    return NULL;
  buf = g_malloc (MAX (count, 1));
  if (!receive_arrived (comm, *source, &msg, buf, count, error))
    return NULL;                /* buf leaked: MPI may still write it */
  return g_bytes_new_take (buf, count);
}

gboolean
pp_transport_try_recv_into (MPI_Comm comm, gint tag, guint8 ** buf,
    gsize size, gsize * len, gint * source, GError ** error)
{
  MPI_Message msg;
  int count = 0;

  if (!try_probe (comm, tag, size, &msg, &count, source, error))
    return FALSE;
  if (!receive_arrived (comm, *source, &msg, *buf, count, error)) {
    *buf = NULL;                /* left to MPI */
    return FALSE;
  }
  *len = (gsize) count;
  return TRUE;
}

struct _PpChunkLink
{
  GMutex lock;                  /* one transfer at a time */
  PpEnvelopeCodec *codec;
  PpChunkPool *pool;            /* what chunks are received into */
  PpDataPlane *plane;        /* borrowed */
  /* The lane its chunks travel on (pp-lanes.h), decided at its first
   * transfer; NULL: heads over MPI, payloads on the plane. */
  gboolean lane_known;
  PpLane *lane;
  PpBells *bells;               /* with the lane: the communicator's */
  guint own;                    /* with the lane: this rank */
  gint peer;                    /* with the lane: the other end */
  gboolean sending;             /* with the lane: to the peer */
  guint64 lane_chunks;          /* chunks that went on the lane */
  guint64 plane_payloads;       /* of those, whose payloads did not fit */
  gboolean reported;            /* pp_chunk_link_report logged them */
};

PpChunkLink *
pp_chunk_link_new (guint reserve)
{
  return pp_chunk_link_new_on (reserve, NULL);
}

PpChunkLink *
pp_chunk_link_new_on (guint reserve, struct _PpBackend * backend)
{
  PpChunkLink *link = g_new0 (PpChunkLink, 1);

  g_mutex_init (&link->lock);
  link->codec = pp_envelope_codec_new ();
  link->pool = pp_chunk_pool_new_on (reserve, backend);
  link->plane = pp_data_plane_mpi ();
  return link;
}

void
pp_chunk_link_report (PpChunkLink * link)
{
  if (link == NULL || link->reported)
    return;
  link->reported = TRUE;
  if (link->lane != NULL)
    PP_INFO ("chunks %s rank %d: %" G_GUINT64_FORMAT " on the lane, %"
        G_GUINT64_FORMAT " of them with payloads over MPI (larger than a "
        "slot)", link->sending ? "to" : "from", link->peer,
        link->lane_chunks, link->plane_payloads);
}

void
pp_chunk_link_free (PpChunkLink * link)
{
  if (link == NULL)
    return;
  pp_chunk_link_report (link);
  pp_envelope_codec_free (link->codec);
  pp_chunk_pool_unref (link->pool);
  g_mutex_clear (&link->lock);
  g_free (link);
}

guint
pp_chunk_link_pool_size (PpChunkLink * link)
{
  return pp_chunk_pool_size (link->pool);
}

void
pp_chunk_link_set_data_plane (PpChunkLink * link, PpDataPlane * plane)
{
  g_mutex_lock (&link->lock);
  link->plane = plane;
  g_mutex_unlock (&link->lock);
}

static gboolean
lanes_open (gpointer lanes)
{
  return pp_lanes_is_open (lanes);
}

/* Decides, once, whether @link's chunks travel on a lane: when w->comm
 * has lanes (rank 0's host), @link's payloads go on MPI, and the lane
 * between this rank and w->peer (@sending: to it) carries chunks.  That
 * is known once rank 0 opened the lanes: a worker's first receive can
 * start before every worker has joined, and waits for it.  Called with
 * the link's lock held. */
static gboolean
decide_lane (const PpWait * w, PpChunkLink * link, gboolean sending,
    GError ** error)
{
  PpBells *bells;
  PpLanes *lanes;
  int own = -1;

  if (link->lane_known)
    return TRUE;
  bells = pp_bells_of (w->comm);
  lanes = pp_bells_lanes (bells);
  if (lanes != NULL && link->plane == pp_data_plane_mpi ()
      && MPI_Comm_rank (w->comm, &own) == MPI_SUCCESS && own >= 0
      && w->peer >= 0) {
    if (!pp_lanes_is_open (lanes) && !pp_wait_bell (w, bells, (guint) own,
            lanes_open, lanes, "waiting for rank 0 to open the chunk lanes",
            error))
      return FALSE;
    link->lane = sending ? pp_lanes_between (lanes, (guint) own,
        (guint) w->peer) : pp_lanes_between (lanes, (guint) w->peer,
        (guint) own);
    link->bells = bells;
    link->own = (guint) own;
    link->peer = w->peer;
    link->sending = sending;
  }
  link->lane_known = TRUE;
  PP_INFO ("chunks %s rank %d travel %s", sending ? "to" : "from", w->peer,
      link->lane != NULL ? "on a lane in shared memory" : "over MPI");
  return TRUE;
}

static gboolean
lane_writable (gpointer lane)
{
  return pp_lane_writable (lane);
}

static gboolean
lane_readable (gpointer lane)
{
  return pp_lane_readable (lane);
}

/* send_chunk on the link's lane: the head, and the payloads when they fit
 * the slot, copied into it; else the payloads follow on the plane.  Takes
 * @chunk.  Called with the link's lock held. */
static gboolean
send_on_lane (const PpWait * w, PpChunkLink * link, PpChunk * chunk,
    const guint8 * head, gsize head_len, PpSendDefect defect,
    GError ** error)
{
  PpDataPlaneResult sent = PP_DATA_PLANE_DONE;
  gchar what[96];
  gboolean here;
  guint64 event;

  g_snprintf (what, sizeof what, "send of chunk %" G_GUINT64_FORMAT
      " (waiting for a free slot of the lane)", chunk->chunk_id);
  event = pp_recorder_begin (PP_REC_SEND, chunk->chunk_id, w->peer,
      head_len + pp_chunk_payload_bytes (chunk));
  if (!pp_wait_bell (w, link->bells, link->own, lane_writable, link->lane,
          what, error)) {
    pp_recorder_end (event, PP_REC_FAILED);
    pp_chunk_free (chunk);
    return FALSE;
  }
  here = pp_lane_fill (link->lane, head, head_len, chunk,
      defect == PP_SEND_BAD_SPEC);
  pp_lane_publish (link->lane);
  pp_wait_ring_peer (w);
  link->lane_chunks++;
  link->plane_payloads += !here;
  if (!here)
    sent = pp_data_plane_send (link->plane, w, chunk, defect, error);
  pp_recorder_end (event, sent == PP_DATA_PLANE_DONE ? PP_REC_DONE
      : PP_REC_FAILED);
  if (sent == PP_DATA_PLANE_ABANDONED)
    pp_chunk_abandon_payloads (chunk);
  if (sent == PP_DATA_PLANE_DONE)
    PP_DEBUG ("sent chunk %" G_GUINT64_FORMAT " to rank %d: %" G_GSIZE_FORMAT
        " + %" G_GSIZE_FORMAT " bytes (lane)", chunk->chunk_id, w->peer,
        head_len, pp_chunk_payload_bytes (chunk));
  pp_chunk_free (chunk);
  return sent == PP_DATA_PLANE_DONE;
}

gboolean
pp_transport_send_chunk (const PpWait * w, PpChunkLink * link,
    PpChunk * chunk, GError ** error)
{
  return pp_transport_send_chunk_as (w, link, chunk, PP_SEND_INTACT, error);
}

/* Called with the link's lock held. */
static gboolean
send_chunk (const PpWait * w, PpChunkLink * link, PpChunk * chunk,
    PpSendDefect defect, GError ** error)
{
  PpDataPlaneResult sent;
  MPI_Request head_req;
  const guint8 *head;
  gsize head_len;
  gchar what[96];
  guint64 event;

  if (!pp_envelope_write_head (link->codec, chunk, &head, &head_len, error)
      || !pp_data_plane_preflight (link->plane, w, chunk, error)
      || !decide_lane (w, link, TRUE, error)) {
    pp_chunk_free (chunk);
    return FALSE;               /* preflight failed: nothing was sent */
  }
  if (defect == PP_SEND_BAD_VERSION)
    ((guint8 *) head)[4] = PP_ENVELOPE_MAJOR + 1;
  if (link->lane != NULL)
    return send_on_lane (w, link, chunk, head, head_len, defect, error);
  g_snprintf (what, sizeof what, "send of chunk %" G_GUINT64_FORMAT,
      chunk->chunk_id);
  event = pp_recorder_begin (PP_REC_SEND, chunk->chunk_id, w->peer,
      head_len + pp_chunk_payload_bytes (chunk));
  if (!pp_mpi_check (MPI_Isend (head, (int) head_len, MPI_BYTE, w->peer,
              PP_TAG_HEAD, w->comm, &head_req), what, error)) {
    sent = PP_DATA_PLANE_ABANDONED;
    goto failed;
  }
  /* The receiver, on this host, may be asleep on its bell. */
  pp_wait_ring_peer (w);
  /* Once the head is out its payloads follow (the receiver is waiting for
   * them); the head's send is waited for after theirs, under the same
   * deadline. */
  sent = pp_data_plane_send (link->plane, w, chunk, defect, error);
  if (sent != PP_DATA_PLANE_DONE)
    goto failed;
  if (!pp_wait_requests (w, &head_req, 1, NULL, what, error))
    goto failed;
  pp_recorder_end (event, PP_REC_DONE);
  PP_DEBUG ("sent chunk %" G_GUINT64_FORMAT " to rank %d: %" G_GSIZE_FORMAT
      " + %" G_GSIZE_FORMAT " bytes (%s)", chunk->chunk_id, w->peer, head_len,
      pp_chunk_payload_bytes (chunk), pp_data_plane_name (link->plane));
  pp_chunk_free (chunk);
  return TRUE;

failed:
  pp_recorder_end (event, PP_REC_FAILED);
  /* A pending send may still read the head buffer, and the payloads when
   * the plane left transfers posted: leave them to MPI (or NCCL). */
  pp_envelope_codec_abandon_buffer (link->codec);
  if (sent == PP_DATA_PLANE_ABANDONED)
    pp_chunk_abandon_payloads (chunk);
  pp_chunk_free (chunk);
  return FALSE;
}

gboolean
pp_transport_send_chunk_as (const PpWait * w, PpChunkLink * link,
    PpChunk * chunk, PpSendDefect defect, GError ** error)
{
  gboolean ok;

  g_mutex_lock (&link->lock);
  ok = send_chunk (w, link, chunk, defect, error);
  g_mutex_unlock (&link->lock);
  return ok;
}

/* Reads the head @head (@len bytes) from w->peer into @chunk; FALSE (with
 * @error) for a head that is not one or that aborts its chunk. */
static gboolean
read_head (const PpWait * w, PpChunkLink * link, const guint8 * head,
    gsize len, PpChunk * chunk, GError ** error)
{
  if (!pp_envelope_read_head (link->codec, head, len, chunk, error)) {
    g_prefix_error (error, "from rank %d: ", w->peer);
    pp_recorder_note (PP_REC_RECV, PP_RECORDER_NO_CHUNK, w->peer, len,
        PP_REC_FAILED);
    return FALSE;
  }
  if (chunk->flags & PP_CHUNK_FLAG_ABORT) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "chunk %" G_GUINT64_FORMAT " was aborted by its sender, rank %d",
        chunk->chunk_id, w->peer);
    pp_recorder_note (PP_REC_RECV, chunk->chunk_id, w->peer, len,
        PP_REC_FAILED);
    return FALSE;
  }
  return TRUE;
}

/* The payloads of @chunk from its lane slot, each held to its manifest. */
static gboolean
copy_payloads (const PpWait * w, PpChunk * chunk, const PpLaneSlot * slot,
    GError ** error)
{
  if (slot->n_payloads != chunk->tensors->len) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL, "chunk %"
        G_GUINT64_FORMAT " from rank %d: the manifest lists %u payloads, "
        "its lane slot holds %u", chunk->chunk_id, w->peer,
        chunk->tensors->len, slot->n_payloads);
    return FALSE;
  }
  for (guint i = 0; i < slot->n_payloads; i++) {
    PpTensor *t = g_ptr_array_index (chunk->tensors, i);

    if (slot->payload_len[i] != t->nbytes) {
      g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
          "payload '%s' of chunk %" G_GUINT64_FORMAT " from rank %d: the "
          "manifest says %" G_GSIZE_FORMAT " bytes, %" G_GSIZE_FORMAT
          " arrived", t->name, chunk->chunk_id, w->peer, t->nbytes,
          slot->payload_len[i]);
      return FALSE;
    }
    memcpy (t->data, slot->payload[i], t->nbytes);
  }
  return TRUE;
}

/* Ends the receive of @chunk's payloads (recorder @event): the chunk, or
 * NULL when they did not all come (their buffers left to the plane when
 * transfers may still write them). */
static PpChunk *
payloads_received (PpChunk * chunk, PpDataPlaneResult received,
    guint64 event)
{
  pp_recorder_end (event, received == PP_DATA_PLANE_DONE ? PP_REC_DONE
      : PP_REC_FAILED);
  if (received == PP_DATA_PLANE_DONE)
    return chunk;
  /* Posted receives may still write into the payload buffers. */
  if (received == PP_DATA_PLANE_ABANDONED)
    pp_chunk_abandon_payloads (chunk);
  pp_chunk_free (chunk);
  return NULL;
}

/* recv_chunk on the link's lane.  Called with the link's lock held. */
static PpChunk *
recv_on_lane (const PpWait * w, PpChunkLink * link, guint payload_timeout_ms,
    GError ** error)
{
  PpWait payload_wait = *w;
  PpDataPlaneResult received = PP_DATA_PLANE_FAILED;
  PpLaneSlot slot;
  PpChunk *chunk;
  guint64 event;

  if (!pp_wait_bell (w, link->bells, link->own, lane_readable, link->lane,
          "receive of a chunk head (on the lane)", error))
    return NULL;
  chunk = pp_chunk_pool_acquire (link->pool);
  if (!pp_lane_peek (link->lane, &slot, error)
      || !read_head (w, link, slot.head, slot.head_len, chunk, error)) {
    pp_lane_release (link->lane);
    pp_wait_ring_peer (w);
    pp_chunk_free (chunk);
    return NULL;
  }
  event = pp_recorder_begin (PP_REC_RECV, chunk->chunk_id, w->peer,
      slot.head_len + pp_chunk_payload_bytes (chunk));
  link->lane_chunks++;
  link->plane_payloads += !slot.payloads_here;
  if (slot.payloads_here && copy_payloads (w, chunk, &slot, error))
    received = PP_DATA_PLANE_DONE;
  /* The slot is the sender's again (while payloads too large for it come
   * on the plane). */
  pp_lane_release (link->lane);
  pp_wait_ring_peer (w);
  if (!slot.payloads_here) {
    payload_wait.deadline_us = pp_deadline_in_ms (payload_timeout_ms);
    received = pp_data_plane_recv (link->plane, &payload_wait, chunk, error);
  }
  if (payloads_received (chunk, received, event) == NULL)
    return NULL;
  PP_DEBUG ("received chunk %" G_GUINT64_FORMAT " from rank %d: %"
      G_GSIZE_FORMAT " + %" G_GSIZE_FORMAT " bytes (lane)", chunk->chunk_id,
      w->peer, slot.head_len, pp_chunk_payload_bytes (chunk));
  return chunk;
}

/* Called with the link's lock held. */
static PpChunk *
recv_chunk (const PpWait * w, PpChunkLink * link, guint payload_timeout_ms,
    GError ** error)
{
  static const gchar head_what[] = "receive of a chunk head";
  PpWait payload_wait = *w;
  PpDataPlaneResult received;
  MPI_Message msg;
  PpChunk *chunk;
  guint8 *head;
  int len = 0;
  guint64 event;

  if (!decide_lane (w, link, FALSE, error))
    return NULL;
  if (link->lane != NULL)
    return recv_on_lane (w, link, payload_timeout_ms, error);
  if (!probe_message (w, PP_TAG_HEAD, PP_ENVELOPE_HEAD_MAX, head_what, &msg,
          &len, error))
    return NULL;
  head = pp_envelope_codec_buffer (link->codec, len);
  if (!receive_matched (w, &msg, head, len, head_what, error)) {
    pp_envelope_codec_abandon_buffer (link->codec);
    return NULL;
  }
  chunk = pp_chunk_pool_acquire (link->pool);
  if (!read_head (w, link, head, len, chunk, error)) {
    pp_chunk_free (chunk);
    return NULL;
  }
  event = pp_recorder_begin (PP_REC_RECV, chunk->chunk_id, w->peer,
      len + pp_chunk_payload_bytes (chunk));
  payload_wait.deadline_us = pp_deadline_in_ms (payload_timeout_ms);
  received = pp_data_plane_recv (link->plane, &payload_wait, chunk, error);
  if (payloads_received (chunk, received, event) == NULL)
    return NULL;
  /* The sender waits for its sends to complete. */
  pp_wait_ring_peer (w);
  PP_DEBUG ("received chunk %" G_GUINT64_FORMAT " from rank %d: %d + %"
      G_GSIZE_FORMAT " bytes", chunk->chunk_id, w->peer, len,
      pp_chunk_payload_bytes (chunk));
  return chunk;
}

PpChunk *
pp_transport_recv_chunk (const PpWait * w, PpChunkLink * link,
    guint payload_timeout_ms, GError ** error)
{
  PpChunk *chunk;

  g_mutex_lock (&link->lock);
  chunk = recv_chunk (w, link, payload_timeout_ms, error);
  g_mutex_unlock (&link->lock);
  return chunk;
}
