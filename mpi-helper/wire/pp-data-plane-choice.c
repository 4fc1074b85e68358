/* ppdiffuse — which data plane the plan names (pp-data-plane-choice.h). */
#include "pp-data-plane-choice.h"
#include "pp-error.h"
#include "pp-log.h"

/* Set once, before any mesh starts, by the test builds' NCCL emulation. */
static PpNcclEmulation emulation;

void
pp_data_plane_set_emulation (PpNcclEmulation make_api)
{
  emulation = make_api;
}

const gchar *
pp_data_plane_choose (PpBackend * backend, guint n_ranks, gboolean local,
    GError ** error)
{
  const gchar *env = g_getenv (PP_DATA_PLANE_ENV);
  const gboolean cuda = g_str_equal (pp_backend_name (backend),
      PP_BACKEND_CUDA);
  g_autoptr (GError) no_nccl = NULL;

  /* The NCCL table lives in the CUDA module: asked for only when the
   * backend is cuda, so that a CPU mesh never loads it. */
  if (env == NULL || *env == '\0' || g_str_equal (env, "auto")) {
    if (!cuda || pp_nccl_api_get (&no_nccl) == NULL)
      return PP_DATA_PLANE_MPI;
    if (local && (guint) pp_backend_cuda_devices () < n_ranks) {
      PP_INFO ("data plane mpi: %u ranks share %d GPUs of this host, and "
          "NCCL wants a device per rank", n_ranks, pp_backend_cuda_devices ());
      return PP_DATA_PLANE_MPI;
    }
    return PP_DATA_PLANE_NCCL;
  }
  if (g_str_equal (env, PP_DATA_PLANE_MPI))
    return PP_DATA_PLANE_MPI;
  if (g_str_equal (env, PP_DATA_PLANE_NCCL)) {
    if (pp_nccl_api_get (&no_nccl) == NULL) {
      g_propagate_prefixed_error (error, g_steal_pointer (&no_nccl),
          "%s=%s: ", PP_DATA_PLANE_ENV, env);
      return NULL;
    }
    if (!cuda) {
      g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "%s=%s: NCCL carries "
          "device memory of the cuda backend, not of %s", PP_DATA_PLANE_ENV,
          env, pp_backend_name (backend));
      return NULL;
    }
    return PP_DATA_PLANE_NCCL;
  }
  if (g_str_equal (env, PP_DATA_PLANE_NCCL_EMULATED)) {
    /* MPI carries the "device" memory: it must be host memory. */
    if (!g_str_equal (pp_backend_name (backend), PP_BACKEND_CPU)) {
      g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "%s=%s (a test and "
          "simulation mode) needs the cpu backend, whose device memory is "
          "host memory MPI can carry, not %s", PP_DATA_PLANE_ENV, env,
          pp_backend_name (backend));
      return NULL;
    }
    return PP_DATA_PLANE_NCCL_EMULATED;
  }
  g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "%s=%s: expected auto, %s, "
      "%s or %s", PP_DATA_PLANE_ENV, env, PP_DATA_PLANE_MPI,
      PP_DATA_PLANE_NCCL, PP_DATA_PLANE_NCCL_EMULATED);
  return NULL;
}

const PpNcclApi *
pp_data_plane_api (const gchar * data_plane, MPI_Comm world, GError ** error)
{
  if (g_strcmp0 (data_plane, PP_DATA_PLANE_NCCL_EMULATED) == 0) {
    if (emulation == NULL) {
      g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "%s=%s: this build has "
          "no NCCL emulation (it comes with the tests: meson option "
          "fault-injection)", PP_DATA_PLANE_ENV, data_plane);
      return NULL;
    }
    return emulation (world);
  }
  if (g_strcmp0 (data_plane, PP_DATA_PLANE_NCCL) == 0)
    return pp_nccl_api_get (error);
  g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "data plane %s has no NCCL "
      "table", data_plane);
  return NULL;
}
