/* ppdiffuse — MPI point-to-point under deadlines. */
#include "pp-transport.h"
#include "pp-error.h"
#include "pp-log.h"
#include "pp-queue.h"
#include "pp-recorder.h"

/* Poll back-off: start fast for low latency, settle at a period that keeps
 * oversubscribed cores free for compute. */
#define PP_POLL_MIN_US 10
#define PP_POLL_MAX_US 500
/* A message already matched by a probe is received within this. */
#define PP_TRY_RECV_TIMEOUT_MS 1000
/* Liveness checks read /proc: a few per second are plenty. */
#define PP_ALIVE_PERIOD_US 50000

gint64
pp_deadline_in_ms (guint timeout_ms)
{
  return g_get_monotonic_time () + (gint64) timeout_ms * 1000;
}

gboolean
pp_mpi_check (int rc, const gchar * what, GError ** error)
{
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;

  if (rc == MPI_SUCCESS)
    return TRUE;
  MPI_Error_string (rc, text, &len);
  g_set_error (error, PP_ERROR, PP_ERROR_MPI, "%s: MPI error %d: %.*s", what,
      rc, len, text);
  return FALSE;
}

static void
poll_sleep (gulong * period_us)
{
  g_usleep (*period_us);
  *period_us = MIN (*period_us * 2, PP_POLL_MAX_US);
}

static gboolean
wait_expired (const PpWait * w, gint64 * next_alive_us, const gchar * what,
    GError ** error)
{
  gint64 now = g_get_monotonic_time ();

  if (w->deadline_us != PP_NO_DEADLINE && now > w->deadline_us) {
    g_set_error (error, PP_ERROR, PP_ERROR_TIMEOUT,
        "%s (peer rank %d): no progress before the deadline (timeout-ms)",
        what, w->peer);
    return TRUE;
  }
  if (w->alive != NULL && now >= *next_alive_us) {
    *next_alive_us = now + PP_ALIVE_PERIOD_US;
    if (!w->alive (w->alive_data, error)) {
      g_prefix_error (error, "%s (peer rank %d): ", what, w->peer);
      return TRUE;
    }
  }
  return FALSE;
}

/* Polls @n requests to completion (their statuses to @statuses when set).
 * On failure the requests are left pending: their buffers must then never
 * be freed. */
static gboolean
wait_requests (const PpWait * w, MPI_Request * reqs, int n,
    MPI_Status * statuses, const gchar * what, GError ** error)
{
  gulong period = PP_POLL_MIN_US;
  gint64 next_alive = g_get_monotonic_time () + PP_ALIVE_PERIOD_US;

  for (;;) {
    int flag = 0;
    int rc = MPI_Testall (n, reqs, &flag,
        statuses ? statuses : MPI_STATUSES_IGNORE);
    if (!pp_mpi_check (rc, what, error))
      return FALSE;
    if (flag)
      return TRUE;
    if (wait_expired (w, &next_alive, what, error))
      return FALSE;
    poll_sleep (&period);
  }
}

gboolean
pp_transport_send_bytes (const PpWait * w, gint tag, GBytes * bytes,
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
  if (!pp_mpi_check (MPI_Isend (data, (int) len, MPI_BYTE, w->peer, tag,
              w->comm, &req), what, error))
    return FALSE;
  if (!wait_requests (w, &req, 1, NULL, what, error)) {
    g_bytes_ref (bytes);        /* MPI may still read it */
    return FALSE;
  }
  return TRUE;
}

GBytes *
pp_transport_recv_bytes (const PpWait * w, gint tag, gsize max_len,
    const gchar * what, GError ** error)
{
  gulong period = PP_POLL_MIN_US;
  gint64 next_alive = g_get_monotonic_time () + PP_ALIVE_PERIOD_US;
  MPI_Message msg;
  MPI_Status status;
  MPI_Request req;
  int found = 0, count = 0;
  guint8 *buf;

  for (;;) {
    if (!pp_mpi_check (MPI_Improbe (w->peer, tag, w->comm, &found, &msg,
                &status), what, error))
      return NULL;
    if (found)
      break;
    if (wait_expired (w, &next_alive, what, error))
      return NULL;
    poll_sleep (&period);
  }
  MPI_Get_count (&status, MPI_BYTE, &count);
  if (count < 0 || (gsize) count > max_len) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "%s (peer rank %d): message of %d bytes, at most %" G_GSIZE_FORMAT
        " allowed", what, w->peer, count, max_len);
    return NULL;
  }
  buf = g_malloc (MAX (count, 1));
  if (!pp_mpi_check (MPI_Imrecv (buf, count, MPI_BYTE, &msg, &req), what,
          error))
    return NULL;                /* buf leaked: MPI may own it */
  if (!wait_requests (w, &req, 1, NULL, what, error))
    return NULL;
  return g_bytes_new_take (buf, count);
}

GBytes *
pp_transport_try_recv_bytes (MPI_Comm comm, gint tag, gsize max_len,
    gint * source, GError ** error)
{
  MPI_Message msg;
  MPI_Status status;
  int found = 0, count = 0;
  guint8 *buf;

  if (!pp_mpi_check (MPI_Improbe (MPI_ANY_SOURCE, tag, comm, &found, &msg,
              &status), "probe", error) || !found)
    return NULL;
  MPI_Get_count (&status, MPI_BYTE, &count);
  *source = status.MPI_SOURCE;
  if (count < 0 || (gsize) count > max_len) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "message of %d bytes with tag %d from rank %d, at most %"
        G_GSIZE_FORMAT " allowed", count, tag, status.MPI_SOURCE, max_len);
    return NULL;                /* the caller fails the mesh */
  }
  buf = g_malloc (MAX (count, 1));
  /* The message has arrived, but a large one may still be on its way in:
   * a bounded wait, like every other. */
  {
    PpWait w = { comm, status.MPI_SOURCE,
      pp_deadline_in_ms (PP_TRY_RECV_TIMEOUT_MS), NULL, NULL
    };
    MPI_Request req;

    if (!pp_mpi_check (MPI_Imrecv (buf, count, MPI_BYTE, &msg, &req),
            "receive", error)
        || !wait_requests (&w, &req, 1, NULL, "receive", error))
      return NULL;              /* buf leaked: MPI may still write it */
  }
  return g_bytes_new_take (buf, count);
}

gboolean
pp_transport_send_chunk (const PpWait * w, PpChunk * chunk, GError ** error)
{
  return pp_transport_send_chunk_as (w, chunk, PP_SEND_INTACT, error);
}

gboolean
pp_transport_send_chunk_as (const PpWait * w, PpChunk * chunk,
    PpSendDefect defect, GError ** error)
{
  g_autoptr (GBytes) head = pp_envelope_encode_head (chunk, error);
  guint n = chunk->tensors->len;
  MPI_Request reqs[1 + PP_ENVELOPE_MAX_TENSORS];
  gsize head_len;
  gconstpointer head_data;
  gchar what[96];
  guint64 event;

  if (head == NULL) {
    pp_chunk_free (chunk);
    return FALSE;               /* preflight failed: nothing was sent */
  }
  if (defect == PP_SEND_BAD_VERSION) {
    guint8 *bad = g_bytes_unref_to_data (g_steal_pointer (&head), &head_len);

    bad[4] = PP_ENVELOPE_MAJOR + 1;
    head = g_bytes_new_take (bad, head_len);
  }
  g_snprintf (what, sizeof what, "send of chunk %" G_GUINT64_FORMAT,
      chunk->chunk_id);
  head_data = g_bytes_get_data (head, &head_len);
  event = pp_recorder_begin (PP_REC_SEND, chunk->chunk_id, w->peer,
      head_len + pp_chunk_payload_bytes (chunk));
  if (!pp_mpi_check (MPI_Isend (head_data, (int) head_len, MPI_BYTE, w->peer,
              PP_TAG_HEAD, w->comm, &reqs[0]), what, error))
    goto leak;
  for (guint i = 0; i < n; i++) {
    PpTensor *t = g_ptr_array_index (chunk->tensors, i);
    gsize bytes = defect == PP_SEND_BAD_SPEC && i == 0 ? t->nbytes / 2
        : t->nbytes;

    if (!pp_mpi_check (MPI_Isend (t->data, (int) bytes, MPI_BYTE, w->peer,
                PP_TAG_PAYLOAD, w->comm, &reqs[1 + i]), what, error))
      goto leak;
  }
  if (!wait_requests (w, reqs, 1 + n, NULL, what, error))
    goto leak;
  pp_recorder_end (event, PP_REC_DONE);
  PP_DEBUG ("sent chunk %" G_GUINT64_FORMAT " to rank %d: %" G_GSIZE_FORMAT
      " + %" G_GSIZE_FORMAT " bytes", chunk->chunk_id, w->peer, head_len,
      pp_chunk_payload_bytes (chunk));
  pp_chunk_free (chunk);
  return TRUE;

leak:
  pp_recorder_end (event, PP_REC_FAILED);
  /* Pending sends may still read these buffers: keep them alive. */
  g_bytes_ref (head);
  return FALSE;
}

PpChunk *
pp_transport_recv_chunk (const PpWait * w, guint payload_timeout_ms,
    GError ** error)
{
  g_autoptr (GBytes) head = NULL;
  g_autoptr (PpChunk) chunk = NULL;
  MPI_Request reqs[PP_ENVELOPE_MAX_TENSORS];
  PpWait payload_wait = *w;
  gsize len;
  gconstpointer data;
  gchar what[96];

  MPI_Status statuses[PP_ENVELOPE_MAX_TENSORS];
  guint64 event;

  head = pp_transport_recv_bytes (w, PP_TAG_HEAD, PP_ENVELOPE_HEAD_MAX,
      "receive of a chunk head", error);
  if (head == NULL)
    return NULL;
  data = g_bytes_get_data (head, &len);
  chunk = pp_envelope_decode_head (data, len, error);
  if (chunk == NULL) {
    g_prefix_error (error, "from rank %d: ", w->peer);
    pp_recorder_note (PP_REC_RECV, PP_RECORDER_NO_CHUNK, w->peer, len,
        PP_REC_FAILED);
    return NULL;
  }
  if (chunk->flags & PP_CHUNK_FLAG_ABORT) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "chunk %" G_GUINT64_FORMAT " was aborted by its sender, rank %d",
        chunk->chunk_id, w->peer);
    pp_recorder_note (PP_REC_RECV, chunk->chunk_id, w->peer, len,
        PP_REC_FAILED);
    return NULL;
  }
  event = pp_recorder_begin (PP_REC_RECV, chunk->chunk_id, w->peer,
      len + pp_chunk_payload_bytes (chunk));
  g_snprintf (what, sizeof what, "receive of chunk %" G_GUINT64_FORMAT
      " payloads", chunk->chunk_id);
  payload_wait.deadline_us = pp_deadline_in_ms (payload_timeout_ms);
  for (guint i = 0; i < chunk->tensors->len; i++) {
    PpTensor *t = g_ptr_array_index (chunk->tensors, i);
    if (!pp_mpi_check (MPI_Irecv (t->data, (int) t->nbytes, MPI_BYTE,
                w->peer, PP_TAG_PAYLOAD, w->comm, &reqs[i]), what, error))
      goto leak;
  }
  if (!wait_requests (&payload_wait, reqs, chunk->tensors->len, statuses,
          what, error))
    goto leak;
  /* MPI accepts a shorter message than the buffer: hold each payload to
   * its manifest. */
  for (guint i = 0; i < chunk->tensors->len; i++) {
    const PpTensor *t = g_ptr_array_index (chunk->tensors, i);
    int count = 0;

    MPI_Get_count (&statuses[i], MPI_BYTE, &count);
    if (count < 0 || (gsize) count != t->nbytes) {
      g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
          "payload '%s' of chunk %" G_GUINT64_FORMAT " from rank %d: the "
          "manifest says %" G_GSIZE_FORMAT " bytes, %d arrived", t->name,
          chunk->chunk_id, w->peer, t->nbytes, count);
      pp_recorder_end (event, PP_REC_FAILED);
      return NULL;
    }
  }
  pp_recorder_end (event, PP_REC_DONE);
  PP_DEBUG ("received chunk %" G_GUINT64_FORMAT " from rank %d: %"
      G_GSIZE_FORMAT " + %" G_GSIZE_FORMAT " bytes", chunk->chunk_id,
      w->peer, len, pp_chunk_payload_bytes (chunk));
  return g_steal_pointer (&chunk);

leak:
  pp_recorder_end (event, PP_REC_FAILED);
  /* Posted receives may still write into the payload buffers. */
  for (guint i = 0; i < chunk->tensors->len; i++)
    ((PpTensor *) g_ptr_array_index (chunk->tensors, i))->data = NULL;
  return NULL;
}
