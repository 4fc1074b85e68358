/* ppdiffuse — cuDNN's fused flash attention from plain C: the operation
 * graph cuDNN's frontend lowers an inference SDPA node to (its composite
 * form: matmuls, pointwise ops and reductions), made with the backend
 * API, one execution plan per shape.
 *
 * In cuDNN's [b, h, s, d] terms (b = n, h = heads, s_q = lq, s_kv = lk,
 * d = head_dim, W = h·d the row stride of the output, Lq and Lkv the row
 * strides of q and of k and v: W, or more where they are column ranges of
 * a wider product, a stacked q, k, v read in place):
 *
 *   Q  [b,h,s_q,d]   strides {s_q·Lq, d, Lq, 1}     16-bit
 *   Kᵀ [b,h,d,s_kv]  strides {s_kv·Lkv, d, 1, Lkv}  16-bit (k read transposed)
 *   V  [b,h,s_kv,d]  strides {s_kv·Lkv, d, Lkv, 1}  16-bit
 *   O  [b,h,s_q,d]   strides {s_q·W, d, W, 1}       16-bit
 *
 *   S = Q·Kᵀ                      [b,h,s_q,s_kv]    float, virtual
 *   S = S · scale                 scale: float by value, [1,1,1,1]
 *   causal only:
 *     r = row index of S, c = column index          int32, virtual
 *     S = r ≥ c ? S : mask        mask: float by value (−∞)
 *   M = max of S along s_kv       [b,h,s_q,1]       float, virtual
 *   E = exp (S − M)
 *   Z = sum of E along s_kv       [b,h,s_q,1]
 *   L = M + log Z                 [b,h,s_q,1]       (unused)
 *   P = E / Z                     [b,h,s_q,s_kv]    16-bit, virtual
 *   O = P·V
 *
 * L, the log-sum-exp a training graph saves, is used by nothing, but the
 * frontend always builds the softmax with it and cuDNN's attention engines
 * only recognise the graph that has it (without it cuDNN 9.19 does not
 * take the graph for attention).  Every computation is float32 (the
 * matmuls', the reductions', the pointwise ops'), but the row/column
 * comparison's, which is boolean. */
#include <glib.h>

#ifdef PP_HAVE_CUDNN

#include "pp-cuda-sdpa.h"
#include "pp-cuda-check.h"
#include "pp-cuda-graph-api.h"
#include "pp-error.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

/* The caller's pointers and the heads' column offsets (head_dim a multiple
 * of SDPA_HEAD_DIM_MULTIPLE 16-bit elements) are on the alignment every
 * tensor declares (PP_CUDNN_GRAPH_ALIGNMENT). */
#define SDPA_ALIGNMENT PP_CUDNN_GRAPH_ALIGNMENT
#define SDPA_HEAD_DIM_MULTIPLE 8

/* The largest head cuDNN's support matrix lists for its fused attention
 * (9.x, forward, Ampere and Hopper).  Its heuristics may still offer
 * engines for larger ones (the SD VAE's one head of 512), whose results
 * it does not document: those take the 16-bit GEMMs. */
#define SDPA_HEAD_DIM_MAX 256
/* An engine configuration whose plan needs more workspace than this is
 * passed over, as for convolutions: device memory belongs to the models. */
#define SDPA_MAX_WORKSPACE ((gsize) 256 << 20)
/* A plan that takes this long to make is logged (µs). */
#define SDPA_PLAN_SLOW_US 20000

/* cudnnGetVersion values the graph depends on. */
#define CUDNN_V9 90000
/* From 9.10 the mask writes −∞; before, the lowest float. */
#define CUDNN_V9_10_0 91000
/* 9.10.0 and 9.10.1 compute this graph wrongly (cuDNN's frontend refuses
 * them); 9.10.2 fixed it. */
#define CUDNN_V9_10_1 91001

/* The UIDs of the tensors the variant pack names; the intermediates, which
 * cuDNN also wants unique, are numbered from UID_FIRST_VIRTUAL. */
enum
{
  UID_Q = 1,
  UID_K,
  UID_V,
  UID_O,
  UID_SCALE,
  UID_MASK,
  UID_FIRST_VIRTUAL = 100,
};

#define SDPA_TRY(call, error) PP_CUDNN_GRAPH_TRY (call, error)

typedef struct
{
  gint n, lq, lk, heads, head_dim;
  PpCudaType type;
  gboolean causal;              /* 0 or 1 */
  gint ld_q, ld_kv;             /* q's and k's and v's row strides */
} SdpaKey;

typedef struct
{
  cudnnBackendDescriptor_t plan;        /* NULL: unsupported */
  gsize workspace;
  /* Everything the plan was built from (tensors, operations, graph,
   * engine configurations), in creation order: kept while the plan lives
   * rather than relying on cuDNN having copied what it needs. */
  GPtrArray *descriptors;
  gchar *unsupported;           /* why, when plan is NULL or refused */
  /* Made, then failed to run: kept (work enqueued before, and graphs
   * captured with it, may still run its kernels) but not run again. */
  gboolean refused;
} SdpaPlan;

/* The key's fields one by one, not its bytes: padding is not hashed. */
static gint
key_field (const SdpaKey * k, guint i)
{
  const gint fields[] = { k->n, k->lq, k->lk, k->heads, k->head_dim,
    (gint) k->type, k->causal, k->ld_q, k->ld_kv
  };

  return fields[i];
}

#define KEY_FIELDS 9

static SdpaKey
sdpa_key (PpCudaType t, int n, int lq, int lk, int heads, int head_dim,
    gboolean causal, int ld_q, int ld_kv)
{
  const SdpaKey key = { n, lq, lk, heads, head_dim, t, causal ? 1 : 0, ld_q,
    ld_kv
  };

  return key;
}

static guint
sdpa_key_hash (gconstpointer key)
{
  /* FNV-1a over the fields' values. */
  guint32 h = 2166136261u;

  for (guint i = 0; i < KEY_FIELDS; i++) {
    h ^= (guint32) key_field (key, i);
    h *= 16777619u;
  }
  return h;
}

static gboolean
sdpa_key_equal (gconstpointer a, gconstpointer b)
{
  for (guint i = 0; i < KEY_FIELDS; i++)
    if (key_field (a, i) != key_field (b, i))
      return FALSE;
  return TRUE;
}

static const gchar *
type_name (PpCudaType t)
{
  switch (t) {
    case PP_CUDA_F16:
      return "f16";
    case PP_CUDA_BF16:
      return "bf16";
    default:
      return "f32";
  }
}

static gchar *
key_describe (const SdpaKey * k)
{
  const gint width = k->heads * k->head_dim;
  g_autofree gchar *rows = k->ld_q == width && k->ld_kv == width
      ? g_strdup ("") : g_strdup_printf (", rows of q %d and of k, v %d "
      "values apart", k->ld_q, k->ld_kv);

  return g_strdup_printf ("cuDNN flash attention (%d×%d queries, %d keys, "
      "%d heads of %d, %s%s%s)", k->n, k->lq, k->lk, k->heads, k->head_dim,
      type_name (k->type), k->causal ? ", causal" : "", rows);
}

static void
sdpa_plan_free (gpointer data)
{
  SdpaPlan *p = data;

  pp_cudnn_graph_release (p->plan, p->descriptors);
  g_free (p->unsupported);
  g_free (p);
}

GHashTable *
pp_cuda_sdpa_plans_new (void)
{
  return g_hash_table_new_full (sdpa_key_hash, sdpa_key_equal, g_free,
      sdpa_plan_free);
}

/* y = @reduce of x over the dimensions where y has extent 1, in float32. */
static gboolean
reduction (PpCudnnGraph * b, cudnnReduceTensorOp_t reduce,
    cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y, GError ** error)
{
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t desc, op;

  if (!pp_cudnn_graph_create (b, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, &desc, error)
      || !SDPA_TRY (cudnnBackendSetAttribute (desc,
              CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1,
              &compute), error)
      || !SDPA_TRY (cudnnBackendSetAttribute (desc,
              CUDNN_ATTR_REDUCTION_OPERATOR,
              CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce), error)
      || !SDPA_TRY (cudnnBackendFinalize (desc), error)
      || !pp_cudnn_graph_create (b, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, &op, error)
      || !pp_cudnn_graph_set (op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, desc,
          error)
      || !pp_cudnn_graph_set (op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x, error)
      || !pp_cudnn_graph_set (op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y, error)
      || !SDPA_TRY (cudnnBackendFinalize (op), error))
    return FALSE;
  g_ptr_array_add (b->ops, op);
  return TRUE;
}

/* c = a·m (batched over the first two dimensions), accumulating in
 * float32. */
static gboolean
matmul (PpCudnnGraph * b, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t m,
    cudnnBackendDescriptor_t c, GError ** error)
{
  const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t desc, op;

  if (!pp_cudnn_graph_create (b, CUDNN_BACKEND_MATMUL_DESCRIPTOR, &desc, error)
      || !SDPA_TRY (cudnnBackendSetAttribute (desc,
              CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1,
              &compute), error)
      || !SDPA_TRY (cudnnBackendFinalize (desc), error)
      || !pp_cudnn_graph_create (b, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, &op, error)
      || !pp_cudnn_graph_set (op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a, error)
      || !pp_cudnn_graph_set (op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, m, error)
      || !pp_cudnn_graph_set (op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c, error)
      || !pp_cudnn_graph_set (op, CUDNN_ATTR_OPERATION_MATMUL_DESC, desc, error)
      || !SDPA_TRY (cudnnBackendFinalize (op), error))
    return FALSE;
  g_ptr_array_add (b->ops, op);
  return TRUE;
}

/* scores = scores where the key is not after the query, else the mask
 * value: the frontend's top-left causal mask (a diagonal band with right
 * bound 0), as index generation, a comparison and a select. */
static gboolean
causal_mask (PpCudnnGraph * b, cudnnBackendDescriptor_t scores,
    const int64_t s_dims[4], const int64_t s_strides[4],
    cudnnBackendDescriptor_t mask_value, cudnnBackendDescriptor_t * masked,
    GError ** error)
{
  /* The axes of the query (row) and key (column) indices in [b,h,s_q,s_kv]. */
  const int64_t row_axis = 2, col_axis = 3;
  cudnnBackendDescriptor_t row, col, keep;

  return pp_cudnn_graph_tensor (b, CUDNN_DATA_INT32, s_dims, s_strides, 0, PP_CUDNN_TENSOR_VIRTUAL,
      &row, error)
      && pp_cudnn_graph_tensor (b, CUDNN_DATA_INT32, s_dims, s_strides, 0, PP_CUDNN_TENSOR_VIRTUAL,
      &col, error)
      && pp_cudnn_graph_tensor (b, CUDNN_DATA_BOOLEAN, s_dims, s_strides, 0, PP_CUDNN_TENSOR_VIRTUAL,
      &keep, error)
      && pp_cudnn_graph_tensor (b, CUDNN_DATA_FLOAT, s_dims, s_strides, 0, PP_CUDNN_TENSOR_VIRTUAL,
      masked, error)
      && pp_cudnn_graph_pointwise (b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, row_axis,
      scores, NULL, NULL, row, error)
      && pp_cudnn_graph_pointwise (b, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_FLOAT, col_axis,
      scores, NULL, NULL, col, error)
      && pp_cudnn_graph_pointwise (b, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, -1, row,
      col, NULL, keep, error)
      /* BINARY_SELECT: y = t ? x : b. */
      && pp_cudnn_graph_pointwise (b, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, -1,
      scores, mask_value, keep, *masked, error);
}

/* The operations of the graph in the header comment, into b->ops. */
static gboolean
build_ops (PpCudnnGraph * b, const SdpaKey * k, cudnnDataType_t io,
    GError ** error)
{
  const int64_t n = k->n, h = k->heads, sq = k->lq, skv = k->lk;
  const int64_t d = k->head_dim, w = h * d;
  const int64_t lq = k->ld_q, lkv = k->ld_kv;
  const int64_t q_dims[4] = { n, h, sq, d };
  const int64_t q_strides[4] = { sq * lq, d, lq, 1 };
  const int64_t o_strides[4] = { sq * w, d, w, 1 };
  const int64_t kt_dims[4] = { n, h, d, skv };
  const int64_t kt_strides[4] = { skv * lkv, d, 1, lkv };
  const int64_t v_dims[4] = { n, h, skv, d };
  const int64_t v_strides[4] = { skv * lkv, d, lkv, 1 };
  const int64_t s_dims[4] = { n, h, sq, skv };
  const int64_t s_strides[4] = { h * sq * skv, sq * skv, skv, 1 };
  const int64_t row_dims[4] = { n, h, sq, 1 };
  const int64_t row_strides[4] = { h * sq, sq, 1, 1 };
  const int64_t scalar[4] = { 1, 1, 1, 1 };
  const cudnnDataType_t f32 = CUDNN_DATA_FLOAT;
  cudnnBackendDescriptor_t q, kt, v, o, scale, mask = NULL;
  cudnnBackendDescriptor_t s, scaled, logits, max, centred, e, sum, log_sum;
  cudnnBackendDescriptor_t lse, p;

  if (!pp_cudnn_graph_tensor (b, io, q_dims, q_strides, UID_Q, PP_CUDNN_TENSOR_IO, &q, error)
      || !pp_cudnn_graph_tensor (b, io, kt_dims, kt_strides, UID_K, PP_CUDNN_TENSOR_IO, &kt, error)
      || !pp_cudnn_graph_tensor (b, io, v_dims, v_strides, UID_V, PP_CUDNN_TENSOR_IO, &v, error)
      || !pp_cudnn_graph_tensor (b, io, q_dims, o_strides, UID_O, PP_CUDNN_TENSOR_IO, &o, error)
      || !pp_cudnn_graph_tensor (b, f32, scalar, scalar, UID_SCALE, PP_CUDNN_TENSOR_BY_VALUE, &scale,
          error)
      || (k->causal && !pp_cudnn_graph_tensor (b, f32, scalar, scalar, UID_MASK,
              PP_CUDNN_TENSOR_BY_VALUE, &mask, error)))
    return FALSE;

  if (!pp_cudnn_graph_tensor (b, f32, s_dims, s_strides, 0, PP_CUDNN_TENSOR_VIRTUAL, &s, error)
      || !pp_cudnn_graph_tensor (b, f32, s_dims, s_strides, 0, PP_CUDNN_TENSOR_VIRTUAL, &scaled,
          error)
      || !matmul (b, q, kt, s, error)
      || !pp_cudnn_graph_pointwise (b, CUDNN_POINTWISE_MUL, f32, -1, s, scale, NULL, scaled,
          error))
    return FALSE;
  if (!k->causal)
    logits = scaled;
  else if (!causal_mask (b, scaled, s_dims, s_strides, mask, &logits, error))
    return FALSE;

  /* The softmax along s_kv, with the log-sum-exp branch. */
  return pp_cudnn_graph_tensor (b, f32, row_dims, row_strides, 0, PP_CUDNN_TENSOR_VIRTUAL, &max,
      error)
      && pp_cudnn_graph_tensor (b, f32, s_dims, s_strides, 0, PP_CUDNN_TENSOR_VIRTUAL, &centred,
      error)
      && pp_cudnn_graph_tensor (b, f32, s_dims, s_strides, 0, PP_CUDNN_TENSOR_VIRTUAL, &e, error)
      && pp_cudnn_graph_tensor (b, f32, row_dims, row_strides, 0, PP_CUDNN_TENSOR_VIRTUAL, &sum,
      error)
      && pp_cudnn_graph_tensor (b, f32, row_dims, row_strides, 0, PP_CUDNN_TENSOR_VIRTUAL, &log_sum,
      error)
      && pp_cudnn_graph_tensor (b, f32, row_dims, row_strides, 0, PP_CUDNN_TENSOR_VIRTUAL, &lse,
      error)
      /* P is in the inputs' type: the second matmul's A is 16-bit. */
      && pp_cudnn_graph_tensor (b, io, s_dims, s_strides, 0, PP_CUDNN_TENSOR_VIRTUAL, &p, error)
      && reduction (b, CUDNN_REDUCE_TENSOR_MAX, logits, max, error)
      && pp_cudnn_graph_pointwise (b, CUDNN_POINTWISE_SUB, f32, -1, logits, max, NULL,
      centred, error)
      && pp_cudnn_graph_pointwise (b, CUDNN_POINTWISE_EXP, f32, -1, centred, NULL, NULL, e,
      error)
      && reduction (b, CUDNN_REDUCE_TENSOR_ADD, e, sum, error)
      && pp_cudnn_graph_pointwise (b, CUDNN_POINTWISE_LOG, f32, -1, sum, NULL, NULL, log_sum,
      error)
      && pp_cudnn_graph_pointwise (b, CUDNN_POINTWISE_ADD, f32, -1, max, log_sum, NULL, lse,
      error)
      && pp_cudnn_graph_pointwise (b, CUDNN_POINTWISE_DIV, f32, -1, e, sum, NULL, p, error)
      && matmul (b, p, v, o, error);
}

/* Why cuDNN is not asked at all, or NULL. */
static const gchar *
refusal (const SdpaKey * k)
{
  const size_t version = cudnnGetVersion ();

  if (k->head_dim % SDPA_HEAD_DIM_MULTIPLE != 0)
    return "head_dim is not a multiple of "
        G_STRINGIFY (SDPA_HEAD_DIM_MULTIPLE);
  if (k->ld_q % SDPA_HEAD_DIM_MULTIPLE != 0
      || k->ld_kv % SDPA_HEAD_DIM_MULTIPLE != 0)
    return "a row stride is not a multiple of "
        G_STRINGIFY (SDPA_HEAD_DIM_MULTIPLE);
  if (k->head_dim > SDPA_HEAD_DIM_MAX)
    return "head_dim is over " G_STRINGIFY (SDPA_HEAD_DIM_MAX)
        ", the largest cuDNN documents its fused attention for";
  if (version < CUDNN_V9)
    return "needs cuDNN 9 or later";
  if (version == CUDNN_V9_10_0 || version == CUDNN_V9_10_1)
    return "cuDNN 9.10.0 and 9.10.1 compute this graph wrongly; "
        "use 9.10.2 or later";
  return NULL;
}

static SdpaPlan *
sdpa_plan_new (cudnnHandle_t handle, const SdpaKey * k)
{
  const cudnnDataType_t io = k->type == PP_CUDA_BF16 ? CUDNN_DATA_BFLOAT16
      : CUDNN_DATA_HALF;
  const gchar *refused = refusal (k);
  g_autoptr (GError) error = NULL;
  SdpaPlan *plan = g_new0 (SdpaPlan, 1);
  PpCudnnGraph b;
  g_autoptr (GPtrArray) plans = g_ptr_array_new ();
  g_autoptr (GArray) workspaces = g_array_new (FALSE, FALSE, sizeof (gsize));
  g_autofree gchar *shape = key_describe (k);
  const gint64 start = g_get_monotonic_time ();
  GPtrArray *descriptors;
  gint64 took;

  pp_cudnn_graph_init (&b, UID_FIRST_VIRTUAL);
  if (refused != NULL)
    g_set_error_literal (&error, PP_ERROR, PP_ERROR_DEVICE, refused);
  else if (build_ops (&b, k, io, &error)
      && pp_cudnn_graph_plans (handle, &b, 1, SDPA_MAX_WORKSPACE, NULL,
          plans, workspaces, NULL, &error)) {
    plan->plan = g_ptr_array_index (plans, 0);
    plan->workspace = g_array_index (workspaces, gsize, 0);
  }
  descriptors = pp_cudnn_graph_steal (&b);
  took = g_get_monotonic_time () - start;
  /* A shape's first plan may compile cuDNN's kernels: said when slow. */
  if (took >= SDPA_PLAN_SLOW_US)
    g_info ("cuda attention: %s: the plan took %.0f ms", shape, took / 1e3);
  if (plan->plan != NULL) {
    plan->descriptors = descriptors;
    g_debug ("cuda attention: %s: planned, %" G_GSIZE_FORMAT " bytes of "
        "workspace", shape, plan->workspace);
  } else {
    pp_cudnn_graph_destroy_descriptors (descriptors);
    plan->unsupported = g_strdup_printf ("%s: unsupported: %s", shape,
        error != NULL ? error->message : "no reason given");
    /* Once per shape: the plan is kept, unsupported. */
    g_info ("cuda attention: %s", plan->unsupported);
  }
  return plan;
}

static gboolean
check_arguments (const SdpaKey * k, GError ** error)
{
  if (k->n <= 0 || k->lq <= 0 || k->lk <= 0 || k->heads <= 0
      || k->head_dim <= 0) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE, "cuDNN flash attention: "
        "%d×%d queries, %d keys, %d heads of %d: every size must be "
        "positive", k->n, k->lq, k->lk, k->heads, k->head_dim);
    return FALSE;
  }
  if (k->ld_q < k->heads * k->head_dim || k->ld_kv < k->heads * k->head_dim) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE, "cuDNN flash attention: "
        "rows %d and %d values apart, shorter than %d heads of %d", k->ld_q,
        k->ld_kv, k->heads, k->head_dim);
    return FALSE;
  }
  if (k->type != PP_CUDA_F16 && k->type != PP_CUDA_BF16) {
    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE, "cuDNN flash attention: "
        "q, k and v must be f16 or bf16, not %s", type_name (k->type));
    return FALSE;
  }
  return TRUE;
}

gboolean
pp_cuda_sdpa_prepare (cudnnHandle_t handle, GHashTable * plans,
    PpCudaType t, int n, int lq, int lk, int heads, int head_dim,
    gboolean causal, int ld_q, int ld_kv, gsize * workspace_bytes,
    GError ** error)
{
  const SdpaKey key = sdpa_key (t, n, lq, lk, heads, head_dim, causal, ld_q,
      ld_kv);
  SdpaPlan *plan;

  g_return_val_if_fail (plans != NULL, FALSE);
  g_return_val_if_fail (workspace_bytes != NULL, FALSE);

  if (!check_arguments (&key, error))
    return FALSE;
  plan = g_hash_table_lookup (plans, &key);
  if (plan == NULL) {
    plan = sdpa_plan_new (handle, &key);
    g_hash_table_insert (plans, g_memdup2 (&key, sizeof key), plan);
  }
  if (plan->plan == NULL || plan->refused) {
    g_set_error_literal (error, PP_ERROR, PP_ERROR_DEVICE, plan->unsupported);
    return FALSE;
  }
  *workspace_bytes = plan->workspace;
  return TRUE;
}

gboolean
pp_cuda_sdpa_known (GHashTable * plans, PpCudaType t, int n, int lq, int lk,
    int heads, int head_dim, gboolean causal, int ld_q, int ld_kv)
{
  const SdpaKey key = sdpa_key (t, n, lq, lk, heads, head_dim, causal, ld_q,
      ld_kv);

  return g_hash_table_contains (plans, &key);
}

void
pp_cuda_sdpa_refuse (GHashTable * plans, PpCudaType t, int n, int lq,
    int lk, int heads, int head_dim, gboolean causal, int ld_q, int ld_kv,
    const gchar * why)
{
  const SdpaKey key = sdpa_key (t, n, lq, lk, heads, head_dim, causal, ld_q,
      ld_kv);
  g_autofree gchar *shape = key_describe (&key);
  SdpaPlan *plan = g_hash_table_lookup (plans, &key);

  if (plan == NULL) {
    plan = g_new0 (SdpaPlan, 1);
    g_hash_table_insert (plans, g_memdup2 (&key, sizeof key), plan);
  }
  g_free (plan->unsupported);
  plan->unsupported = g_strdup_printf ("%s: unsupported: %s", shape, why);
  plan->refused = TRUE;
}

gboolean
pp_cuda_sdpa_run (cudnnHandle_t handle, GHashTable * plans, PpCudaType t,
    const void *q, const void *k, const void *v, void *out, int n, int lq,
    int lk, int heads, int head_dim, gboolean causal, int ld_q, int ld_kv,
    gpointer workspace, gsize workspace_bytes, GError ** error)
{
  const SdpaKey key = sdpa_key (t, n, lq, lk, heads, head_dim, causal, ld_q,
      ld_kv);
  const SdpaPlan *plan;
  /* Host scalars, read by cudnnBackendExecute when it launches. */
  float scale = 1.0f / sqrtf ((float) head_dim);
  float mask = cudnnGetVersion () < CUDNN_V9_10_0 ? -FLT_MAX : -INFINITY;
  int64_t uids[] = { UID_Q, UID_K, UID_V, UID_O, UID_SCALE, UID_MASK };
  void *pointers[] = { (void *) q, (void *) k, (void *) v, out, &scale,
    &mask
  };
  /* The mask value is in the variant pack only when the graph has it. */
  const int count = key.causal ? G_N_ELEMENTS (uids)
      : G_N_ELEMENTS (uids) - 1;
  gboolean ok;

  g_return_val_if_fail (plans != NULL, FALSE);

  if (!check_arguments (&key, error))
    return FALSE;
  plan = g_hash_table_lookup (plans, &key);
  if (plan == NULL || plan->plan == NULL || plan->refused) {
    g_autofree gchar *shape = key_describe (&key);

    if (plan == NULL)
      g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "%s: run before "
          "pp_cuda_sdpa_prepare", shape);
    else
      g_set_error_literal (error, PP_ERROR, PP_ERROR_DEVICE,
          plan->unsupported);
    return FALSE;
  }
  if (workspace_bytes < plan->workspace
      || (plan->workspace > 0 && workspace == NULL)) {
    g_autofree gchar *shape = key_describe (&key);

    g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "%s: the plan needs %"
        G_GSIZE_FORMAT " bytes of workspace, given %" G_GSIZE_FORMAT " at %p",
        shape, plan->workspace, workspace_bytes, workspace);
    return FALSE;
  }
  if (!pp_cudnn_graph_aligned (q) || !pp_cudnn_graph_aligned (k) || !pp_cudnn_graph_aligned (v)
      || !pp_cudnn_graph_aligned (out)) {
    g_autofree gchar *shape = key_describe (&key);

    g_set_error (error, PP_ERROR, PP_ERROR_SHAPE, "%s: q %p, k %p, v %p and "
        "out %p must all be on %d bytes", shape, q, k, v, out,
        SDPA_ALIGNMENT);
    return FALSE;
  }

  ok = pp_cudnn_graph_execute (handle, plan->plan, count, uids, pointers,
      workspace, NULL, error);
  if (!ok) {
    g_autofree gchar *shape = key_describe (&key);

    g_prefix_error (error, "%s: ", shape);
  }
  return ok;
}

#endif /* PP_HAVE_CUDNN */
