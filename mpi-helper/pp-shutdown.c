/* ppdiffuse — shutting the mesh down: the clean path (a shutdown marker
 * behind every chunk in flight, proof that each worker finished, then a
 * disconnect under a deadline) and the fault path (no disconnect, no
 * finalize: local workers are killed by pid). */
#include "pp-shutdown.h"
#include "pp-chunk-io.h"
#include "pp-error.h"
#include "pp-handshake.h"
#include "pp-liveness-room.h"
#include "pp-log.h"
#include "pp-proc.h"
#include "pp-protocol.h"
#include "pp-sigpipe.h"

#include <string.h>

#define PP_MESH_EXIT_POLL_US 10000

void
pp_mesh_kill_workers (PpMesh * mesh)
{
  for (guint i = 0; i < mesh->plan->n_workers; i++) {
    PpWorkerInfo *info = &mesh->workers[i];
    if (info->pid > 0 && pp_proc_is_local (info->host)
        && pp_proc_is_running (info->pid)) {
      PP_WARN ("killing worker rank %u (pid %" G_GINT64_FORMAT ")", i + 1,
          info->pid);
      pp_proc_kill (info->pid);
    }
  }
}

void
pp_mesh_free (PpMesh * mesh)
{
  for (guint i = 0; i < mesh->plan->n_workers; i++)
    pp_worker_info_clear (&mesh->workers[i]);
  g_free (mesh->workers);
  pp_liveness_free (mesh->liveness);
  pp_chunk_link_free (mesh->to_first);
  pp_chunk_link_free (mesh->from_last);
  /* After the links, which borrow the planes; planes not closed cleanly
   * are aborted, never finalized. */
  pp_nccl_links_free (mesh->planes);
  g_free (mesh->dump_dir);
  g_clear_error (&mesh->fault);
  g_mutex_clear (&mesh->lock);
  pp_plan_free (mesh->plan);
  g_free (mesh);
}

typedef struct
{
  MPI_Comm inter;
  MPI_Comm world;
} DisconnectCall;

static gboolean
disconnect_blocking (gpointer data, GError ** error)
{
  DisconnectCall *call = data;

  if (call->world != MPI_COMM_NULL)
    MPI_Comm_free (&call->world);
  return pp_mpi_check (MPI_Comm_disconnect (&call->inter),
      "MPI_Comm_disconnect", error);
}

/* Sends the shutdown marker behind every chunk in flight and waits for it
 * to come back: proof that each worker finished and left its loop. */
static gboolean
shutdown_clean (PpMesh * mesh, PpMeshStats * stats, GError ** error)
{
  guint n = mesh->plan->n_workers;
  const gint64 shape[1] = { n };
  PpChunk *marker = pp_chunk_new ();
  g_autoptr (PpChunk) back = NULL;
  PpTensor *busy;

  marker->flags = PP_CHUNK_FLAG_SHUTDOWN;
  marker->plan_id = mesh->plan->plan_id;
  marker->n_steps = mesh->plan->n_steps;
  marker->next_step = mesh->plan->n_steps;
  if (mesh->planes != NULL) {
    /* Over NCCL every payload is device memory: zeros uploaded. */
    g_autofree gdouble *zeros = g_new0 (gdouble, n);

    busy = pp_tensor_new_on (mesh->backend, PP_BUSY_TENSOR, PP_DTYPE_F64, 1,
        shape, error);
    if (busy == NULL) {
      pp_chunk_free (marker);
      return FALSE;
    }
    pp_backend_upload (mesh->backend, busy->data, zeros, busy->nbytes);
    pp_chunk_add_tensor (marker, busy);
  } else {
    pp_chunk_add_tensor (marker, pp_tensor_new (PP_BUSY_TENSOR,
            PP_DTYPE_F64, 1, shape, NULL));
  }
  if (!pp_mesh_send_next (mesh, marker, pp_deadline_in_ms (mesh->timeout_ms),
          NULL, NULL, error))
    return FALSE;
  while (mesh->next_recv_id < mesh->next_send_id) {
    g_autoptr (PpChunk) chunk = pp_mesh_receive_next (mesh, TRUE, error);
    if (chunk == NULL)
      return FALSE;
    if (chunk->flags & PP_CHUNK_FLAG_SHUTDOWN)
      back = g_steal_pointer (&chunk);
    else
      PP_DEBUG ("discarding chunk %" G_GUINT64_FORMAT " at shutdown",
          chunk->chunk_id);
  }
  busy = back ? pp_chunk_get_tensor (back, PP_BUSY_TENSOR) : NULL;
  if (busy == NULL || busy->dtype != PP_DTYPE_F64 || busy->shape[0] != n) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "the shutdown marker came back without its %s tensor",
        PP_BUSY_TENSOR);
    return FALSE;
  }
  if (stats != NULL) {
    g_autofree gdouble *busy_s = g_new0 (gdouble, n);
    gdouble sum = 0;

    if (busy->backend != NULL)
      pp_backend_download (busy->backend, busy_s, busy->data, busy->nbytes);
    else
      memcpy (busy_s, busy->data, busy->nbytes);
    stats->n_workers = n;
    for (guint i = 0; i < n; i++)
      sum += stats->busy_s[i] = busy_s[i];
    stats->chunks = mesh->next_send_id - 1 - mesh->warm_ups;
    stats->warm_ups = mesh->warm_ups;
    stats->wall_s = (mesh->last_return_us - mesh->first_submit_us) / 1e6;
    stats->overlap = stats->wall_s > 0 && mesh->first_submit_us > 0
        ? sum / (n * stats->wall_s) : 0.0;
  }
  /* The clean end of rank 0's NCCL links: nothing is in flight now. */
  if (mesh->planes != NULL) {
    PpWait w = { mesh->world, 0, pp_deadline_in_ms (mesh->timeout_ms), NULL,
      NULL
    };

    g_clear_pointer (&back, pp_chunk_free);
    if (!pp_nccl_links_close (mesh->planes, &w, error))
      return FALSE;
  }
  return TRUE;
}

static void
wait_workers_exit (PpMesh * mesh)
{
  gint64 deadline = pp_deadline_in_ms (PP_MESH_EXIT_GRACE_MS);

  for (guint i = 0; i < mesh->plan->n_workers; i++) {
    PpWorkerInfo *info = &mesh->workers[i];
    if (!pp_proc_is_local (info->host))
      continue;
    while (pp_proc_is_running (info->pid)
        && g_get_monotonic_time () < deadline)
      g_usleep (PP_MESH_EXIT_POLL_US);
  }
  pp_mesh_kill_workers (mesh);
}

static gboolean
mesh_stop (PpMesh * mesh, PpMeshStats * stats, GError ** error)
{
  gboolean ok = FALSE;

  if (mesh == NULL)
    return TRUE;
  if (stats != NULL)
    memset (stats, 0, sizeof *stats);
  if (g_atomic_int_get (&mesh->failed)) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "the mesh had failed; workers were killed");
  } else if (shutdown_clean (mesh, stats, error)) {
    DisconnectCall *call = g_new0 (DisconnectCall, 1);

    /* The workers have left their loops; their last heartbeats may still
     * come, until each one's farewell (pp-liveness.h).  Without every
     * farewell the world communicator stays allocated: a heartbeat that
     * came after it was freed would reach a later mesh's. */
    pp_liveness_stop (mesh->liveness);
    call->inter = mesh->inter;
    call->world = mesh->world;
    if (!pp_liveness_await_farewells (mesh->liveness,
            pp_deadline_in_ms (mesh->timeout_ms))) {
      PP_WARN ("not every worker ended its heartbeats within %u ms: their "
          "communicator is kept", mesh->timeout_ms);
      call->world = MPI_COMM_NULL;
    }
    ok = pp_run_with_deadline ("disconnecting from the workers",
        disconnect_blocking, call, g_free, mesh->timeout_ms, error);
  }
  pp_liveness_stop (mesh->liveness);
  /* The fault path never disconnects: a dead peer could hang it. */
  if (ok)
    wait_workers_exit (mesh);
  else
    pp_mesh_kill_workers (mesh);
  PP_INFO ("mesh stopped %s", ok ? "cleanly" : "after an error");
  pp_mesh_free (mesh);
  return ok;
}

gboolean
pp_mesh_stop (PpMesh * mesh, PpMeshStats * stats, GError ** error)
{
  PpSigpipeGuard guard;
  gboolean result;

  pp_sigpipe_block (&guard);
  result = mesh_stop (mesh, stats, error);
  pp_sigpipe_restore (&guard);
  return result;
}
