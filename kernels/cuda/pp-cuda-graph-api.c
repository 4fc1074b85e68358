/* ppdiffuse — cuDNN 9's backend graph API from plain C (pp-cuda-graph-api.h). */
#include <glib.h>

#ifdef PP_HAVE_CUDNN

#include "pp-cuda-graph-api.h"
#include "pp-cuda-check.h"
#include "pp-error.h"

#include <stdbool.h>

/* Room for cudnnGetLastErrorString's text. */
#define GRAPH_MESSAGE_BYTES 1024
/* Before 9.11 an execution plan must name its handle (deprecated since,
 * when cuDNN's frontend stopped setting it). */
#define CUDNN_V9_11_0 91100

gboolean
pp_cudnn_graph_check (cudnnStatus_t status, const gchar * call,
    const gchar * file, gint line, GError ** error)
{
  gchar detail[GRAPH_MESSAGE_BYTES] = "";

  if (status == CUDNN_STATUS_SUCCESS)
    return TRUE;
  cudnnGetLastErrorString (detail, sizeof detail);
  pp_cudnn_check (status, call, file, line, error);
  if (detail[0] != '\0' && error != NULL && *error != NULL) {
    gchar *message = g_strdup_printf ("%s: %s", (*error)->message, detail);

    g_free ((*error)->message);
    (*error)->message = message;
  }
  return FALSE;
}

#define TRY(call, error) PP_CUDNN_GRAPH_TRY (call, error)

void
pp_cudnn_graph_init (PpCudnnGraph * g, int64_t first_virtual)
{
  g->descriptors = g_ptr_array_new ();
  g->ops = g_ptr_array_new ();
  g->next_uid = first_virtual;
}

GPtrArray *
pp_cudnn_graph_steal (PpCudnnGraph * g)
{
  GPtrArray *descriptors = g->descriptors;

  g_ptr_array_free (g->ops, TRUE);
  g->ops = g->descriptors = NULL;
  return descriptors;
}

void
pp_cudnn_graph_destroy_descriptors (GPtrArray * descriptors)
{
  for (guint i = descriptors->len; i > 0; i--)
    cudnnBackendDestroyDescriptor (g_ptr_array_index (descriptors, i - 1));
  g_ptr_array_free (descriptors, TRUE);
}

void
pp_cudnn_graph_release (cudnnBackendDescriptor_t plan,
    GPtrArray * descriptors)
{
  if (plan != NULL)
    cudnnBackendDestroyDescriptor (plan);
  if (descriptors != NULL)
    pp_cudnn_graph_destroy_descriptors (descriptors);
}

gboolean
pp_cudnn_graph_create (PpCudnnGraph * g, cudnnBackendDescriptorType_t type,
    cudnnBackendDescriptor_t * desc, GError ** error)
{
  *desc = NULL;
  if (!TRY (cudnnBackendCreateDescriptor (type, desc), error))
    return FALSE;
  g_ptr_array_add (g->descriptors, *desc);
  return TRUE;
}

gboolean
pp_cudnn_graph_set (cudnnBackendDescriptor_t desc,
    cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t value,
    GError ** error)
{
  return TRY (cudnnBackendSetAttribute (desc, name,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &value), error);
}

gboolean
pp_cudnn_graph_tensor (PpCudnnGraph * g, cudnnDataType_t type,
    const int64_t dims[4], const int64_t strides[4], int64_t uid,
    PpCudnnTensorKind kind, cudnnBackendDescriptor_t * t, GError ** error)
{
  const int64_t alignment = PP_CUDNN_GRAPH_ALIGNMENT;
  const bool yes = true;

  if (kind == PP_CUDNN_TENSOR_VIRTUAL)
    uid = g->next_uid++;
  return pp_cudnn_graph_create (g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, t, error)
      && TRY (cudnnBackendSetAttribute (*t, CUDNN_ATTR_TENSOR_DATA_TYPE,
          CUDNN_TYPE_DATA_TYPE, 1, &type), error)
      && TRY (cudnnBackendSetAttribute (*t, CUDNN_ATTR_TENSOR_DIMENSIONS,
          CUDNN_TYPE_INT64, 4, dims), error)
      && TRY (cudnnBackendSetAttribute (*t, CUDNN_ATTR_TENSOR_STRIDES,
          CUDNN_TYPE_INT64, 4, strides), error)
      && TRY (cudnnBackendSetAttribute (*t, CUDNN_ATTR_TENSOR_UNIQUE_ID,
          CUDNN_TYPE_INT64, 1, &uid), error)
      && TRY (cudnnBackendSetAttribute (*t,
          CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment),
      error)
      && (kind != PP_CUDNN_TENSOR_VIRTUAL
      || TRY (cudnnBackendSetAttribute (*t, CUDNN_ATTR_TENSOR_IS_VIRTUAL,
              CUDNN_TYPE_BOOLEAN, 1, &yes), error))
      && (kind != PP_CUDNN_TENSOR_BY_VALUE
      || TRY (cudnnBackendSetAttribute (*t,
              CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes),
          error))
      && TRY (cudnnBackendFinalize (*t), error);
}

gboolean
pp_cudnn_graph_pointwise (PpCudnnGraph * g, cudnnPointwiseMode_t mode,
    cudnnDataType_t math, int64_t axis, cudnnBackendDescriptor_t x,
    cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
    cudnnBackendDescriptor_t y, GError ** error)
{
  const float one = 1.0f;
  cudnnBackendDescriptor_t pw, op;

  if (!pp_cudnn_graph_create (g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, &pw,
          error)
      || !TRY (cudnnBackendSetAttribute (pw, CUDNN_ATTR_POINTWISE_MODE,
              CUDNN_TYPE_POINTWISE_MODE, 1, &mode), error)
      || !TRY (cudnnBackendSetAttribute (pw,
              CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math),
          error)
      || (axis >= 0 && !TRY (cudnnBackendSetAttribute (pw,
                  CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis),
              error))
      || !TRY (cudnnBackendFinalize (pw), error))
    return FALSE;
  if (!pp_cudnn_graph_create (g,
          CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, &op, error)
      || !pp_cudnn_graph_set (op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
          pw, error)
      || !pp_cudnn_graph_set (op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x,
          error)
      || (b != NULL && !pp_cudnn_graph_set (op,
              CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b, error))
      || (t != NULL && !pp_cudnn_graph_set (op,
              CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t, error))
      || !pp_cudnn_graph_set (op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y,
          error)
      || !TRY (cudnnBackendSetAttribute (op,
              CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1,
              &one), error)
      || !TRY (cudnnBackendSetAttribute (op,
              CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1,
              &one), error)
      || !TRY (cudnnBackendFinalize (op), error))
    return FALSE;
  g_ptr_array_add (g->ops, op);
  return TRUE;
}

/* The global index of engine configuration @config's engine, or -1 when
 * cuDNN does not say. */
static gint64
config_engine (cudnnBackendDescriptor_t config)
{
  cudnnBackendDescriptor_t engine = NULL;
  int64_t got = 0, index = -1;

  if (cudnnBackendCreateDescriptor (CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine)
      != CUDNN_STATUS_SUCCESS)
    return -1;
  if (cudnnBackendGetAttribute (config, CUDNN_ATTR_ENGINECFG_ENGINE,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &engine)
      != CUDNN_STATUS_SUCCESS
      || cudnnBackendGetAttribute (engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX,
          CUDNN_TYPE_INT64, 1, &got, &index) != CUDNN_STATUS_SUCCESS)
    index = -1;
  cudnnBackendDestroyDescriptor (engine);
  return index;
}

/* Execution plans of @configs (offered by heuristics mode @mode) that
 * finalize within @max_workspace, in order, until @max_plans; with @only
 * that configuration's alone.  FALSE with why the last one did not when
 * none does. */
static gboolean
finalize_plans (cudnnHandle_t handle, const cudnnBackendDescriptor_t *
    configs, int64_t n_configs, gint32 mode, const PpCudnnConfig * only,
    guint max_plans, gsize max_workspace, GPtrArray * plans,
    GArray * workspaces, GArray * chosen, GError ** error)
{
  const gboolean name_handle = cudnnGetVersion () < CUDNN_V9_11_0;
  const guint had = plans->len;

  g_autoptr (GError) last = NULL;

  for (int64_t i = 0; i < n_configs && plans->len - had < max_plans; i++) {
    cudnnBackendDescriptor_t p = NULL;
    int64_t bytes = 0, got = 0;
    gint64 engine;

    if (only != NULL && i != only->index)
      continue;
    g_clear_error (&last);
    /* Which engine: asked of a configuration that gave a plan, and of the
     * one named before its plan is made. */
    engine = only != NULL ? config_engine (configs[i]) : -1;
    if (only != NULL && engine != only->engine) {
      g_set_error (&last, PP_ERROR, PP_ERROR_DEVICE, "the heuristics' "
          "configuration %" G_GINT64_FORMAT " is now engine %" G_GINT64_FORMAT
          ", not %" G_GINT64_FORMAT, (gint64) i, engine, only->engine);
      break;
    }
    if (!TRY (cudnnBackendCreateDescriptor
            (CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &p), &last))
      break;
    if (pp_cudnn_graph_set (p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
            configs[i], &last)
        && (!name_handle || TRY (cudnnBackendSetAttribute (p,
                    CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1,
                    &handle), &last))
        && TRY (cudnnBackendFinalize (p), &last)
        && TRY (cudnnBackendGetAttribute (p,
                CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1,
                &got, &bytes), &last)) {
      if (bytes >= 0 && (guint64) bytes <= max_workspace) {
        const gsize size = (gsize) bytes;

        g_ptr_array_add (plans, p);
        g_array_append_val (workspaces, size);
        if (chosen != NULL) {
          const PpCudnnConfig config = { mode, (gint32) i, only != NULL
            ? engine : config_engine (configs[i])
          };

          g_array_append_val (chosen, config);
        }
        continue;
      }
      g_set_error (&last, PP_ERROR, PP_ERROR_DEVICE, "its plan wants %"
          G_GINT64_FORMAT " bytes of workspace, more than the %" G_GSIZE_FORMAT
          " allowed", (gint64) bytes, max_workspace);
    }
    cudnnBackendDestroyDescriptor (p);
  }
  if (plans->len > had)
    return TRUE;
  if (only != NULL && only->index >= n_configs)
    g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "cuDNN's heuristics "
        "now offer %" G_GINT64_FORMAT " engine configurations, and the one "
        "asked for was their number %d", (gint64) n_configs,
        only->index + 1);
  else if (only != NULL)
    g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "its engine "
        "configuration gives no plan: %s", last != NULL ? last->message
        : "no reason given");
  else
    g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "none of the %"
        G_GINT64_FORMAT " engine configurations cuDNN's heuristics offer "
        "gives a plan (the last: %s)", (gint64) n_configs,
        last != NULL ? last->message : "no reason given");
  return FALSE;
}

/* The plans of @graph that cuDNN's heuristics in @mode offer (at most
 * @max_plans), as pp_cudnn_graph_plans. */
static gboolean
plans_of_mode (cudnnHandle_t handle, PpCudnnGraph * g,
    cudnnBackendDescriptor_t graph, cudnnBackendHeurMode_t mode,
    const PpCudnnConfig * only, guint max_plans, gsize max_workspace,
    GPtrArray * plans, GArray * workspaces, GArray * chosen,
    GError ** error)
{
  cudnnBackendDescriptor_t heuristics;
  cudnnBackendDescriptor_t *configs;
  int64_t count = 0, returned = 0;
  gboolean ok;

  if (!pp_cudnn_graph_create (g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR,
          &heuristics, error)
      || !pp_cudnn_graph_set (heuristics,
          CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph, error)
      || !TRY (cudnnBackendSetAttribute (heuristics,
              CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode),
          error)
      || !TRY (cudnnBackendFinalize (heuristics), error)
      || !TRY (cudnnBackendGetAttribute (heuristics,
              CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
              &count, NULL), error))
    return FALSE;
  if (count <= 0) {
    g_set_error_literal (error, PP_ERROR, PP_ERROR_DEVICE,
        "cuDNN's heuristics offer no engine for this graph");
    return FALSE;
  }

  /* cuDNN fills engine configuration descriptors the caller created. */
  configs = g_new0 (cudnnBackendDescriptor_t, count);
  ok = TRUE;
  for (int64_t i = 0; i < count && ok; i++)
    ok = pp_cudnn_graph_create (g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR,
        &configs[i], error);
  ok = ok && TRY (cudnnBackendGetAttribute (heuristics,
          CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
          &returned, configs), error);
  /* cuDNN hands back the configurations its heuristics find for this
   * device (one may still fail to finalize: each is tried), and says why
   * it passed over others only in its log. */
  if (ok && returned <= 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "none of the %"
        G_GINT64_FORMAT " engine configurations cuDNN's heuristics found for "
        "this graph is supported here (its fused engines compile their "
        "kernels at run time: they need NVRTC, libnvrtc.so, loadable; "
        "CUDNN_LOGLEVEL_DBG=2 CUDNN_LOGDEST_DBG=stderr logs why)",
        (gint64) count);
    ok = FALSE;
  }
  ok = ok && finalize_plans (handle, configs, MIN (returned, count),
      mode == CUDNN_HEUR_MODE_A ? 0 : 1, only, max_plans, max_workspace,
      plans, workspaces, chosen, error);
  g_free (configs);
  return ok;
}

gboolean
pp_cudnn_graph_plans (cudnnHandle_t handle, PpCudnnGraph * g,
    guint max_plans, gsize max_workspace, const PpCudnnConfig * only,
    GPtrArray * plans, GArray * workspaces, GArray * configs,
    GError ** error)
{
  cudnnBackendDescriptor_t graph;
  g_autoptr (GError) first = NULL;

  if (!pp_cudnn_graph_create (g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR,
          &graph, error)
      || !TRY (cudnnBackendSetAttribute (graph,
              CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
              g->ops->len, g->ops->pdata), error)
      || !TRY (cudnnBackendSetAttribute (graph,
              CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1,
              &handle), error)
      || !TRY (cudnnBackendFinalize (graph), error))
    return FALSE;
  /* A configuration named: its mode's alone. */
  if (only != NULL)
    return plans_of_mode (handle, g, graph, only->mode == 0
        ? CUDNN_HEUR_MODE_A : CUDNN_HEUR_MODE_FALLBACK, only, 1,
        max_workspace, plans, workspaces, configs, error);
  /* The heuristics' fast mode first.  Where none of its engines gives a
   * plan (a graph whose fused engines compile at run time, with mixed
   * types or channels they do not take, say), the fallback mode's engines
   * run it: slower than the best, but one graph where the legacy API
   * would take three calls. */
  if (plans_of_mode (handle, g, graph, CUDNN_HEUR_MODE_A, NULL, max_plans,
          max_workspace, plans, workspaces, configs, &first))
    return TRUE;
  if (plans_of_mode (handle, g, graph, CUDNN_HEUR_MODE_FALLBACK, NULL,
          max_plans, max_workspace, plans, workspaces, configs, error)) {
    g_info ("cuda graph: cuDNN's heuristics (mode A) gave no plan (%s); "
        "its fallback heuristics did", first->message);
    return TRUE;
  }
  if (error != NULL && *error != NULL) {
    gchar *message = g_str_equal ((*error)->message, first->message)
        ? g_strdup_printf ("%s (the heuristics' mode A and fallback mode "
        "alike)", first->message)
        : g_strdup_printf ("%s (the heuristics' mode A; their fallback "
        "mode: %s)", first->message, (*error)->message);

    g_free ((*error)->message);
    (*error)->message = message;
  }
  return FALSE;
}

gboolean
pp_cudnn_graph_execute (cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
    int count, const int64_t * uids, void *const *pointers,
    gpointer workspace, cudnnStatus_t * status, GError ** error)
{
  cudnnBackendDescriptor_t pack = NULL;
  const gchar *call = "cudnnBackendCreateDescriptor (VARIANT_PACK)";
  cudnnStatus_t s;

  s = cudnnBackendCreateDescriptor (CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR,
      &pack);
  if (s == CUDNN_STATUS_SUCCESS) {
    call = "cudnnBackendSetAttribute (VARIANT_PACK_UNIQUE_IDS)";
    s = cudnnBackendSetAttribute (pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
        CUDNN_TYPE_INT64, count, uids);
  }
  if (s == CUDNN_STATUS_SUCCESS) {
    call = "cudnnBackendSetAttribute (VARIANT_PACK_DATA_POINTERS)";
    s = cudnnBackendSetAttribute (pack,
        CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, count,
        pointers);
  }
  if (s == CUDNN_STATUS_SUCCESS) {
    call = "cudnnBackendSetAttribute (VARIANT_PACK_WORKSPACE)";
    s = cudnnBackendSetAttribute (pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
        CUDNN_TYPE_VOID_PTR, 1, &workspace);
  }
  if (s == CUDNN_STATUS_SUCCESS) {
    call = "cudnnBackendFinalize (VARIANT_PACK)";
    s = cudnnBackendFinalize (pack);
  }
  if (s == CUDNN_STATUS_SUCCESS) {
    call = "cudnnBackendExecute";
    s = cudnnBackendExecute (handle, plan, pack);
  }
  if (pack != NULL)
    cudnnBackendDestroyDescriptor (pack);
  if (status != NULL)
    *status = s;
  return pp_cudnn_graph_check (s, call, __FILE__, __LINE__, error);
}

gboolean
pp_cudnn_graph_aligned (gconstpointer p)
{
  return (guintptr) p % PP_CUDNN_GRAPH_ALIGNMENT == 0;
}

#endif /* PP_HAVE_CUDNN */
