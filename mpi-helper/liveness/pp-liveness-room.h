/* ppdiffuse — the liveness room: slow from stuck, and whom to blame.
 *
 * It owns the heartbeat thread and its watchdog, the same on rank 0 and
 * in the workers (pp-liveness.h; the messages are wire/pp-heartbeat.h),
 * the rule that turns what was measured into how long work may take
 * (pp-allowance.h), blocking calls given up at a deadline
 * (pp-deadline.h), and on rank 0 the mesh's measures of the work
 * (pp-mesh-measures.c) and its first failure with the worker to blame
 * (pp-mesh-blame.c).
 *
 * Calls go down only: into start/ (a worker's identity), wire/ and the
 * shared small things; rank 0's façade and the worker call into it. */
#pragma once

#include "pp-allowance.h"
#include "pp-deadline.h"
#include "pp-liveness.h"
#include "pp-mesh-private.h"

G_BEGIN_DECLS

/* pp-mesh-blame.c: the first failure, and the worker to blame for it. */
void     pp_mesh_fail         (PpMesh * mesh, const GError * error);
gboolean pp_mesh_fault        (PpMesh * mesh, GError ** error);
gboolean pp_mesh_has_failed   (PpMesh * mesh, GError ** error);
gchar   *pp_mesh_worker_name  (PpMesh * mesh, guint index);
/* Rank 0's heartbeats with every worker, feeding the above. */
PpLiveness *pp_mesh_liveness_new (PpMesh * mesh);
/* A PpAliveFunc over @mesh for waits on the workers. */
gboolean pp_mesh_workers_alive (gpointer mesh, GError ** error);
/* After a failed wait of rank 0 on worker @peer for chunk @awaited. */
void     pp_mesh_wait_failed  (PpMesh * mesh, guint peer, guint64 awaited,
                               const gchar * symptom, GError ** error);

/* pp-mesh-measures.c: what worker @index's slice is expected to take (its
 * last heartbeat @hb, or NULL for the one liveness holds), and how long
 * it may take (pp-allowance.h); *@source as pp_allowance_expected_slice_us says. */
gint64   pp_mesh_expected_slice_us  (PpMesh * mesh, guint index,
                                     const PpHeartbeat * hb,
                                     const gchar ** source);
gint64   pp_mesh_slice_allowance_us (PpMesh * mesh, guint index,
                                     const PpHeartbeat * hb);
/* The warm-up pass took @elapsed_us; chain thread. */
void     pp_mesh_pace_warmed_up     (PpMesh * mesh, gint64 elapsed_us);
/* Stream chunk @chunk_id came back @latency_us after it was submitted;
 * collector. */
void     pp_mesh_pace_returned      (PpMesh * mesh, guint64 chunk_id,
                                     gint64 latency_us);
/* @chunk is about to be sent, as chunk mesh->next_send_id: when its
 * PP_WORK_TENSOR has another shape than the last one's, it starts new
 * work, and what the mesh measured of the old says nothing of it (the
 * workers start their PpPace again at it, and rank 0 its round); chain
 * thread. */
void     pp_mesh_pace_sending       (PpMesh * mesh, const PpChunk * chunk);
/* "expected 9800 ms (measured compute), allowed 31900 ms: max (timeout-ms
 * 10000, 3 × expected + 2500 ms)" */
gchar   *pp_mesh_describe_allowance (PpMesh * mesh, gint64 expected_us,
                                     const gchar * source);

G_END_DECLS
