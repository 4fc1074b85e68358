/* ppdiffuse — rank 0's measure of the mesh's pace: what each worker's
 * slice and a round of the mesh are expected to take, from the warm-up
 * pass and the pace the workers' heartbeats carry, of the frames' current
 * size (PpPace).  The deadlines
 * of rank 0's waits and the watchdog's allowance for a compute come from
 * it, by the rule of pp-allowance.h. */
#include "pp-liveness-room.h"
#include <string.h>

/* Warm-up passes run one at a time, before any frame: the last one is the
 * measure (an earlier one paid the set-up a steady frame does not). */
void
pp_mesh_pace_warmed_up (PpMesh * mesh, gint64 elapsed_us)
{
  g_mutex_lock (&mesh->lock);
  mesh->pace_round_us = elapsed_us;
  g_mutex_unlock (&mesh->lock);
}

/* Rank 0's own measure, which needs no heartbeat: until the workers' busy
 * time comes, the slices are expected from it.  A chunk of earlier work
 * says nothing of the current. */
void
pp_mesh_pace_returned (PpMesh * mesh, guint64 chunk_id, gint64 latency_us)
{
  g_mutex_lock (&mesh->lock);
  if (chunk_id >= mesh->pace_work_from)
    mesh->pace_round_us = pp_allowance_update_round_us (mesh->pace_round_us,
        latency_us);
  g_mutex_unlock (&mesh->lock);
}

void
pp_mesh_pace_sending (PpMesh * mesh, const PpChunk * chunk)
{
  const PpTensor *sample = pp_chunk_get_tensor (chunk, PP_WORK_TENSOR);

  if (sample == NULL || !pp_tensor_shape_changed (sample, mesh->pace_shape))
    return;
  g_mutex_lock (&mesh->lock);
  if (mesh->pace_work > 0)
    PP_DEBUG ("chunk %" G_GUINT64_FORMAT " is of another size: the mesh's "
        "pace is measured again", mesh->next_send_id);
  mesh->pace_work++;
  mesh->pace_work_from = mesh->next_send_id;
  mesh->pace_round_us = 0;
  g_mutex_unlock (&mesh->lock);
}

/* The computes of the current work worker @hb has finished stream chunks
 * in (PpPace), and the µs they took into @us; 0 when its measure is of
 * earlier work (or of none yet). */
static guint64
passes_measured (const PpHeartbeat * hb, guint64 work, guint64 * us)
{
  *us = hb->pace.us;
  if (hb->pace.work != work || hb->pace.us == 0)
    return 0;
  return hb->pace.passes;
}

/* The slowest time per step the other workers measured of the current
 * work, 0 for none. */
static gint64
peer_step_us (PpMesh * mesh, guint i, guint64 work)
{
  gint64 slowest = 0;

  for (guint p = 0; mesh->liveness != NULL && p < mesh->plan->n_workers;
      p++) {
    const guint steps = mesh->plan->slices[p].end
        - mesh->plan->slices[p].first;
    PpHeartbeat beat;
    gint64 silent_us;
    guint64 passes, us;

    if (p == i || steps == 0)
      continue;
    pp_liveness_peer (mesh->liveness, p, &beat, &silent_us);
    passes = passes_measured (&beat, work, &us);
    if (passes > 0)
      slowest = MAX (slowest, (gint64) (us / passes / steps));
  }
  return slowest;
}

gint64
pp_mesh_expected_slice_us (PpMesh * mesh, guint i, const PpHeartbeat * hb,
    const gchar ** source)
{
  const PpSlice *slice = &mesh->plan->slices[i];
  PpHeartbeat beat = { 0 };
  guint64 passes, work, us;
  gint64 round_us;

  beat.sent = PP_HEARTBEAT_NONE;
  if (hb == NULL && mesh->liveness != NULL) {
    gint64 silent_us;

    pp_liveness_peer (mesh->liveness, i, &beat, &silent_us);
  }
  if (hb == NULL)
    hb = &beat;
  g_mutex_lock (&mesh->lock);
  round_us = mesh->pace_round_us;
  work = mesh->pace_work;
  g_mutex_unlock (&mesh->lock);
  passes = passes_measured (hb, work, &us);
  return pp_allowance_expected_slice_us (mesh->timeout_ms, us, passes,
      passes > 0 ? 0 : peer_step_us (mesh, i, work), round_us,
      slice->end - slice->first, mesh->plan->n_steps, source);
}

gint64
pp_mesh_slice_allowance_us (PpMesh * mesh, guint i, const PpHeartbeat * hb)
{
  return pp_allowance_us (mesh->timeout_ms,
      pp_mesh_expected_slice_us (mesh, i, hb, NULL));
}

void
pp_mesh_pace (PpMesh * mesh, PpMeshPace * pace)
{
  /* The least certain source of any slice is the round's. */
  static const gchar *const sources[] = { PP_ALLOWANCE_BUSY, PP_ALLOWANCE_PEER,
    PP_ALLOWANCE_ROUND, PP_ALLOWANCE_UNMEASURED
  };
  guint rank = 0;

  memset (pace, 0, sizeof *pace);
  for (guint i = 0; i < mesh->plan->n_workers; i++) {
    const gchar *source;
    const gint64 slice = pp_mesh_expected_slice_us (mesh, i, NULL, &source);

    pace->round_us += slice;
    if (slice > pace->stage_us) {
      pace->stage_us = slice;
      pace->slowest = i;
    }
    for (guint s = 0; s < G_N_ELEMENTS (sources); s++)
      if (g_str_equal (source, sources[s]))
        rank = MAX (rank, s);
  }
  pace->source = sources[rank];
  pace->advice = pp_allowance_advice (mesh->plan->n_workers,
      mesh->plan->n_steps);
  pace->round_allowance_us = pp_allowance_us (mesh->timeout_ms,
      pace->round_us);
  pace->stage_allowance_us = pp_allowance_us (mesh->timeout_ms,
      pace->stage_us);
}

gchar *
pp_mesh_describe_allowance (PpMesh * mesh, gint64 expected_us,
    const gchar * source)
{
  return g_strdup_printf ("expected %" G_GINT64_FORMAT " ms (%s), allowed %"
      G_GINT64_FORMAT " ms: max (timeout-ms %u, %d × expected + %u ms)",
      expected_us / 1000, source,
      pp_allowance_us (mesh->timeout_ms, expected_us) / 1000,
      mesh->timeout_ms, PP_ALLOWANCE_FACTOR,
      mesh->timeout_ms / PP_HEARTBEAT_DIVISOR);
}
