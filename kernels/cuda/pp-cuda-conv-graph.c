/* ppdiffuse — a 16-bit channels-last convolution and its epilogue as one
 * cuDNN operation graph (the backend API, PPDIFFUSE_CUDA_CONV_API=graph).
 *
 * In cuDNN's [n, c, h, w] terms, every tensor channels last (its strides
 * {h·w·c, 1, w·c, c}):
 *
 *   X [n, cin, h, w]         16-bit
 *   W [cout, cin, kh, kw]    16-bit, the filter's channels-last copy
 *   C = conv (X, W)          float, virtual (Y itself without an epilogue)
 *   C = C + B                B [1, cout, 1, 1]: the bias, when given
 *   C = C + Z                Z of Y's shape and type: the residual, when given
 *   Y = relu (C)             when asked
 *   Y [n, cout, ho, wo]      16-bit
 *
 * Summed in float32 and rounded once into Y, as cuDNN's fused legacy call
 * does (the order of the two additions aside).  Through the graph API
 * cuDNN's heuristics rank every engine it has for the graph, the runtime
 * fusion ones included, where the legacy API picks among eight algorithm
 * families; the first configuration that finalizes within the workspace
 * bound runs it (the same in every process), or, with
 * PPDIFFUSE_CUDA_CONV_ALGO=timed, the fastest of the first few, timed on
 * the op's own buffers when the shape is first met.  Each graph's engine
 * and the time its plans took to make are logged once at info level
 * ("cuda conv graph: …: engine N (heuristics), … planned in T ms").
 *
 * A graph cuDNN has no engine for is kept, refused, so that it is asked
 * once: the convolution then takes the legacy API (said once per graph at
 * info level, "cuda conv graph: …: unsupported: why"). */
#include "pp-cuda-conv-key.h"
#include "pp-cuda-private.h"
#include "pp-error.h"

#ifdef PP_HAVE_CUDNN

#include "pp-cuda-graph-api.h"

#include <math.h>

/* As the legacy plans': device memory belongs to the models. */
#define GRAPH_MAX_WORKSPACE ((gsize) 256 << 20)
/* Engine configurations timed at most (PPDIFFUSE_CUDA_CONV_ALGO=timed),
 * and the runs each: one to warm up, then the timed ones.  Each plan may
 * cost cuDNN a kernel compilation (its runtime-fusion engines: up to
 * half a second each, as the fused attention's plans took on the H100),
 * so a few. */
#define GRAPH_TRIALS 4
#define GRAPH_TRIAL_RUNS 3

enum
{
  UID_X = 1,
  UID_W,
  UID_Y,
  UID_B,
  UID_Z,
  UID_FIRST_VIRTUAL = 100,
};

typedef struct
{
  PpCudaConvKey conv;
  gint bias;                    /* PpCudaType of the bias, or -1: none */
  gboolean residual, relu;
} GraphKey;

typedef struct
{
  cudnnBackendDescriptor_t plan;        /* NULL: unsupported */
  gsize workspace;
  PpCudnnConfig config;         /* which of the heuristics' it is */
  GPtrArray *descriptors;       /* what the plan was made from */
  gchar *unsupported;           /* why, when plan is NULL */
  gboolean timed;               /* its engine the fastest of trials */
  gboolean kept;                /* timed by an earlier process */
  gint64 planned_us;            /* how long the planning took */
  gboolean ran;
} GraphPlan;

static guint
graph_key_hash (gconstpointer data)
{
  const GraphKey *k = data;
  guint32 h = pp_cuda_conv_key_hash (&k->conv);

  h = (h ^ (guint32) k->bias) * 16777619u;
  h = (h ^ (guint32) k->residual) * 16777619u;
  return (h ^ (guint32) k->relu) * 16777619u;
}

static gboolean
graph_key_equal (gconstpointer a, gconstpointer b)
{
  const GraphKey *x = a, *y = b;

  return pp_cuda_conv_key_equal (&x->conv, &y->conv) && x->bias == y->bias
      && x->residual == y->residual && x->relu == y->relu;
}

static void
graph_plan_free (gpointer data)
{
  GraphPlan *p = data;

  pp_cudnn_graph_release (p->plan, p->descriptors);
  g_free (p->unsupported);
  g_free (p);
}

GHashTable *
pp_cuda_conv_graphs_new (void)
{
  return g_hash_table_new_full (graph_key_hash, graph_key_equal, g_free,
      graph_plan_free);
}

static cudnnDataType_t
cudnn_type (PpCudaType t)
{
  return t == PP_CUDA_F16 ? CUDNN_DATA_HALF : t == PP_CUDA_BF16
      ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

/* @k's graph, in words. */
static gchar *
graph_describe (const GraphKey * k)
{
  g_autofree gchar *conv = pp_cuda_conv_key_describe (&k->conv);

  return g_strdup_printf ("%s%s%s%s", conv, k->bias >= 0
      ? (k->bias == PP_CUDA_F32 ? " + f32 bias" : " + bias") : "",
      k->residual ? " + residual" : "", k->relu ? ", ReLU" : "");
}

/* Dimensions and channels-last strides of an [n, c, h, w] tensor. */
static void
nhwc (int64_t n, int64_t c, int64_t h, int64_t w, int64_t dims[4],
    int64_t strides[4])
{
  dims[0] = n;
  dims[1] = c;
  dims[2] = h;
  dims[3] = w;
  strides[0] = h * w * c;
  strides[1] = 1;
  strides[2] = w * c;
  strides[3] = c;
}

static gboolean
set_int64s (cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
    int64_t count, const int64_t * values, GError ** error)
{
  return PP_CUDNN_GRAPH_TRY (cudnnBackendSetAttribute (d, name,
          CUDNN_TYPE_INT64, count, values), error);
}

/* The operations of the graph in the header comment, into g->ops. */
static gboolean
build_ops (PpCudnnGraph * g, const GraphKey * k, GError ** error)
{
  const PpCudaConvKey *c = &k->conv;
  const cudnnDataType_t io = c->dtype == PP_DTYPE_BF16
      ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  const int64_t ho = pp_conv2d_out_size (c->h, c->kh, c->stride, c->pad);
  const int64_t wo = pp_conv2d_out_size (c->w, c->kw, c->stride, c->pad);
  const int64_t spatial = 2, one[2] = { 1, 1 };
  const int64_t strides2[2] = { c->stride, c->stride };
  const int64_t pads[2] = { c->pad, c->pad };
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const float alpha = 1.0f, beta = 0.0f;
  const gboolean epilogue = k->bias >= 0 || k->residual || k->relu;
  int64_t x_dims[4], x_str[4], w_dims[4], w_str[4], y_dims[4], y_str[4];
  int64_t b_dims[4], b_str[4];
  cudnnBackendDescriptor_t x, w, y, conv, op, acc;

  nhwc (c->n, c->cin, c->h, c->w, x_dims, x_str);
  nhwc (c->cout, c->cin, c->kh, c->kw, w_dims, w_str);
  nhwc (c->n, c->cout, ho, wo, y_dims, y_str);
  nhwc (1, c->cout, 1, 1, b_dims, b_str);
  if (!pp_cudnn_graph_tensor (g, io, x_dims, x_str, UID_X,
          PP_CUDNN_TENSOR_IO, &x, error)
      || !pp_cudnn_graph_tensor (g, io, w_dims, w_str, UID_W,
          PP_CUDNN_TENSOR_IO, &w, error)
      || !pp_cudnn_graph_tensor (g, io, y_dims, y_str, UID_Y,
          PP_CUDNN_TENSOR_IO, &y, error))
    return FALSE;
  /* The convolution's sum: Y itself, or a float intermediate the epilogue
   * takes. */
  acc = y;
  if (epilogue && !pp_cudnn_graph_tensor (g, f32, y_dims, y_str, 0,
          PP_CUDNN_TENSOR_VIRTUAL, &acc, error))
    return FALSE;

  if (!pp_cudnn_graph_create (g, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &conv,
          error)
      || !PP_CUDNN_GRAPH_TRY (cudnnBackendSetAttribute (conv,
              CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1,
              &f32), error)
      || !PP_CUDNN_GRAPH_TRY (cudnnBackendSetAttribute (conv,
              CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE,
              1, &mode), error)
      || !set_int64s (conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, 1, &spatial,
          error)
      || !set_int64s (conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, 2, one, error)
      || !set_int64s (conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, 2,
          strides2, error)
      || !set_int64s (conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, 2, pads,
          error)
      || !set_int64s (conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, 2, pads,
          error)
      || !PP_CUDNN_GRAPH_TRY (cudnnBackendFinalize (conv), error))
    return FALSE;
  if (!pp_cudnn_graph_create (g,
          CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, &op, error)
      || !pp_cudnn_graph_set (op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
          x, error)
      || !pp_cudnn_graph_set (op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
          w, error)
      || !pp_cudnn_graph_set (op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
          acc, error)
      || !pp_cudnn_graph_set (op,
          CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv, error)
      || !PP_CUDNN_GRAPH_TRY (cudnnBackendSetAttribute (op,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
              CUDNN_TYPE_FLOAT, 1, &alpha), error)
      || !PP_CUDNN_GRAPH_TRY (cudnnBackendSetAttribute (op,
              CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
              CUDNN_TYPE_FLOAT, 1, &beta), error)
      || !PP_CUDNN_GRAPH_TRY (cudnnBackendFinalize (op), error))
    return FALSE;
  g_ptr_array_add (g->ops, op);

  /* The epilogue, each step into a float intermediate but the last,
   * which writes Y. */
  for (int step = 0; step < 3; step++) {
    const gboolean wanted = step == 0 ? k->bias >= 0 : step == 1
        ? k->residual : k->relu;
    const gboolean last = step == 2 || (step == 1 ? !k->relu
        : !k->residual && !k->relu);
    cudnnBackendDescriptor_t in = NULL, out;

    if (!wanted)
      continue;
    if (step == 0 && !pp_cudnn_graph_tensor (g, cudnn_type (k->bias), b_dims,
            b_str, UID_B, PP_CUDNN_TENSOR_IO, &in, error))
      return FALSE;
    if (step == 1 && !pp_cudnn_graph_tensor (g, io, y_dims, y_str, UID_Z,
            PP_CUDNN_TENSOR_IO, &in, error))
      return FALSE;
    if (last)
      out = y;
    else if (!pp_cudnn_graph_tensor (g, f32, y_dims, y_str, 0,
            PP_CUDNN_TENSOR_VIRTUAL, &out, error))
      return FALSE;
    if (!pp_cudnn_graph_pointwise (g, step == 2 ? CUDNN_POINTWISE_RELU_FWD
            : CUDNN_POINTWISE_ADD, f32, -1, acc, in, NULL, out, error))
      return FALSE;
    acc = out;
  }
  return TRUE;
}

/* One run of @plan, FALSE after an error (in @error, the failed call's
 * status in @status, which may be NULL). */
static gboolean
graph_execute (PpCudaBackend * cu, const GraphKey * k,
    cudnnBackendDescriptor_t plan, gsize workspace, gconstpointer x,
    gconstpointer w, gconstpointer bias, gconstpointer res, gpointer y,
    cudnnStatus_t * status, GError ** error)
{
  int64_t uids[5] = { UID_X, UID_W, UID_Y };
  void *pointers[5] = { (void *) x, (void *) w, y };
  int count = 3;
  gpointer space = workspace > 0 ? pp_cuda_scratch (cu,
      PP_CUDA_SCRATCH_WORKSPACE, workspace) : NULL;

  /* Halted: no work, and no refusal to remember. */
  if (pp_cuda_halted (cu))
    return TRUE;
  if (k->bias >= 0) {
    uids[count] = UID_B;
    pointers[count++] = (void *) bias;
  }
  if (k->residual) {
    uids[count] = UID_Z;
    pointers[count++] = (void *) res;
  }
  return pp_cudnn_graph_execute (cu->cudnn, plan, count, uids, pointers,
      space, status, error);
}

/* One trial run of a plan (pp_cuda_time_trial). */
typedef struct
{
  PpCudaBackend *cu;
  const GraphKey *k;
  cudnnBackendDescriptor_t plan;
  gsize workspace;
  gconstpointer x, w, bias, res;
  gpointer y;
} GraphTrial;

static gboolean
graph_trial (gpointer data)
{
  const GraphTrial *t = data;

  return graph_execute (t->cu, t->k, t->plan, t->workspace, t->x, t->w,
      t->bias, t->res, t->y, NULL, NULL);
}

/* Keeps in @p the fastest of @plans on the op's own buffers (the trials
 * write y, which the op then overwrites), destroying the others; logs
 * every trial once at info level ("cuda conv graph trials: …"). */
static void
choose_timed (PpCudaBackend * cu, const GraphKey * k, GraphPlan * p,
    GPtrArray * plans, GArray * workspaces, GArray * configs,
    gconstpointer x, gconstpointer w, gconstpointer bias, gconstpointer res,
    gpointer y)
{
  g_autoptr (GString) text = g_string_new (NULL);
  g_autofree gchar *desc = graph_describe (k);
  double best = INFINITY;
  guint chosen = 0;
  gsize need = 0;

  /* The workspace the hungriest wants, once: no trial grows it while
   * another's kernels may still read it. */
  for (guint i = 0; i < workspaces->len; i++)
    need = MAX (need, g_array_index (workspaces, gsize, i));
  if (need > 0)
    pp_cuda_scratch (cu, PP_CUDA_SCRATCH_WORKSPACE, need);
  for (guint i = 0; i < plans->len; i++) {
    GraphTrial trial = { cu, k, g_ptr_array_index (plans, i),
      g_array_index (workspaces, gsize, i), x, w, bias, res, y
    };
    const gint64 engine = g_array_index (configs, PpCudnnConfig, i).engine;
    g_autofree gchar *what = g_strdup_printf ("cuDNN's engine %"
        G_GINT64_FORMAT " of a %s (PPDIFFUSE_CUDA_CONV_ALGO=timed)", engine,
        desc);
    const double ms = pp_cuda_time_trial (cu, what, graph_trial, &trial,
        GRAPH_TRIAL_RUNS);

    g_string_append_printf (text, "%sengine %" G_GINT64_FORMAT " ",
        i > 0 ? "; " : "", engine);
    if (ms < 0.0)
      g_string_append (text, "failed");
    else
      g_string_append_printf (text, "%.3f ms, %" G_GSIZE_FORMAT " bytes", ms,
          g_array_index (workspaces, gsize, i));
    if (ms >= 0.0 && ms < best) {
      best = ms;
      chosen = i;
    }
  }
  /* Halted meanwhile, the trials chose nothing: the caller drops @p. */
  if (!pp_cuda_halted (cu))
    g_info ("%s: cuda conv graph trials: %s: %s", cu->be.device, desc,
        text->str);
  p->timed = TRUE;
  p->plan = g_ptr_array_index (plans, chosen);
  p->workspace = g_array_index (workspaces, gsize, chosen);
  p->config = g_array_index (configs, PpCudnnConfig, chosen);
  for (guint i = 0; i < plans->len; i++)
    if (i != chosen)
      cudnnBackendDestroyDescriptor (g_ptr_array_index (plans, i));
}

/* The choice an earlier process's trials made for @k (pp-cuda-tuning.h):
 * its plan alone into @plans, where the heuristics still offer it. */
static gboolean
graph_restore (PpCudaBackend * cu, const GraphKey * k, PpCudnnGraph * g,
    GPtrArray * plans, GArray * workspaces, GArray * configs)
{
  g_autofree gchar *desc = graph_describe (k);
  g_autoptr (GError) error = NULL;
  gint64 kept[3];
  PpCudnnConfig only;

  if (!pp_cuda_tuning_lookup (cu->tuning, "conv-graph", desc, kept, 3))
    return FALSE;
  only.mode = (gint32) kept[0];
  only.index = (gint32) kept[1];
  only.engine = kept[2];
  if ((only.mode != 0 && only.mode != 1) || only.index < 0
      || !pp_cudnn_graph_plans (cu->cudnn, g, 1, GRAPH_MAX_WORKSPACE, &only,
          plans, workspaces, configs, &error)) {
    g_info ("%s: cuda conv graph: %s: the engine timed before gives no plan "
        "now (%s): timed again", cu->be.device, desc, error != NULL
        ? error->message : "not a choice");
    pp_cuda_forget_error ();
    return FALSE;
  }
  return TRUE;
}

/* @k's plan, made now (outside a capture): the heuristics' first, or the
 * fastest of the first GRAPH_TRIALS when timed (not when the residual is
 * y itself, which the trials would overwrite), or when an earlier
 * process timed it, what it chose. */
static GraphPlan *
graph_plan_new (PpCudaBackend * cu, const GraphKey * k, gconstpointer x,
    gconstpointer w, gconstpointer bias, gconstpointer res, gpointer y)
{
  const gboolean timed = cu->conv_timed && res != y;
  g_autoptr (GError) error = NULL;
  g_autoptr (GPtrArray) plans = g_ptr_array_new ();
  g_autoptr (GArray) workspaces = g_array_new (FALSE, FALSE, sizeof (gsize));
  g_autoptr (GArray) configs = g_array_new (FALSE, FALSE,
      sizeof (PpCudnnConfig));
  g_autofree gchar *desc = graph_describe (k);
  GraphPlan *p = g_new0 (GraphPlan, 1);
  const gint64 start = g_get_monotonic_time ();
  GPtrArray *descriptors;
  PpCudnnGraph g;

  pp_cudnn_graph_init (&g, UID_FIRST_VIRTUAL);
  if (build_ops (&g, k, &error)) {
    if (timed && cu->tuning != NULL
        && graph_restore (cu, k, &g, plans, workspaces, configs)) {
      p->timed = p->kept = TRUE;
      p->plan = g_ptr_array_index (plans, 0);
      p->workspace = g_array_index (workspaces, gsize, 0);
      p->config = g_array_index (configs, PpCudnnConfig, 0);
    } else if (pp_cudnn_graph_plans (cu->cudnn, &g, timed ? GRAPH_TRIALS : 1,
            GRAPH_MAX_WORKSPACE, NULL, plans, workspaces, configs, &error)) {
      if (timed && plans->len > 1) {
        choose_timed (cu, k, p, plans, workspaces, configs, x, w, bias, res,
            y);
        if (cu->tuning != NULL && !pp_cuda_halted (cu)) {
          const gint64 kept[3] = { p->config.mode, p->config.index,
            p->config.engine
          };

          pp_cuda_tuning_store (cu->tuning, "conv-graph", desc, kept, 3);
        }
      } else {
        p->plan = g_ptr_array_index (plans, 0);
        p->workspace = g_array_index (workspaces, gsize, 0);
        p->config = g_array_index (configs, PpCudnnConfig, 0);
      }
    }
  }
  descriptors = pp_cudnn_graph_steal (&g);
  if (p->plan == NULL) {
    pp_cudnn_graph_destroy_descriptors (descriptors);
    p->unsupported = g_strdup_printf ("%s: unsupported: %s", desc,
        error != NULL ? error->message : "no reason given");
    /* Planning may leave a runtime error behind (an engine's kernel that
     * failed to load), which is not the next kernel's. */
    pp_cuda_forget_error ();
    return p;
  }
  p->descriptors = descriptors;
  p->planned_us = g_get_monotonic_time () - start;
  return p;
}

/* Says at info level what @p, @k's plan, keeps: its engine, or why there
 * is none ("cuda conv graph: …"); once, when it is kept. */
static void
graph_plan_log (PpCudaBackend * cu, const GraphKey * k, const GraphPlan * p)
{
  g_autofree gchar *desc = NULL, *how = NULL;

  if (p->plan == NULL) {
    g_info ("%s: cuda conv graph: %s", cu->be.device, p->unsupported);
    return;
  }
  desc = graph_describe (k);
  how = p->kept ? g_strconcat ("timed before, kept in ",
      pp_cuda_tuning_folder (cu->tuning), NULL)
      : g_strdup (p->timed ? "timed" : "heuristics");
  g_info ("%s: cuda conv graph: %s: engine %" G_GINT64_FORMAT " (%s), %"
      G_GSIZE_FORMAT " bytes of workspace, planned in %.0f ms",
      cu->be.device, desc, p->config.engine, how, p->workspace,
      p->planned_us / 1e3);
}

gboolean
pp_cuda_conv_graph_run (PpCudaBackend * cu, const PpCudaConvKey * key,
    gconstpointer x, gconstpointer w, gconstpointer bias, PpCudaType btype,
    gconstpointer res, gboolean relu, gpointer y)
{
  const GraphKey k = { *key, bias != NULL ? (gint) btype : -1, res != NULL,
    relu
  };
  GraphPlan *p;
  GError *error = NULL;
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;

  g_return_val_if_fail (key->nhwc && key->dtype != PP_DTYPE_F32, FALSE);

  /* Every tensor declares 16-byte alignment. */
  if (!pp_cudnn_graph_aligned (x) || !pp_cudnn_graph_aligned (w)
      || !pp_cudnn_graph_aligned (y)
      || (bias != NULL && !pp_cudnn_graph_aligned (bias))
      || (res != NULL && !pp_cudnn_graph_aligned (res)))
    return FALSE;
  p = g_hash_table_lookup (cu->conv_graphs, &k);
  /* Halted: nothing runs, and no plan is made (its engine would be timed
   * on missing buffers). */
  if (p == NULL && pp_cuda_halted (cu))
    return TRUE;
  if (p == NULL) {
    if (pp_cuda_capturing_here (cu)) {
      if (cu->capture_error == NULL) {
        g_autofree gchar *desc = graph_describe (&k);

        g_set_error (&cu->capture_error, PP_ERROR, PP_ERROR_DEVICE,
            "%s: a %s convolution graph first met inside a CUDA graph "
            "capture (its plan is made by a run without a graph)",
            cu->be.device, desc);
      }
      return TRUE;
    }
    p = graph_plan_new (cu, &k, x, w, bias, res, y);
    /* Halted meanwhile (the trials' workspace did not fit): an engine
     * chosen on trials that did not run is not kept. */
    if (pp_cuda_halted (cu)) {
      graph_plan_free (p);
      return TRUE;
    }
    g_hash_table_insert (cu->conv_graphs, g_memdup2 (&k, sizeof k), p);
    graph_plan_log (cu, &k, p);
  }
  if (p->plan == NULL)
    return FALSE;
  if (graph_execute (cu, &k, p->plan, p->workspace, x, w, bias, res, y,
          &status, &error)) {
    p->ran = TRUE;
    return TRUE;
  }
  /* A plan cuDNN made but will not run (not supported, a parameter it
   * refuses, an execution it could not start), at its first run outside a
   * capture: nothing was written, and the legacy API takes the graph from
   * now on, as the legacy calls' refusals are answered.  Elsewhere, or
   * another status (an internal error, a device's fault), the failure is
   * the op's. */
  if (p->ran || pp_cuda_capturing_here (cu)
      || !pp_cudnn_refused (status)) {
    g_autofree gchar *desc = graph_describe (&k);

    g_prefix_error (&error, "%s: ", desc);
    pp_cuda_op_error (cu, error);
    return TRUE;
  }
  pp_cuda_forget_error ();
  {
    g_autofree gchar *desc = graph_describe (&k);

    p->unsupported = g_strdup_printf ("%s: unsupported: its plan did not "
        "run: %s", desc, error->message);
    g_message ("%s: cuda conv graph: %s: the legacy API runs it",
        cu->be.device, p->unsupported);
  }
  g_error_free (error);
  /* Never run, so never captured into a graph either. */
  cudnnBackendDestroyDescriptor (p->plan);
  p->plan = NULL;
  return FALSE;
}

#endif /* PP_HAVE_CUDNN */
