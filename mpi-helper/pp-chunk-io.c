/* ppdiffuse — rank 0's chunk traffic: it assigns every chunk its chunk_id
 * as it sends it to the first worker, and receives and checks chunks back
 * from the last, in order (the warm-up pass included).  Every wait has
 * a deadline, what that work is allowed by what the mesh measured
 * (pp-allowance.h: timeout-ms at least), and the workers' liveness ends it
 * sooner. */
#include "pp-chunk-io.h"
#include "pp-error.h"
#include "pp-liveness-room.h"
#include "pp-log.h"
#include "pp-queue.h"
#include "pp-recorder.h"
#include "pp-sigpipe.h"

/* The deadline of one wait for chunk traffic on work expected to take
 * @expected_us (none when the test-only switch turned the watchdog
 * off). */
static gint64
chunk_deadline (PpMesh * mesh, gint64 expected_us)
{
  return mesh->watchdog ? g_get_monotonic_time ()
      + pp_allowance_us (mesh->timeout_ms, expected_us) : PP_NO_DEADLINE;
}

/* A send to the first worker waits, at worst, for it to finish the chunk
 * it computes. */
static gint64
send_deadline (PpMesh * mesh)
{
  return chunk_deadline (mesh, pp_mesh_expected_slice_us (mesh, 0, NULL,
          NULL));
}

/* When rank 0 waits for chunk n, every chunk before it has come back: no
 * stage holds work ahead of it, and it is back within a round of the
 * mesh. */
static gint64
receive_deadline (PpMesh * mesh, PpMeshPace * pace)
{
  pp_mesh_pace (mesh, pace);
  return chunk_deadline (mesh, pace->round_us);
}

gboolean
pp_mesh_send_next (PpMesh * mesh, PpChunk * chunk, gint64 deadline_us,
    PpMeshAssignedFunc assigned, gpointer user_data, GError ** error)
{
  PpWait w = { mesh->world, 1, deadline_us, pp_mesh_workers_alive, mesh };

  /* The one place chunk ids are assigned: as a chunk is sent, from one
   * counter, so every stage sees consecutive ids. */
  chunk->chunk_id = mesh->next_send_id;
  if (assigned != NULL)
    assigned (chunk->chunk_id, user_data);
  pp_recorder_note (PP_REC_SUBMIT, chunk->chunk_id, 1, 0, PP_REC_DONE);
  if (!pp_transport_send_chunk (&w, mesh->to_first, chunk, error))
    return FALSE;
  mesh->next_send_id++;
  return TRUE;
}

static gboolean
mesh_submit (PpMesh * mesh, PpChunk * chunk, PpMeshAssignedFunc assigned,
    gpointer user_data, GError ** error)
{
  const guint64 id = mesh->next_send_id;   /* as send_next assigns it */

  if (pp_mesh_has_failed (mesh, error)) {
    pp_chunk_free (chunk);
    return FALSE;
  }
  chunk->plan_id = mesh->plan->plan_id;
  chunk->n_steps = mesh->plan->n_steps;
  chunk->next_step = 0;
  chunk->submit_us = (guint64) g_get_monotonic_time ();
  if (!(chunk->flags & PP_CHUNK_KIND_FLAGS))
    chunk->flags |= PP_CHUNK_FLAG_DATA;
  /* The first chunk of a stream state: workers start theirs over. */
  if (id == 0 || chunk->cache_epoch != mesh->last_epoch)
    chunk->flags |= PP_CHUNK_FLAG_RESET;
  mesh->last_epoch = chunk->cache_epoch;
  if (mesh->first_submit_us == 0 && (chunk->flags & PP_CHUNK_FLAG_DATA))
    mesh->first_submit_us = (gint64) chunk->submit_us;
  pp_mesh_pace_sending (mesh, chunk);
  if (!pp_mesh_send_next (mesh, chunk, send_deadline (mesh), assigned,
          user_data, error)) {
    g_autofree gchar *first = pp_mesh_worker_name (mesh, 0);
    g_autofree gchar *symptom = g_strdup_printf ("rank 0 sending chunk %"
        G_GUINT64_FORMAT " to %s", id, first);

    pp_mesh_wait_failed (mesh, 0, id, symptom, error);
    return FALSE;
  }
  return TRUE;
}

void
pp_mesh_before_submit (PpMesh * mesh, const PpChunk * chunk)
{
  pp_mesh_pace_sending (mesh, chunk);
}

gboolean
pp_mesh_submit (PpMesh * mesh, PpChunk * chunk, PpMeshAssignedFunc assigned,
    gpointer user_data, GError ** error)
{
  PpSigpipeGuard guard;
  gboolean result;

  pp_sigpipe_block (&guard);
  result = mesh_submit (mesh, chunk, assigned, user_data, error);
  pp_sigpipe_restore (&guard);
  return result;
}

PpChunk *
pp_mesh_receive_next (PpMesh * mesh, gboolean shutdown, GError ** error)
{
  PpMeshPace pace;
  const gint64 start = g_get_monotonic_time ();
  PpWait w = { mesh->world, (gint) mesh->plan->n_workers,
    receive_deadline (mesh, &pace), pp_mesh_workers_alive, mesh
  };
  PpChunkExpect expect = {
    .chunk_id = mesh->next_recv_id,
    .plan_id = mesh->plan->plan_id,
    .next_step = mesh->plan->n_steps,
    .n_steps = mesh->plan->n_steps,
    .min_cache_epoch = G_MAXUINT32,
  };
  g_autoptr (PpChunk) chunk = NULL;

  chunk = pp_transport_recv_chunk (&w, mesh->from_last, mesh->timeout_ms,
      error);
  if (chunk == NULL || !pp_chunk_check (chunk, &expect, error)) {
    const guint last = mesh->plan->n_workers - 1;
    g_autofree gchar *name = pp_mesh_worker_name (mesh, last);
    g_autofree gchar *allowed = pp_mesh_describe_allowance (mesh,
        pace.round_us, pace.source);
    g_autofree gchar *symptom = g_strdup_printf ("rank 0 waiting for chunk %"
        G_GUINT64_FORMAT " from %s for %" G_GINT64_FORMAT " ms (a round of "
        "the mesh %s)", mesh->next_recv_id, name,
        (g_get_monotonic_time () - start) / 1000, allowed);

    pp_mesh_wait_failed (mesh, last, mesh->next_recv_id, symptom, error);
    return NULL;
  }
  if (!shutdown && (chunk->flags & PP_CHUNK_FLAG_SHUTDOWN)) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL,
        "chunk %" G_GUINT64_FORMAT " came back as a shutdown marker that "
        "was never sent", chunk->chunk_id);
    pp_mesh_fail (mesh, *error);
    return NULL;
  }
  pp_recorder_note (PP_REC_COLLECT, chunk->chunk_id,
      (gint) mesh->plan->n_workers, 0, PP_REC_DONE);
  mesh->next_recv_id++;
  if (chunk->flags & PP_CHUNK_FLAG_DATA) {
    mesh->last_return_us = g_get_monotonic_time ();
    pp_mesh_pace_returned (mesh, chunk->chunk_id, mesh->last_return_us
        - (gint64) chunk->submit_us);
  }
  return g_steal_pointer (&chunk);
}

static PpChunk *
mesh_collect (PpMesh * mesh, GError ** error)
{
  if (pp_mesh_has_failed (mesh, error))
    return NULL;
  return pp_mesh_receive_next (mesh, FALSE, error);
}

PpChunk *
pp_mesh_collect (PpMesh * mesh, GError ** error)
{
  PpSigpipeGuard guard;
  PpChunk *result;

  pp_sigpipe_block (&guard);
  result = mesh_collect (mesh, error);
  pp_sigpipe_restore (&guard);
  return result;
}

static gboolean
mesh_warm_up (PpMesh * mesh, PpChunk * chunk, GError ** error)
{
  const gint64 start = g_get_monotonic_time ();
  g_autoptr (PpChunk) back = NULL;

  g_return_val_if_fail (mesh->next_recv_id == mesh->next_send_id, FALSE);
  chunk->flags = (chunk->flags & ~PP_CHUNK_KIND_FLAGS) | PP_CHUNK_FLAG_WARMUP;
  if (!pp_mesh_submit (mesh, chunk, NULL, NULL, error))
    return FALSE;
  back = pp_mesh_collect (mesh, error);
  if (back == NULL)
    return FALSE;
  if (!(back->flags & PP_CHUNK_FLAG_WARMUP)) {
    g_set_error (error, PP_ERROR, PP_ERROR_PROTOCOL, "the warm-up chunk %"
        G_GUINT64_FORMAT " came back without its warm-up flag",
        back->chunk_id);
    pp_mesh_fail (mesh, *error);
    return FALSE;
  }
  mesh->warm_ups++;
  pp_mesh_pace_warmed_up (mesh, g_get_monotonic_time () - start);
  PP_INFO ("warm-up pass (chunk %" G_GUINT64_FORMAT ") took %.1f ms",
      back->chunk_id, (g_get_monotonic_time () - start) / 1e3);
  return TRUE;
}

gboolean
pp_mesh_warm_up (PpMesh * mesh, PpChunk * chunk, GError ** error)
{
  PpSigpipeGuard guard;
  gboolean result;

  pp_sigpipe_block (&guard);
  result = mesh_warm_up (mesh, chunk, error);
  pp_sigpipe_restore (&guard);
  return result;
}
