/* ppdiffuse — pp_mesh_start: MPI, the workers, the handshake, the data
 * plane's links and the heartbeats, each from its room, under one
 * deadline (pp-mesh.h). */
#include "pp-mesh.h"
#include "pp-mesh-private.h"
#include "pp-bells.h"
#include "pp-data-plane-choice.h"
#include "pp-error.h"
#include "pp-lanes.h"
#include "pp-liveness-room.h"
#include "pp-log.h"
#include "pp-shutdown.h"
#include "pp-sigpipe.h"
#include "pp-start-room.h"

/* Rank 0's two NCCL links (to the first worker, from the last), made in
 * the order every rank makes its links, under timeout-ms and the
 * workers' liveness. */
static gboolean
connect_planes (PpMesh * mesh, GError ** error)
{
  PpWait w = { mesh->world, 0, pp_deadline_in_ms (mesh->timeout_ms),
    pp_mesh_workers_alive, mesh
  };

  if (!pp_nccl_links_connect (mesh->planes, mesh->plan, mesh->world, 0,
          mesh->backend, &w, error))
    return FALSE;
  pp_chunk_link_set_data_plane (mesh->to_first,
      pp_nccl_links_to_next (mesh->planes));
  pp_chunk_link_set_data_plane (mesh->from_last,
      pp_nccl_links_from_prev (mesh->planes));
  return TRUE;
}

/* The doorbells of the mesh's ranks on this host (pp-bells.h), hung on
 * its communicator; NULL, with a warning, when the host has no shared
 * memory for them, and with PPDIFFUSE_NO_BELLS=1 (to tell what they buy):
 * the waits then poll as on another host.  With them come the chunk
 * lanes (pp-lanes.h), unless PPDIFFUSE_LANES=0 or the payloads travel on
 * NCCL (device memory). */
static PpBells *
start_bells (PpMesh * mesh, gsize lane_slot_bytes, gchar ** name)
{
  g_autoptr (GError) error = NULL;
  gboolean lanes = !pp_plan_uses_nccl (mesh->plan)
      && g_strcmp0 (g_getenv (PP_LANES_ENV), "0") != 0;
  PpBells *bells;

  if (g_strcmp0 (g_getenv (PP_NO_BELLS_ENV), "1") == 0) {
    PP_INFO ("%s=1: no doorbells, every wait polls", PP_NO_BELLS_ENV);
    return NULL;
  }
  bells = pp_bells_create (mesh->plan->n_workers + 1,
      lanes ? lane_slot_bytes : 0, name, &error);
  if (bells == NULL) {
    PP_WARN ("no doorbells for the workers on this host (%s): their waits "
        "poll instead", error->message);
    return NULL;
  }
  pp_bells_attach (mesh->world, bells);
  return bells;
}

/* Every reply is in: who joined the lanes is final.  The workers waiting
 * for that to receive their first chunk are woken. */
static void
open_lanes (PpMesh * mesh, PpBells * bells)
{
  PpLanes *lanes = pp_bells_lanes (bells);
  const guint n_ranks = mesh->plan->n_workers + 1;

  if (lanes == NULL)
    return;
  pp_lanes_open (lanes);
  for (guint r = 1; r < n_ranks; r++)
    pp_bells_ring (bells, r);
  PP_INFO ("chunk lanes open: %u of %u links between ranks on this host "
      "carry chunks in shared memory", pp_lanes_count (lanes), n_ranks);
}

static void
handshake_progress (guint rank, PpHandshakeStage stage, guint64 loaded_bytes,
    gpointer data)
{
  const PpMeshConfig *config = data;
  PpMeshProgress mesh_stage = PP_MESH_PROGRESS_WAITING;

  switch (stage) {
    case PP_HANDSHAKE_WAITING:
      mesh_stage = PP_MESH_PROGRESS_WAITING;
      break;
    case PP_HANDSHAKE_LOADING:
      mesh_stage = PP_MESH_PROGRESS_LOADING;
      break;
    case PP_HANDSHAKE_READY:
      mesh_stage = PP_MESH_PROGRESS_RANK_READY;
      break;
  }
  config->progress (mesh_stage, rank, config->n_workers, loaded_bytes,
      config->progress_data);
}

static PpMesh *
mesh_start (const PpMeshConfig * config, GError ** error)
{
  g_autofree gchar *worker = NULL;
  g_autofree gchar *plan_text = NULL;
  g_autofree gchar *bells_name = NULL;
  g_autofree gchar *spec = NULL;
  PpHelloOptions options = { NULL };
  PpBells *bells;
  gboolean started;
  PpBackend *backend;
  const gchar *data_plane = NULL;
  gsize lane_slot_bytes;
  PpMesh *mesh;

  if (config->n_workers > PP_MESH_MAX_WORKERS) {
    g_set_error (error, PP_ERROR, PP_ERROR_CONFIG,
        "ranks=%u: at most %d workers are supported", config->n_workers,
        PP_MESH_MAX_WORKERS);
    return NULL;
  }
  if (!pp_lanes_slot_bytes_from_env (config->n_workers + 1, &lane_slot_bytes,
          error))
    return NULL;
  pp_fault_injection_check ();
  mesh = g_new0 (PpMesh, 1);
  g_mutex_init (&mesh->lock);
  mesh->timeout_ms = config->timeout_ms;
  mesh->dump_dir = config->dump_dir && *config->dump_dir
      ? g_strdup (config->dump_dir) : NULL;
  mesh->watchdog = pp_liveness_watchdog_enabled ();
  if (!mesh->watchdog)
    PP_WARN ("%s=1: the watchdog and the chunk deadlines are off (tests "
        "only)", PP_NO_WATCHDOG_ENV);
  mesh->inter = mesh->world = MPI_COMM_NULL;
  /* The backend rank 0 computes on; the plan tells every worker to use
   * it too, and the parity check holds them to it.  The plan names rank
   * 0's device ("cuda:N"), so that the workers of its host take the
   * devices after it, not rank 0's.  Rank 0 also chooses the data plane
   * the payloads travel on. */
  backend = pp_backend_get (config->backend, error);
  if (backend != NULL) {
    spec = pp_backend_spec (backend);
    data_plane = pp_data_plane_choose (backend, config->n_workers + 1,
        (config->hosts == NULL || *config->hosts == '\0')
        && (config->hostfile == NULL || *config->hostfile == '\0'), error);
  }
  mesh->plan = data_plane == NULL ? NULL : pp_plan_new_full
      (config->n_workers, config->n_steps, config->model, spec, data_plane,
      config->timeout_ms, error);
  if (mesh->plan == NULL) {
    g_mutex_clear (&mesh->lock);
    g_free (mesh->dump_dir);
    g_free (mesh);
    return NULL;
  }
  mesh->backend = backend;
  mesh->to_first = pp_chunk_link_new (0);
  /* Over NCCL the returning chunks are received into device memory. */
  mesh->from_last = pp_chunk_link_new_on (config->max_in_flight,
      pp_plan_uses_nccl (mesh->plan) ? backend : NULL);
  mesh->workers = g_new0 (PpWorkerInfo, config->n_workers);
  plan_text = pp_plan_describe (mesh->plan);
  PP_INFO ("%s", plan_text);

  if (config->progress != NULL)
    config->progress (PP_MESH_PROGRESS_SPAWNING, 0, config->n_workers, 0,
        config->progress_data);
  worker = pp_spawn_resolve_worker (config->worker_path, error);
  if (worker == NULL || !pp_mpi_start (config->timeout_ms,
          (config->hosts != NULL && *config->hosts != '\0')
          || (config->hostfile != NULL && *config->hostfile != '\0'), error)
      || !pp_spawn_workers (mesh, config, worker, error)) {
    pp_mesh_free (mesh);
    return NULL;
  }
  options.dump_dir = mesh->dump_dir;
  bells = start_bells (mesh, lane_slot_bytes, &bells_name);
  options.bells = bells_name;
  started = pp_handshake_run (mesh->world, mesh->plan, &options,
      mesh->workers, mesh->timeout_ms,
      config->progress ? handshake_progress : NULL, (gpointer) config,
      error);
  /* Every worker on this host has mapped them by its reply. */
  pp_bells_unlink (bells);
  if (!started) {
    pp_mesh_kill_workers (mesh);
    pp_mesh_free (mesh);
    return NULL;
  }
  open_lanes (mesh, bells);
  if (pp_plan_uses_nccl (mesh->plan))
    mesh->planes = pp_nccl_links_new ();
  mesh->liveness = pp_mesh_liveness_new (mesh);
  pp_liveness_start (mesh->liveness);
  if (mesh->planes != NULL && !connect_planes (mesh, error)) {
    pp_mesh_fail (mesh, *error);
    pp_mesh_stop (mesh, NULL, NULL);
    return NULL;
  }
  PP_INFO ("mesh of %u workers is up (worker %s)", config->n_workers, worker);
  return mesh;
}

PpMesh *
pp_mesh_start (const PpMeshConfig * config, GError ** error)
{
  PpSigpipeGuard guard;
  PpMesh *result;

  pp_sigpipe_block (&guard);
  result = mesh_start (config, error);
  pp_sigpipe_restore (&guard);
  return result;
}
