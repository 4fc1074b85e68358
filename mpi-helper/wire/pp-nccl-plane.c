/* ppdiffuse — the NCCL data plane (pp-nccl-plane.h). */
#include "pp-nccl-plane.h"
#include "pp-transport.h"   /* the unique id goes over MPI */
#include "pp-error.h"
#include "pp-log.h"

#include <string.h>

/* ncclSend's and ncclRecv's count is a size_t. */
#define PP_NCCL_COUNT_MAX G_MAXSIZE

typedef enum
{
  PLANE_OPEN,
  PLANE_ABORTED,                /* by the first fault: cause set */
  PLANE_CLOSED,                 /* finalized and destroyed */
} PlaneState;

typedef enum
{
  DIR_SEND,
  DIR_RECV,
  N_DIRS,
} Direction;

/* One direction with one peer: at most one transfer in flight, its event
 * recorded behind its group on the plane's stream. */
typedef struct
{
  gboolean busy;
  PpCudaEvent event;
} Slot;

struct _PpNcclPlane
{
  PpDataPlane parent;
  const PpNcclApi *api;
  /* Serialises the NCCL calls on the communicator and guards the state.
   * Recursive: a liveness check asked while a group launches may abort
   * the plane from the same thread. */
  GRecMutex lock;
  PpNcclComm comm;
  PpCudaStream stream;
  gint rank;                    /* world rank of this process */
  gint *ranks;                  /* world ranks, index = NCCL rank */
  guint n_ranks;
  Slot *slots;                  /* [dir * n_ranks + NCCL rank] */
  guint in_flight;
  PlaneState state;
  GError *cause;                /* why it was aborted */
};

const gchar *
pp_nccl_result_name (int result)
{
  static const gchar *const names[] = {
    "ncclSuccess", "ncclUnhandledCudaError", "ncclSystemError",
    "ncclInternalError", "ncclInvalidArgument", "ncclInvalidUsage",
    "ncclRemoteError", "ncclInProgress",
  };

  if (result >= 0 && result < (int) G_N_ELEMENTS (names))
    return names[result];
  return "NCCL result (unknown)";
}

static gboolean
nccl_ok (int result)
{
  return result == PP_NCCL_SUCCESS || result == PP_NCCL_IN_PROGRESS;
}

/* "ncclRemoteError (remote process exited or there was a network error)" */
static gchar *
describe_result (const PpNcclApi * api, int result)
{
  const gchar *text = api->error_string ? api->error_string (result) : NULL;

  return g_strdup_printf ("%s (%s)", pp_nccl_result_name (result),
      text ? text : "no description");
}

static gchar *
describe_ranks (const gint * ranks, guint n_ranks)
{
  GString *s = g_string_new (NULL);

  for (guint i = 0; i < n_ranks; i++)
    g_string_append_printf (s, "%s%d", i ? "," : "", ranks[i]);
  return g_string_free (s, FALSE);
}

static gint
nccl_rank_of (const PpNcclPlane * plane, gint world_rank)
{
  for (guint i = 0; i < plane->n_ranks; i++)
    if (plane->ranks[i] == world_rank)
      return (gint) i;
  return -1;
}

/* ---- the id message ---------------------------------------------------- */

GBytes *
pp_nccl_id_message_encode (const gint * ranks, guint n_ranks,
    const PpNcclUniqueId * id)
{
  GByteArray *msg = g_byte_array_new ();
  guint32 word;

  g_return_val_if_fail (n_ranks <= PP_NCCL_MAX_RANKS, NULL);
  word = GUINT32_TO_LE (PP_NCCL_ID_MAGIC);
  g_byte_array_append (msg, (const guint8 *) &word, 4);
  word = GUINT32_TO_LE (n_ranks);
  g_byte_array_append (msg, (const guint8 *) &word, 4);
  for (guint i = 0; i < n_ranks; i++) {
    word = GUINT32_TO_LE ((guint32) ranks[i]);
    g_byte_array_append (msg, (const guint8 *) &word, 4);
  }
  g_byte_array_append (msg, (const guint8 *) id->internal,
      PP_NCCL_UNIQUE_ID_BYTES);
  return g_byte_array_free_to_bytes (msg);
}

static guint32
read_u32 (const guint8 * p)
{
  guint32 v;

  memcpy (&v, p, 4);
  return GUINT32_FROM_LE (v);
}

gboolean
pp_nccl_id_message_decode (GBytes * message, const gint * ranks,
    guint n_ranks, PpNcclUniqueId * id, GError ** error)
{
  gsize len;
  const guint8 *p = g_bytes_get_data (message, &len);
  g_autofree gchar *mine = describe_ranks (ranks, n_ranks);
  guint32 n;

  if (len < 8 || read_u32 (p) != PP_NCCL_ID_MAGIC) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL, "NCCL id message for "
        "ranks %s: %" G_GSIZE_FORMAT " bytes without its magic", mine, len);
    return FALSE;
  }
  n = read_u32 (p + 4);
  if (n > PP_NCCL_MAX_RANKS || len != 8 + 4 * (gsize) n
      + PP_NCCL_UNIQUE_ID_BYTES) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL, "NCCL id message for "
        "ranks %s: %" G_GSIZE_FORMAT " bytes for %u ranks", mine, len, n);
    return FALSE;
  }
  for (guint i = 0; i < MAX (n, n_ranks); i++) {
    if (n != n_ranks || (gint) read_u32 (p + 8 + 4 * i) != ranks[i]) {
      GString *s = g_string_new (NULL);

      for (guint j = 0; j < n; j++)
        g_string_append_printf (s, "%s%d", j ? "," : "",
            (gint) read_u32 (p + 8 + 4 * j));
      g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL, "NCCL id message: "
          "it is for ranks %s, this rank sets up ranks %s (every rank must "
          "set up its communicators in the same order)", s->str, mine);
      g_string_free (s, TRUE);
      return FALSE;
    }
  }
  memcpy (id->internal, p + 8 + 4 * n, PP_NCCL_UNIQUE_ID_BYTES);
  return TRUE;
}

/* ---- faults ------------------------------------------------------------ */

/* Aborts the communicator for @cause (taken) unless it already was; sets
 * @error to the first cause.  Called with the lock held. */
static void
abort_locked (PpNcclPlane * plane, GError * cause, GError ** error)
{
  if (plane->state == PLANE_OPEN) {
    int rc;

    /* A new error rather than @cause's message rewritten: the plane may be
     * aborted on a thread of its own (pp_nccl_planes_abort), and the error
     * it was given (copied from another thread's) is left as it is. */
    plane->cause = g_error_new (cause->domain, cause->code,
        "%s; communicator aborted", cause->message);
    g_error_free (cause);
    plane->state = PLANE_ABORTED;
    /* Never destroy: a dead peer can hang it.  Abort frees the
     * communicator whatever its peers do. */
    rc = plane->api->comm_abort (plane->comm);
    PP_WARN ("NCCL plane of rank %d: %s%s", plane->rank,
        plane->cause->message,
        rc == PP_NCCL_SUCCESS ? "" : " (ncclCommAbort failed)");
    g_propagate_error (error, g_error_copy (plane->cause));
    return;
  }
  g_error_free (cause);
  if (plane->cause != NULL)
    g_propagate_error (error, g_error_copy (plane->cause));
  else
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "the NCCL communicator "
        "of rank %d is closed", plane->rank);
}

static void
abort_with (PpNcclPlane * plane, GError * cause, GError ** error)
{
  g_rec_mutex_lock (&plane->lock);
  abort_locked (plane, cause, error);
  g_rec_mutex_unlock (&plane->lock);
}

/* A later call on a plane that is no longer open: the first cause, at
 * once, without a call into NCCL.  Called with the lock held. */
static gboolean
check_open_locked (PpNcclPlane * plane, const gchar * what, GError ** error)
{
  if (plane->state == PLANE_OPEN)
    return TRUE;
  if (plane->state == PLANE_ABORTED)
    g_set_error (error, plane->cause->domain, plane->cause->code,
        "%s: the communicator was aborted earlier: %s", what,
        plane->cause->message);
  else
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "%s: the NCCL "
        "communicator of rank %d is closed", what, plane->rank);
  return FALSE;
}

static GError *
nccl_error (const PpNcclApi * api, const gchar * what, const gchar * call,
    int result)
{
  g_autofree gchar *status = describe_result (api, result);

  return g_error_new (PP_ERROR, PP_ERROR_DEVICE, "%s: %s says %s", what,
      call, status);
}

/* Between two polls: the deadline, then the liveness check.  NULL while
 * the wait may go on, else why it may not. */
static GError *
wait_stop (const PpWait * w, PpPoll * poll, const gchar * what)
{
  gint64 now = g_get_monotonic_time ();
  GError *error = NULL;

  if (pp_wait_past_deadline (w, now))
    return g_error_new (PP_ERROR, PP_ERROR_TIMEOUT, "%s: no progress before "
        "the deadline (timeout-ms)", what);
  if (!pp_poll_alive (w, poll, now, &error)) {
    if (error == NULL)
      error = g_error_new (PP_ERROR, PP_ERROR_RESOURCE, "the liveness check "
          "failed");
    g_prefix_error (&error, "%s: ", what);
  }
  return error;
}

/* Polls comm_get_async_error until the call under way (init, a group's
 * launch, finalize) is no longer in progress.  Called with the lock held
 * once; NULL when it succeeded, else why not (the caller aborts).
 *
 * The lock is let go between polls.  The liveness check may find a worker
 * gone and abort every plane of the process (pp_mesh_fail), each on a
 * thread of its own, this one among them: held here, that thread would
 * wait for it while this one waits for that thread.  And ncclCommAbort
 * from another thread is how an operation in progress is called off (a
 * first send's connection waits in progress until the peer receives). */
static GError *
poll_in_progress_locked (PpNcclPlane * plane, const PpWait * w,
    PpPoll * poll, const gchar * what)
{
  for (;;) {
    int state = PP_NCCL_SUCCESS;
    int rc = plane->api->comm_get_async_error (plane->comm, &state);
    GError *stop;

    if (rc != PP_NCCL_SUCCESS)
      return nccl_error (plane->api, what, "ncclCommGetAsyncError", rc);
    if (state == PP_NCCL_SUCCESS)
      return NULL;
    if (state != PP_NCCL_IN_PROGRESS)
      return nccl_error (plane->api, what, "NCCL", state);
    g_rec_mutex_unlock (&plane->lock);
    stop = wait_stop (w, poll, what);
    if (stop == NULL)
      pp_poll_sleep (poll);
    g_rec_mutex_lock (&plane->lock);
    if (stop != NULL)
      return stop;
    /* Aborted meanwhile: the communicator is gone, its cause stands. */
    if (!check_open_locked (plane, what, &stop))
      return stop;
  }
}

/* ---- set-up ------------------------------------------------------------ */

static gboolean
check_ranks (const gint * ranks, guint n_ranks, gint rank, GError ** error)
{
  gboolean member = FALSE;

  if (n_ranks == 0 || n_ranks > PP_NCCL_MAX_RANKS) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "an NCCL communicator "
        "spans 1 to %d ranks, not %u", PP_NCCL_MAX_RANKS, n_ranks);
    return FALSE;
  }
  for (guint i = 0; i < n_ranks; i++) {
    if (i > 0 && ranks[i] <= ranks[i - 1]) {
      g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "NCCL communicator "
          "ranks must ascend: rank %d follows %d", ranks[i], ranks[i - 1]);
      return FALSE;
    }
    member |= ranks[i] == rank;
  }
  if (!member) {
    g_autofree gchar *list = describe_ranks (ranks, n_ranks);
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "rank %d is not one of "
        "the NCCL communicator's ranks %s", rank, list);
    return FALSE;
  }
  return TRUE;
}

static const PpDataPlaneClass nccl_plane_class;

static gboolean
create_events (PpNcclPlane * plane, GError ** error)
{
  for (guint d = 0; d < N_DIRS; d++) {
    for (guint i = 0; i < plane->n_ranks; i++) {
      Slot *slot = &plane->slots[d * plane->n_ranks + i];
      int rc;

      if (plane->ranks[i] == plane->rank)
        continue;               /* no transfers to itself */
      rc = plane->api->event_create (&slot->event);
      if (rc != PP_CUDA_SUCCESS) {
        g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "rank %d: "
            "cudaEventCreateWithFlags for the NCCL plane says %s", plane->rank,
            plane->api->cuda_error_name (rc));
        return FALSE;
      }
    }
  }
  return TRUE;
}

PpNcclPlane *
pp_nccl_plane_new_with_api (const PpNcclApi * api, const PpNcclUniqueId * id,
    const gint * ranks, guint n_ranks, gint rank, PpCudaStream stream,
    const PpWait * w, GError ** error)
{
  PpNcclPlane *plane;
  g_autofree gchar *list = NULL;
  gchar what[160];
  PpPoll poll;
  GError *cause;
  int rc;

  g_return_val_if_fail (api != NULL && id != NULL && w != NULL, NULL);
  if (!check_ranks (ranks, n_ranks, rank, error))
    return NULL;
  plane = g_new0 (PpNcclPlane, 1);
  plane->parent.klass = &nccl_plane_class;
  plane->api = api;
  g_rec_mutex_init (&plane->lock);
  plane->stream = stream;
  plane->rank = rank;
  plane->ranks = g_memdup2 (ranks, n_ranks * sizeof *ranks);
  plane->n_ranks = n_ranks;
  plane->slots = g_new0 (Slot, N_DIRS * n_ranks);
  plane->state = PLANE_CLOSED;  /* no communicator yet */
  if (!create_events (plane, error)) {
    pp_nccl_plane_free (plane);
    return NULL;
  }

  list = describe_ranks (ranks, n_ranks);
  g_snprintf (what, sizeof what, "NCCL communicator init on rank %d (NCCL "
      "rank %d of ranks %s)", rank, nccl_rank_of (plane, rank), list);
  rc = api->comm_init_rank_config (&plane->comm, (int) n_ranks, id,
      nccl_rank_of (plane, rank));
  if (plane->comm != NULL)
    plane->state = PLANE_OPEN;
  if (!nccl_ok (rc)) {
    cause = nccl_error (api, what, "ncclCommInitRankConfig", rc);
    if (plane->state == PLANE_OPEN)
      abort_with (plane, cause, error);
    else
      g_propagate_error (error, cause);
    pp_nccl_plane_free (plane);
    return NULL;
  }
  if (plane->comm == NULL) {
    g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "%s: "
        "ncclCommInitRankConfig gave no communicator", what);
    pp_nccl_plane_free (plane);
    return NULL;
  }
  g_rec_mutex_lock (&plane->lock);
  pp_poll_start (&poll);
  cause = poll_in_progress_locked (plane, w, &poll, what);
  if (cause != NULL)
    abort_locked (plane, cause, error);
  g_rec_mutex_unlock (&plane->lock);
  if (cause != NULL) {
    pp_nccl_plane_free (plane);
    return NULL;
  }
  PP_INFO ("NCCL communicator over ranks %s ready on rank %d", list, rank);
  return plane;
}

PpNcclPlane *
pp_nccl_plane_new (const PpNcclApi * api, MPI_Comm world, const gint * ranks,
    guint n_ranks, PpCudaStream stream, const PpWait * w, GError ** error)
{
  PpWait idw = *w;
  PpNcclUniqueId id;
  int me = -1;

  if (!pp_mpi_check (MPI_Comm_rank (world, &me), "MPI_Comm_rank", error)
      || !check_ranks (ranks, n_ranks, me, error))
    return NULL;
  idw.comm = world;
  if (me == ranks[0]) {
    g_autoptr (GBytes) msg = NULL;
    int rc = api->get_unique_id (&id);

    if (rc != PP_NCCL_SUCCESS) {
      g_autoptr (GError) cause = nccl_error (api, "NCCL unique id",
          "ncclGetUniqueId", rc);
      g_set_error (error, cause->domain, cause->code, "rank %d: %s", me,
          cause->message);
      return NULL;
    }
    msg = pp_nccl_id_message_encode (ranks, n_ranks, &id);
    for (guint i = 1; i < n_ranks; i++) {
      idw.peer = ranks[i];
      if (!pp_transport_send_bytes (&idw, PP_TAG_NCCL_ID, msg,
              "send of the NCCL unique id", error))
        return NULL;
    }
  } else {
    g_autoptr (GBytes) msg = NULL;

    idw.peer = ranks[0];
    msg = pp_transport_recv_bytes (&idw, PP_TAG_NCCL_ID, PP_NCCL_ID_MAX,
        "receive of the NCCL unique id", error);
    if (msg == NULL || !pp_nccl_id_message_decode (msg, ranks, n_ranks, &id,
            error))
      return NULL;
  }
  return pp_nccl_plane_new_with_api (api, &id, ranks, n_ranks, me, stream, w,
      error);
}

/* ---- transfers --------------------------------------------------------- */

static void
describe_transfer (gchar * what, gsize size, Direction dir,
    const PpChunk * chunk, gint peer)
{
  g_snprintf (what, size, "%s of chunk %" G_GUINT64_FORMAT " payloads %s "
      "rank %d over NCCL", dir == DIR_SEND ? "send" : "receive",
      chunk->chunk_id, dir == DIR_SEND ? "to" : "from", peer);
}

/* How tensor @t travels: float32 elements, or bytes. */
static void
nccl_count (const PpTensor * t, PpNcclDataType * type, gsize * count)
{
  if (t->dtype == PP_DTYPE_F32) {
    *type = PP_NCCL_FLOAT32;
    *count = t->nbytes / sizeof (gfloat);
  } else {
    *type = PP_NCCL_UINT8;
    *count = t->nbytes;
  }
}

static gboolean
check_sizes (const PpChunk * chunk, const gchar * what, GError ** error)
{
  if (chunk->tensors->len > PP_ENVELOPE_MAX_TENSORS) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL, "%s: %u payloads, at "
        "most %d", what, chunk->tensors->len, PP_ENVELOPE_MAX_TENSORS);
    return FALSE;
  }
  for (guint i = 0; i < chunk->tensors->len; i++) {
    const PpTensor *t = g_ptr_array_index (chunk->tensors, i);
    gsize expected;

    if (t->nbytes == 0)
      continue;                 /* skipped: nothing travels */
    expected = pp_tensor_shape_bytes (t->dtype, t->ndim, t->shape);
    if (expected != t->nbytes) {
      g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL, "%s: payload '%s': "
          "the manifest says %" G_GSIZE_FORMAT " bytes (%s, %u dims), the "
          "buffer holds %" G_GSIZE_FORMAT, what, t->name, expected,
          pp_dtype_name (t->dtype), t->ndim, t->nbytes);
      return FALSE;
    }
    if (t->dtype == PP_DTYPE_F32 && t->nbytes % sizeof (gfloat) != 0) {
      g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL, "%s: payload '%s': "
          "%" G_GSIZE_FORMAT " bytes are not whole float32 elements", what,
          t->name, t->nbytes);
      return FALSE;
    }
    if (t->nbytes > PP_NCCL_COUNT_MAX || t->data == NULL) {
      g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL, "%s: payload '%s' of "
          "%" G_GSIZE_FORMAT " bytes has no buffer or too many elements for "
          "NCCL", what, t->name, t->nbytes);
      return FALSE;
    }
  }
  return TRUE;
}

/* The checks before anything is posted; the NCCL rank of w->peer. */
static gboolean
check_transfer (PpNcclPlane * plane, const PpWait * w, const PpChunk * chunk,
    const gchar * what, gint * peer, GError ** error)
{
  gboolean open;

  g_rec_mutex_lock (&plane->lock);
  open = check_open_locked (plane, what, error);
  g_rec_mutex_unlock (&plane->lock);
  if (!open)
    return FALSE;
  *peer = nccl_rank_of (plane, w->peer);
  if (*peer < 0 || w->peer == plane->rank) {
    g_autofree gchar *list = describe_ranks (plane->ranks, plane->n_ranks);
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "%s: rank %d is not a "
        "peer of rank %d on this communicator (ranks %s)", what, w->peer,
        plane->rank, list);
    return FALSE;
  }
  return check_sizes (chunk, what, error);
}

gboolean
pp_nccl_plane_check_payloads (PpNcclPlane * plane, const PpWait * w,
    const PpChunk * chunk, GError ** error)
{
  gchar what[160];
  gint peer;

  describe_transfer (what, sizeof what, DIR_SEND, chunk, w->peer);
  return check_transfer (plane, w, chunk, what, &peer, error);
}

static gboolean
has_payload (const PpChunk * chunk)
{
  for (guint i = 0; i < chunk->tensors->len; i++)
    if (((const PpTensor *) g_ptr_array_index (chunk->tensors, i))->nbytes)
      return TRUE;
  return FALSE;
}

/* NCCL forbids issuing operations on two communicators of one device
 * from two threads at once, and a rank's planes (its links) share its
 * device: a rank's groups are issued one at a time, from ncclGroupStart
 * to ncclGroupEnd.  Not across the in-progress poll after it: with
 * non-blocking communicators the launch goes on in NCCL's own thread,
 * and a first launch may wait for its peer to launch too, which a lock
 * held across it around the ring of ranks would deadlock. */
static GMutex issue_lock;

/* One group: a send or receive per non-empty tensor, launched (polled
 * while in progress), then the slot's event recorded behind it.  Called
 * with the lock held; NULL when launched, else why not (the caller
 * aborts: once a group was started its operations may be posted). */
static GError *
launch_locked (PpNcclPlane * plane, const PpWait * w, const PpChunk * chunk,
    Direction dir, gint peer, Slot * slot, PpPoll * poll, const gchar * what)
{
  const PpNcclApi *api = plane->api;
  GError *cause = NULL;
  int rc;

  g_mutex_lock (&issue_lock);
  rc = api->group_start ();
  if (!nccl_ok (rc)) {
    g_mutex_unlock (&issue_lock);
    return nccl_error (api, what, "ncclGroupStart", rc);
  }
  for (guint i = 0; i < chunk->tensors->len && cause == NULL; i++) {
    PpTensor *t = g_ptr_array_index (chunk->tensors, i);
    PpNcclDataType type;
    gsize count;

    if (t->nbytes == 0)
      continue;
    nccl_count (t, &type, &count);
    if (dir == DIR_SEND)
      rc = api->send (t->data, count, type, peer, plane->comm, plane->stream);
    else
      rc = api->recv (t->data, count, type, peer, plane->comm, plane->stream);
    if (!nccl_ok (rc))
      cause = nccl_error (api, what, dir == DIR_SEND ? "ncclSend" :
          "ncclRecv", rc);
  }
  /* A started group is always ended, so that this thread's group depth
   * stays balanced whatever happened inside it. */
  rc = api->group_end ();
  g_mutex_unlock (&issue_lock);
  if (cause != NULL)
    return cause;
  if (!nccl_ok (rc))
    return nccl_error (api, what, "ncclGroupEnd", rc);
  /* Non-blocking: the group is enqueued on the stream once no longer in
   * progress; only then does an event recorded on the stream follow it. */
  if (rc == PP_NCCL_IN_PROGRESS
      && (cause = poll_in_progress_locked (plane, w, poll, what)) != NULL)
    return cause;
  rc = api->event_record (slot->event, plane->stream);
  if (rc != PP_CUDA_SUCCESS)
    return g_error_new (PP_ERROR, PP_ERROR_DEVICE, "%s: cudaEventRecord "
        "says %s", what, api->cuda_error_name (rc));
  return NULL;
}

/* Polls the slot's event (never a stream synchronize: it cannot be given
 * up on) and the communicator's asynchronous error under @w.  NULL when
 * the group completed, else why not. */
static GError *
wait_event (PpNcclPlane * plane, const PpWait * w, Slot * slot,
    PpPoll * poll, const gchar * what, gboolean * aborted_elsewhere)
{
  const PpNcclApi *api = plane->api;

  for (;;) {
    int state = PP_NCCL_SUCCESS;
    int rc = api->event_query (slot->event);
    GError *stop = NULL;

    if (rc != PP_CUDA_SUCCESS && rc != PP_CUDA_NOT_READY)
      return g_error_new (PP_ERROR, PP_ERROR_DEVICE, "%s: cudaEventQuery "
          "says %s", what, api->cuda_error_name (rc));
    g_rec_mutex_lock (&plane->lock);
    /* Before a completed event is believed too: an abort from another
     * thread ends the kernels behind it, which then completes with part
     * of the payload moved. */
    if (!check_open_locked (plane, what, &stop)) {
      /* Another thread aborted the communicator: its cause stands. */
      g_rec_mutex_unlock (&plane->lock);
      *aborted_elsewhere = TRUE;
      return stop;
    }
    if (rc == PP_CUDA_SUCCESS) {
      g_rec_mutex_unlock (&plane->lock);
      return NULL;
    }
    rc = api->comm_get_async_error (plane->comm, &state);
    g_rec_mutex_unlock (&plane->lock);
    if (rc != PP_NCCL_SUCCESS)
      return nccl_error (api, what, "ncclCommGetAsyncError", rc);
    if (!nccl_ok (state))
      return nccl_error (api, what, "NCCL", state);
    if ((stop = wait_stop (w, poll, what)) != NULL)
      return stop;
    pp_poll_sleep (poll);
  }
}

static PpDataPlaneResult
transfer (PpNcclPlane * plane, const PpWait * w, const PpChunk * chunk,
    Direction dir, GError ** error)
{
  gboolean aborted_elsewhere = FALSE;
  GError *cause;
  gchar what[160];
  PpPoll poll;
  Slot *slot;
  gint peer;

  describe_transfer (what, sizeof what, dir, chunk, w->peer);
  if (!check_transfer (plane, w, chunk, what, &peer, error))
    return PP_DATA_PLANE_FAILED;
  if (!has_payload (chunk))
    return PP_DATA_PLANE_DONE;
  slot = &plane->slots[dir * plane->n_ranks + peer];
  pp_poll_start (&poll);

  g_rec_mutex_lock (&plane->lock);
  if (!check_open_locked (plane, what, error)) {
    g_rec_mutex_unlock (&plane->lock);
    return PP_DATA_PLANE_FAILED;
  }
  if (slot->busy) {
    /* Two groups to one peer in flight could be matched in another order
     * by the peer: the caller broke the one-at-a-time rule. */
    g_rec_mutex_unlock (&plane->lock);
    g_critical ("%s while another %s with rank %d is in flight: one group "
        "per peer and direction at a time", what, dir == DIR_SEND ? "send" :
        "receive", w->peer);
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "%s: another transfer "
        "with rank %d is in flight", what, w->peer);
    return PP_DATA_PLANE_FAILED;
  }
  slot->busy = TRUE;
  plane->in_flight++;
  cause = launch_locked (plane, w, chunk, dir, peer, slot, &poll, what);
  if (cause != NULL)
    abort_locked (plane, cause, error);
  g_rec_mutex_unlock (&plane->lock);

  if (cause == NULL) {
    cause = wait_event (plane, w, slot, &poll, what, &aborted_elsewhere);
    if (aborted_elsewhere)
      g_propagate_error (error, cause);
    else if (cause != NULL)
      abort_with (plane, cause, error);
  }
  g_rec_mutex_lock (&plane->lock);
  slot->busy = FALSE;
  plane->in_flight--;
  g_rec_mutex_unlock (&plane->lock);
  /* After an abort the buffers are left alone: nothing says when the
   * device stopped touching them. */
  return cause == NULL ? PP_DATA_PLANE_DONE : PP_DATA_PLANE_ABANDONED;
}

PpDataPlaneResult
pp_nccl_plane_send (PpNcclPlane * plane, const PpWait * w,
    const PpChunk * chunk, GError ** error)
{
  return transfer (plane, w, chunk, DIR_SEND, error);
}

PpDataPlaneResult
pp_nccl_plane_recv (PpNcclPlane * plane, const PpWait * w, PpChunk * chunk,
    GError ** error)
{
  return transfer (plane, w, chunk, DIR_RECV, error);
}

/* ---- as a chunk link's data plane ------------------------------------ */

static gboolean
plane_preflight (PpDataPlane * base, const PpWait * w,
    const PpChunk * chunk, GError ** error)
{
  return pp_nccl_plane_check_payloads ((PpNcclPlane *) base, w, chunk, error);
}

static PpDataPlaneResult
plane_send (PpDataPlane * base, const PpWait * w, const PpChunk * chunk,
    PpSendDefect defect, GError ** error)
{
  if (defect == PP_SEND_BAD_SPEC) {
    /* NCCL has no short message a receiver could notice: counts that
     * disagree are undefined behaviour.  The fault stays MPI's. */
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "send of chunk %"
        G_GUINT64_FORMAT ": the bad-spec fault has no NCCL form",
        chunk->chunk_id);
    return PP_DATA_PLANE_FAILED;
  }
  return pp_nccl_plane_send ((PpNcclPlane *) base, w, chunk, error);
}

static PpDataPlaneResult
plane_recv (PpDataPlane * base, const PpWait * w, PpChunk * chunk,
    GError ** error)
{
  return pp_nccl_plane_recv ((PpNcclPlane *) base, w, chunk, error);
}

static const PpDataPlaneClass nccl_plane_class = {
  .name = "NCCL",
  .preflight = plane_preflight,
  .send = plane_send,
  .recv = plane_recv,
};

PpDataPlane *
pp_nccl_plane_data_plane (PpNcclPlane * plane)
{
  return &plane->parent;
}

/* ---- abort, close, free ------------------------------------------------ */

void
pp_nccl_plane_abort (PpNcclPlane * plane, const GError * reason)
{
  g_rec_mutex_lock (&plane->lock);
  if (plane->state == PLANE_OPEN)
    abort_locked (plane, g_error_copy (reason), NULL);
  g_rec_mutex_unlock (&plane->lock);
}

typedef struct
{
  PpNcclPlane *plane;
  const GError *reason;
} AbortJob;

static gpointer
abort_job (gpointer data)
{
  AbortJob *job = data;

  pp_nccl_plane_abort (job->plane, job->reason);
  return NULL;
}

void
pp_nccl_planes_abort (PpNcclPlane * const *planes, guint n,
    const GError * reason)
{
  g_autofree AbortJob *jobs = g_new0 (AbortJob, n);
  g_autofree GThread **threads = g_new0 (GThread *, n);

  for (guint i = 0; i < n; i++) {
    jobs[i].plane = planes[i];
    jobs[i].reason = reason;
    /* The last one (or one no thread could be had for) on this thread. */
    if (i + 1 < n)
      threads[i] = g_thread_try_new ("pp-nccl-abort", abort_job, &jobs[i],
          NULL);
    if (threads[i] == NULL)
      abort_job (&jobs[i]);
  }
  for (guint i = 0; i < n; i++)
    if (threads[i] != NULL)
      g_thread_join (threads[i]);
}

gboolean
pp_nccl_plane_aborted (PpNcclPlane * plane, GError ** cause)
{
  gboolean aborted;

  g_rec_mutex_lock (&plane->lock);
  aborted = plane->state == PLANE_ABORTED;
  if (aborted && cause != NULL)
    *cause = g_error_copy (plane->cause);
  g_rec_mutex_unlock (&plane->lock);
  return aborted;
}

gboolean
pp_nccl_plane_close (PpNcclPlane * plane, const PpWait * w, GError ** error)
{
  g_autofree gchar *list = describe_ranks (plane->ranks, plane->n_ranks);
  gchar what[160];
  GError *cause;
  PpPoll poll;
  int rc;

  g_snprintf (what, sizeof what, "close of the NCCL communicator of rank %d "
      "(ranks %s)", plane->rank, list);
  g_rec_mutex_lock (&plane->lock);
  if (plane->state == PLANE_CLOSED) {
    g_rec_mutex_unlock (&plane->lock);
    return TRUE;
  }
  if (!check_open_locked (plane, what, error)) {
    g_rec_mutex_unlock (&plane->lock);
    return FALSE;
  }
  if (plane->in_flight > 0) {
    g_rec_mutex_unlock (&plane->lock);
    g_critical ("%s with %u transfers in flight", what, plane->in_flight);
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "%s: %u transfers in "
        "flight", what, plane->in_flight);
    return FALSE;
  }
  pp_poll_start (&poll);
  rc = plane->api->comm_finalize (plane->comm);
  if (!nccl_ok (rc))
    cause = nccl_error (plane->api, what, "ncclCommFinalize", rc);
  else
    cause = poll_in_progress_locked (plane, w, &poll, what);
  if (cause != NULL) {
    /* A finalize that fails or hangs may have a dead peer behind it:
     * abort, never destroy. */
    abort_locked (plane, cause, error);
    g_rec_mutex_unlock (&plane->lock);
    return FALSE;
  }
  rc = plane->api->comm_destroy (plane->comm);
  plane->state = PLANE_CLOSED;
  plane->comm = NULL;
  g_rec_mutex_unlock (&plane->lock);
  if (rc != PP_NCCL_SUCCESS) {
    g_propagate_error (error, nccl_error (plane->api, what, "ncclCommDestroy",
            rc));
    return FALSE;
  }
  return TRUE;
}

void
pp_nccl_plane_free (PpNcclPlane * plane)
{
  if (plane == NULL)
    return;
  g_rec_mutex_lock (&plane->lock);
  if (plane->in_flight > 0)
    g_critical ("NCCL plane of rank %d freed with %u transfers in flight",
        plane->rank, plane->in_flight);
  if (plane->state == PLANE_OPEN)
    abort_locked (plane, g_error_new (PP_ERROR, PP_ERROR_CONFIG, "the NCCL "
            "plane of rank %d was freed without a close", plane->rank), NULL);
  g_rec_mutex_unlock (&plane->lock);
  for (guint i = 0; i < N_DIRS * plane->n_ranks; i++)
    if (plane->slots[i].event != NULL)
      plane->api->event_destroy (plane->slots[i].event);
  g_clear_error (&plane->cause);
  g_free (plane->slots);
  g_free (plane->ranks);
  g_rec_mutex_clear (&plane->lock);
  g_free (plane);
}
