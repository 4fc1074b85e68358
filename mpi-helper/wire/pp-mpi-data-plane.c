/* ppdiffuse — the MPI data plane: one message per tensor on
 * PP_TAG_PAYLOAD, in manifest order (MPI's non-overtaking order keeps them
 * behind their head). */
#include "pp-data-plane.h"
#include "pp-error.h"

static PpDataPlaneResult
mpi_send (PpDataPlane * plane, const PpWait * w, const PpChunk * chunk,
    PpSendDefect defect, GError ** error)
{
  guint n = chunk->tensors->len;
  MPI_Request reqs[PP_ENVELOPE_MAX_TENSORS];
  gchar what[96];

  g_snprintf (what, sizeof what, "send of chunk %" G_GUINT64_FORMAT,
      chunk->chunk_id);
  for (guint i = 0; i < n; i++) {
    PpTensor *t = g_ptr_array_index (chunk->tensors, i);
    gsize bytes = defect == PP_SEND_BAD_SPEC && i == 0 ? t->nbytes / 2
        : t->nbytes;

    if (!pp_mpi_check (MPI_Isend (t->data, (int) bytes, MPI_BYTE, w->peer,
                PP_TAG_PAYLOAD, w->comm, &reqs[i]), what, error))
      return PP_DATA_PLANE_ABANDONED;
  }
  if (!pp_wait_requests (w, reqs, n, NULL, what, error))
    return PP_DATA_PLANE_ABANDONED;
  return PP_DATA_PLANE_DONE;
}

static PpDataPlaneResult
mpi_recv (PpDataPlane * plane, const PpWait * w, PpChunk * chunk,
    GError ** error)
{
  guint n = chunk->tensors->len;
  MPI_Request reqs[PP_ENVELOPE_MAX_TENSORS];
  MPI_Status statuses[PP_ENVELOPE_MAX_TENSORS];
  gchar what[96];

  g_snprintf (what, sizeof what, "receive of chunk %" G_GUINT64_FORMAT
      " payloads", chunk->chunk_id);
  for (guint i = 0; i < n; i++) {
    PpTensor *t = g_ptr_array_index (chunk->tensors, i);
    if (!pp_mpi_check (MPI_Irecv (t->data, (int) t->nbytes, MPI_BYTE,
                w->peer, PP_TAG_PAYLOAD, w->comm, &reqs[i]), what, error))
      return PP_DATA_PLANE_ABANDONED;
  }
  if (!pp_wait_requests (w, reqs, n, statuses, what, error))
    return PP_DATA_PLANE_ABANDONED;
  /* MPI accepts a shorter message than the buffer: hold each payload to
   * its manifest. */
  for (guint i = 0; i < n; i++) {
    const PpTensor *t = g_ptr_array_index (chunk->tensors, i);
    int count = 0;

    MPI_Get_count (&statuses[i], MPI_BYTE, &count);
    if (count < 0 || (gsize) count != t->nbytes) {
      g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
          "payload '%s' of chunk %" G_GUINT64_FORMAT " from rank %d: the "
          "manifest says %" G_GSIZE_FORMAT " bytes, %d arrived", t->name,
          chunk->chunk_id, w->peer, t->nbytes, count);
      return PP_DATA_PLANE_FAILED;
    }
  }
  return PP_DATA_PLANE_DONE;
}

static const PpDataPlaneClass mpi_plane_class = {
  .name = "MPI",
  .preflight = NULL,            /* the envelope's own preflight suffices */
  .send = mpi_send,
  .recv = mpi_recv,
};

static PpDataPlane mpi_plane = { &mpi_plane_class };

PpDataPlane *
pp_data_plane_mpi (void)
{
  return &mpi_plane;
}
