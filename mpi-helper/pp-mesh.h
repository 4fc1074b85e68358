/* ppdiffuse — the worker mesh as rank 0 sees it.  This is the one mesh
 * header the GStreamer element uses; it carries no MPI types.  (The model
 * interface for the image phases rank 0 runs itself is pp-model.h.)
 *
 * Thread use: pp_mesh_submit and pp_mesh_warm_up from one thread (the
 * chain) and pp_mesh_collect from another (the collector) may run at the
 * same time; start and stop run alone.  Those that reach MPI (start,
 * submit, warm-up, collect, stop) block SIGPIPE in the calling thread for
 * their length, whichever thread that is (pp-sigpipe.h).
 *
 * Its types (the configuration, the statistics, the pace) are in
 * pp-mesh-types.h, which it includes: the rooms below rank 0's façade
 * use them without reaching up to it. */
#pragma once

#include "pp-mesh-types.h"

G_BEGIN_DECLS

const gchar *pp_mesh_installed_worker (void);
/* Initialises MPI if needed, spawns the workers and runs the handshake
 * (with the parity check), all within timeout_ms; then keeps heartbeats
 * with the workers until pp_mesh_stop. */
PpMesh       *pp_mesh_start   (const PpMeshConfig * config, GError ** error);
const PpPlan *pp_mesh_plan    (PpMesh * mesh);
/* Where chunk payloads live: the backend whose device memory the chunks
 * submitted must carry (and the chunks collected carry) when the plan's
 * data plane is NCCL; NULL when they are host tensors (MPI). */
struct _PpBackend *pp_mesh_data_plane_backend (PpMesh * mesh);
/* Called by pp_mesh_submit, in the submitting thread, with the chunk_id
 * the mesh assigned to the chunk, before any of it is sent: the caller can
 * file the id where the returning chunk will be matched, knowing that the
 * chunk cannot come back first. */
typedef void (*PpMeshAssignedFunc) (guint64 chunk_id, gpointer user_data);
/* Stamps plan_id and the schedule on @chunk, assigns it the next chunk_id
 * (ids are the mesh's: consecutive from 0 in the order chunks are sent,
 * warm-up passes included), tells @assigned (may be NULL) and sends it to
 * the first worker; takes ownership of @chunk.  @assigned is not called
 * when the mesh had already failed. */
gboolean      pp_mesh_submit  (PpMesh * mesh, PpChunk * chunk,
                               PpMeshAssignedFunc assigned,
                               gpointer user_data, GError ** error);
/* What the next pp_mesh_submit will send, told before the collector may
 * wait for it (its deadline is set when the wait starts): a chunk of
 * another size than the last one sent is new work, which gets the
 * allowance of unmeasured work, not what the old size measured
 * (docs/operator/liveness-and-faults.md, "Slow is not dead").
 * pp_mesh_submit tells it again; chain thread. */
void          pp_mesh_before_submit (PpMesh * mesh, const PpChunk * chunk);
/* The warm-up pass: sends @chunk (taken) flagged PP_CHUNK_FLAG_WARMUP
 * round the mesh and waits for it to come back, in lockstep, before any
 * frame is in flight (chain thread, nothing outstanding).  Left out of
 * every statistic. */
gboolean      pp_mesh_warm_up (PpMesh * mesh, PpChunk * chunk,
                               GError ** error);
/* Warm-up passes the mesh's backend wants before the first frame: 0 on
 * the CPU backends, whose set-up is a few allocations; on a GPU
 * (PP_MESH_DEVICE_WARM_UPS), the first pass pays the set-up (kernel
 * plans, pools, scratch, caches) and the second measures a steady frame,
 * which is what the pace is judged on. */
#define PP_MESH_DEVICE_WARM_UPS 2
guint         pp_mesh_warm_ups_wanted (PpMesh * mesh);
/* Waits for the next chunk back from the last worker and validates it:
 * up to what a round of the mesh is allowed (pp-allowance.h: timeout-ms, or
 * PP_ALLOWANCE_FACTOR × the measured round when that is longer). */
PpChunk      *pp_mesh_collect (PpMesh * mesh, GError ** error);
/* Each worker's cumulative busy time (seconds computing stream chunks)
 * as its last heartbeat told it, plus the compute it was in then, up to
 * now: as fresh as the heartbeats (every timeout-ms / 4).  Fills at most
 * @n entries of @busy_s, index = world rank - 1, and returns how many
 * workers there are.  Any thread, while the mesh runs. */
guint         pp_mesh_worker_busy (PpMesh * mesh, gdouble * busy_s,
                                   guint n);
/* What a worker's last heartbeat counted. */
typedef struct
{
  guint64 cache_builds;         /* pp_model_cache_builds: the UNet's
                                 * cross-attention K/V cache */
  guint64 stream_bytes;         /* pp_model_stream_bytes: the temporal
                                 * feature bank */
  guint64 batched_steps;        /* frame-steps run in stream-batch passes
                                 * of two frames or more */
  guint64 cpu_us;               /* the worker process's CPU time */
  guint64 seq;                  /* the heartbeat's sequence number */
  gint64 heard_us;              /* when it came (g_get_monotonic_time) */
} PpWorkerCounts;

/* Each worker's counts as its last heartbeat told them.  Fills at most @n
 * entries of @counts, index = world rank - 1, and returns how many workers
 * there are.  Any thread, while the mesh runs. */
guint         pp_mesh_worker_counts (PpMesh * mesh, PpWorkerCounts * counts,
                                   guint n);
/* Each worker's backend, device, host CPU and host as its handshake said
 * them ("cuda: cuda:1 NVIDIA H200, sm_90, … (cpu: …) on HOST"), index =
 * world rank - 1; NULL-terminated, free it.  Any thread, while the mesh
 * runs. */
gchar       **pp_mesh_worker_devices (PpMesh * mesh);
/* Any thread, while the mesh runs. */
void          pp_mesh_pace    (PpMesh * mesh, PpMeshPace * pace);
/* FALSE, with the mesh's first failure in @error, once the mesh has failed:
 * a worker died or went silent, also while no chunk was in flight (the
 * heartbeats go on while the mesh is idle).  Any thread. */
gboolean      pp_mesh_is_healthy (PpMesh * mesh, GError ** error);
/* Shuts the workers down (after an error: kills them) and frees the mesh.
 * Chunks still in flight are discarded.  @stats may be NULL. */
gboolean      pp_mesh_stop    (PpMesh * mesh, PpMeshStats * stats,
                               GError ** error);

G_END_DECLS
