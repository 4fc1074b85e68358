/* ppdiffuse — the NCCL links of one rank (pp-nccl-links.h). */
#include "pp-nccl-links.h"
#include "pp-data-plane-choice.h"
#include "pp-error.h"
#include "pp-log.h"
#include "pp-protocol.h"

/* One pipeline link of this rank: its NCCL plane and stream, behind a
 * data plane that prepares the calling thread. */
typedef struct
{
  PpDataPlane parent;
  PpNcclPlane *nccl;
  PpBackend *backend;
  const PpNcclApi *api;
  PpCudaStream stream;
  gboolean own_stream;
  gint ranks[2];
  gint from, to;                /* its direction */
  /* Sends that waited on their payloads' fence, and on the whole compute
   * stream; receives, and those into payload tensors just fitted, which
   * waited on the fence behind their memory's earlier users (logged at
   * the close). */
  gint fenced, synchronized;
  gint received, fresh;
} Link;

struct _PpNcclLinks
{
  GMutex lock;
  GPtrArray *links;             /* Link *, in the global order */
  Link *to_next;
  Link *from_prev;
  GError *aborted;              /* the first abort's reason */
};

/* ---- a link's data plane --------------------------------------------- */

static gboolean
link_preflight (PpDataPlane * base, const PpWait * w,
    const PpChunk * chunk, GError ** error)
{
  Link *link = (Link *) base;

  return pp_data_plane_preflight (pp_nccl_plane_data_plane
      (link->nccl), w, chunk, error);
}

static PpDataPlaneResult
link_send (PpDataPlane * base, const PpWait * w, const PpChunk * chunk,
    PpSendDefect defect, GError ** error)
{
  Link *link = (Link *) base;

  pp_backend_make_current (link->backend);
  /* The payloads were written on the backend's stream (encode, the steps,
   * a copy): the plane's own stream is not ordered after it.  It waits on
   * the device for the fence the writing thread recorded behind them, not
   * for the next chunk's work that thread may have queued since; a chunk
   * without a fence (rank 0's shutdown marker, a copy) waits for the
   * whole stream. */
  if (pp_chunk_wait_ready (chunk, link->stream)) {
    g_atomic_int_inc (&link->fenced);
  } else {
    pp_backend_synchronize (link->backend);
    g_atomic_int_inc (&link->synchronized);
  }
  return pp_data_plane_send (pp_nccl_plane_data_plane (link->nccl), w,
      chunk, defect, error);
}

static PpDataPlaneResult
link_recv (PpDataPlane * base, const PpWait * w, PpChunk * chunk,
    GError ** error)
{
  Link *link = (Link *) base;
  PpDataPlaneResult received;

  pp_backend_make_current (link->backend);
  /* Payload tensors just fitted to a new size may be memory the backend's
   * stream still uses (freed memory is handed out again behind its last
   * users' work, not after a synchronize): the receive waits on the
   * device for the fence behind that work.  Reused tensors have none. */
  if (pp_chunk_wait_ready (chunk, link->stream))
    g_atomic_int_inc (&link->fresh);
  /* Complete when it returns: the event behind the group was queried
   * done, so work enqueued after this on any stream sees the payloads. */
  received = pp_data_plane_recv (pp_nccl_plane_data_plane (link->nccl), w,
      chunk, error);
  if (received == PP_DATA_PLANE_DONE) {
    g_atomic_int_inc (&link->received);
    pp_chunk_clear_ready (chunk);
  }
  return received;
}

static const PpDataPlaneClass link_class = {
  .name = "NCCL",
  .preflight = link_preflight,
  .send = link_send,
  .recv = link_recv,
};

/* ---- set-up ------------------------------------------------------------- */

PpNcclLinks *
pp_nccl_links_new (void)
{
  PpNcclLinks *planes = g_new0 (PpNcclLinks, 1);

  g_mutex_init (&planes->lock);
  planes->links = g_ptr_array_new ();
  return planes;
}

static Link *
link_new (const PpNcclApi * api, MPI_Comm world, gint lo, gint hi,
    PpBackend * backend, const PpWait * w, GError ** error)
{
  Link *link = g_new0 (Link, 1);

  link->parent.klass = &link_class;
  link->api = api;
  link->backend = backend;
  link->ranks[0] = lo;
  link->ranks[1] = hi;
  pp_backend_make_current (backend);
  if (api->stream_create != NULL) {
    int rc = api->stream_create (&link->stream);

    if (rc != PP_CUDA_SUCCESS) {
      g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "the stream of the "
          "NCCL link from rank %d to rank %d: cudaStreamCreate says %s", lo,
          hi, api->cuda_error_name (rc));
      g_free (link);
      return NULL;
    }
    link->own_stream = TRUE;
  } else {
    link->stream = pp_backend_stream (backend);
  }
  link->nccl = pp_nccl_plane_new (api, world, link->ranks, 2, link->stream,
      w, error);
  if (link->nccl == NULL) {
    /* The stream may still be named by an aborted communicator: kept. */
    g_free (link);
    return NULL;
  }
  return link;
}

gboolean
pp_nccl_links_connect (PpNcclLinks * planes, const PpPlan * plan,
    MPI_Comm world, gint rank, PpBackend * backend, const PpWait * w,
    GError ** error)
{
  const gint n = (gint) plan->n_workers;
  const PpNcclApi *api = pp_data_plane_api (plan->data_plane, world, error);

  if (api == NULL)
    return FALSE;
  /* Links 0 … n - 1 (k → k + 1), then the return link (n → 0), in this
   * order on every rank. */
  for (gint k = 0; k <= n; k++) {
    const gint lo = k < n ? k : 0, hi = k < n ? k + 1 : n;
    const gboolean sender = k < n ? rank == k : rank == n;
    const gboolean receiver = k < n ? rank == k + 1 : rank == 0;
    Link *link;

    if (!sender && !receiver)
      continue;
    link = link_new (api, world, lo, hi, backend, w, error);
    if (link == NULL) {
      g_prefix_error (error, "NCCL link %d (rank %d to rank %d): ", k,
          k < n ? k : n, k < n ? k + 1 : 0);
      return FALSE;
    }
    link->from = k < n ? k : n;
    link->to = k < n ? k + 1 : 0;
    g_mutex_lock (&planes->lock);
    g_ptr_array_add (planes->links, link);
    if (sender)
      planes->to_next = link;
    else
      planes->from_prev = link;
    /* The mesh failed while this plane was being made. */
    if (planes->aborted != NULL)
      pp_nccl_plane_abort (link->nccl, planes->aborted);
    g_mutex_unlock (&planes->lock);
  }
  PP_INFO ("rank %d: chunk payloads over NCCL (%s), %u links", rank,
      plan->data_plane, planes->links->len);
  return TRUE;
}

PpDataPlane *
pp_nccl_links_to_next (PpNcclLinks * planes)
{
  return planes->to_next ? &planes->to_next->parent : NULL;
}

PpDataPlane *
pp_nccl_links_from_prev (PpNcclLinks * planes)
{
  return planes->from_prev ? &planes->from_prev->parent : NULL;
}

/* ---- the end ------------------------------------------------------------ */

void
pp_nccl_links_abort (PpNcclLinks * planes, const GError * reason)
{
  if (planes == NULL)
    return;
  g_mutex_lock (&planes->lock);
  if (planes->aborted == NULL) {
    g_autofree PpNcclPlane **nccl = g_new0 (PpNcclPlane *,
        planes->links->len);

    planes->aborted = g_error_copy (reason);
    for (guint i = 0; i < planes->links->len; i++)
      nccl[i] = ((Link *) g_ptr_array_index (planes->links, i))->nccl;
    /* All at once: one abort may wait for another link's kernels. */
    pp_nccl_planes_abort (nccl, planes->links->len, reason);
  }
  g_mutex_unlock (&planes->lock);
}

gboolean
pp_nccl_links_close (PpNcclLinks * planes, const PpWait * w,
    GError ** error)
{
  gboolean ok = TRUE;

  for (guint i = 0; i < planes->links->len; i++) {
    Link *link = g_ptr_array_index (planes->links, i);

    pp_backend_make_current (link->backend);
    if (!pp_nccl_plane_close (link->nccl, w, ok ? error : NULL))
      ok = FALSE;
  }
  if (!ok)
    return FALSE;
  /* Finalized and destroyed: nothing is enqueued on the streams now. */
  for (guint i = 0; i < planes->links->len; i++) {
    Link *link = g_ptr_array_index (planes->links, i);
    const gint fenced = g_atomic_int_get (&link->fenced);
    const gint synchronized = g_atomic_int_get (&link->synchronized);
    const gint received = g_atomic_int_get (&link->received);

    if (fenced + synchronized > 0)
      PP_INFO ("NCCL link from rank %d to rank %d: %d chunks sent, %d "
          "behind their payloads' fences, %d behind the whole compute "
          "stream", link->from, link->to, fenced + synchronized,
          fenced, synchronized);
    if (received > 0)
      PP_INFO ("NCCL link from rank %d to rank %d: %d chunks received, %d "
          "into new payload tensors behind their memory's earlier work",
          link->from, link->to, received, g_atomic_int_get (&link->fresh));

    if (link->own_stream) {
      link->api->stream_destroy (link->stream);
      link->own_stream = FALSE;
    }
  }
  return TRUE;
}

void
pp_nccl_links_free (PpNcclLinks * planes)
{
  if (planes == NULL)
    return;
  for (guint i = 0; i < planes->links->len; i++) {
    Link *link = g_ptr_array_index (planes->links, i);

    pp_backend_make_current (link->backend);
    pp_nccl_plane_free (link->nccl);
    /* A stream still owned here belongs to a plane that was aborted: NCCL
     * may still hold work on it, so it is left. */
    g_free (link);
  }
  g_ptr_array_unref (planes->links);
  g_clear_error (&planes->aborted);
  g_mutex_clear (&planes->lock);
  g_free (planes);
}
