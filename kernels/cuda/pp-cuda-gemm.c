/* ppdiffuse — linear and matmul on cuBLAS.
 *
 * The ops are row-major (PyTorch's layouts), cuBLAS is column-major: a
 * row-major matrix with row stride ld is, read column-major, its transpose
 * with leading dimension ld.  So y = op(a)·op(b) row-major is computed as
 * yᵀ = op(b)ᵀ·op(a)ᵀ column-major: cuBLAS gets b first and a second, each
 * with its own transpose flag, and the sizes (n, m, k).
 *
 * A weight stored in 16 bits (its view's dtype) is multiplied in that type
 * on tensor cores: the float32 operand is narrowed into a scratch buffer
 * (rounded as pp-dtype-math.h rounds), and cublasGemmEx multiplies 16-bit
 * inputs into a float32 output with float32 accumulation.  Float32
 * operands stay exact float32 unless TF32 was asked for
 * (PPDIFFUSE_CUDA_TF32).
 *
 * With 16-bit activations, when PPDIFFUSE_CUDA_GEMM_OUT allows (the
 * default), a matmul whose a, b and y are of one 16-bit type writes y as
 * it is (cublasGemmEx with a 16-bit C), and a linear op whose output is of
 * its weights' 16-bit type is one cuBLASLt call: the product accumulates
 * in float32, its epilogue adds the bias in float32 and rounds once into
 * the output as it is, with no float32 scratch, bias kernel or narrowing
 * pass.  The rounding is then cuBLAS's of its own sum, which may differ
 * from the float32 kernel's rounded by one unit in the last place; a sum
 * into y (linear_add, matmul's accumulate) may also round a partial sum
 * to y's type first (as on an H200: where the terms cancel, several
 * units of the result, as PyTorch's product then add would round).  The
 * algorithm depends on the pointers' alignments (the plan's key), which a
 * model's layout makes the same in every process, so a mesh's workers and
 * the tool agree. */
#include "pp-cuda-private.h"
#include "pp-error.h"

#include <math.h>
#include <string.h>

cudaDataType_t
pp_cuda_data_type (PpCudaType t)
{
  switch (t) {
    case PP_CUDA_F16:
      return CUDA_R_16F;
    case PP_CUDA_BF16:
      return CUDA_R_16BF;
    default:
      return CUDA_R_32F;
  }
}

PpCudaType
pp_cuda_operand_type (PpCudaBackend * cu, const char *op, const char *param,
    PpView v)
{
  const PpCudaType t = pp_cuda_view_type (cu, op, param, v);

  /* Only 16-bit filters are laid out in place. */
  if (t != PP_CUDA_F32 && v.data != NULL
      && g_hash_table_size (cu->conv_filters) > 0)
    pp_cuda_conv_filters_read (cu, v.data, v.numel * pp_cuda_type_size (t));
  return t;
}

/* The operand stored at @p as @have, a matrix of @rows × @cols (row
 * stride *@ld), in type @want: @p itself when stored so, else narrowed
 * into scratch @slot (packed: *@ld becomes @cols). */
static gconstpointer
operand (PpCudaBackend * cu, gconstpointer p, PpCudaType have,
    PpCudaType want, int rows, int cols, int *ld, PpCudaScratch slot)
{
  gpointer packed;

  if (have == want)
    return p;
  /* Only float32 operands are narrowed: one product runs in one type. */
  if (have != PP_CUDA_F32)
    pp_cuda_fatal (cu, g_error_new (PP_ERROR, PP_ERROR_DEVICE, "a product "
            "of a float16 and a bfloat16 operand: no kernel multiplies the "
            "two"));
  packed = pp_cuda_scratch (cu, slot, (gsize) rows * cols * sizeof (guint16));
  PP_CUDA_OP_RUN (cu, pp_cuda_narrow_2d (p, rows, cols, *ld, packed, want,
          cu->stream));
  *ld = cols;
  return packed;
}

void
pp_cuda_gemm (PpCudaBackend * cu, gboolean trans_a, gboolean trans_b, int m,
    int n, int k, float alpha, gconstpointer a, PpCudaType ta, int lda,
    gconstpointer b, PpCudaType tb, int ldb, float beta, gpointer y,
    PpCudaType ty, int ldy)
{
  /* The 16-bit type of either operand, or float32. */
  const PpCudaType t = ta != PP_CUDA_F32 ? ta : tb;
  const cudaDataType_t type = pp_cuda_data_type (t);
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  gconstpointer pa = a, pb = b;

  if (m <= 0 || n <= 0)
    return;
  if (t != PP_CUDA_F32) {
    /* Stored shapes: a is [m,k], or [k,m] when transposed; b likewise. */
    pa = operand (cu, a, ta, t, trans_a ? k : m, trans_a ? m : k, &lda,
        PP_CUDA_SCRATCH_A);
    pb = operand (cu, b, tb, t, trans_b ? n : k, trans_b ? k : n, &ldb,
        PP_CUDA_SCRATCH_B);
  } else if (cu->tf32) {
    compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  PP_CUBLAS_OP_RUN (cu, cublasGemmEx (cu->cublas,
          trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
          trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, n, m, k, &alpha,
          pb, type, ldb, pa, type, lda, &beta,
          y, pp_cuda_data_type (ty), ldy, compute, CUBLAS_GEMM_DEFAULT));
}

/* The most workspace a cuBLASLt product may use (the library workspace
 * scratch, shared with cuDNN: one op at a time). */
#define LT_WORKSPACE_BYTES ((gsize) 32 << 20)

/* The alignment, in bytes, of a bias the product's epilogue reads. */
#define LT_BIAS_ALIGNMENT 16
/* Algorithms of the heuristics timed at most (PPDIFFUSE_CUDA_GEMM_ALGO=
 * timed), and the runs each: one to warm up, then the timed ones. */
#define LT_TRIALS 8
#define LT_TRIAL_RUNS 3

/* What a cuBLASLt plan depends on: the shape, the type, a bias or not,
 * and the alignment of each pointer (the algorithms the heuristics may
 * pick require some). */
typedef struct
{
  gint32 rows, in, out;
  gint32 type;
  gint32 bias;
  guint32 align_x, align_w, align_y, align_b;
} LtKey;

typedef struct
{
  LtKey key;
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t w, x, y;
  cublasLtMatmulAlgo_t algo;
  /* FALSE: the heuristics found no algorithm, or cuBLASLt refused the
   * one they found at its first run. */
  gboolean usable;
  gboolean ran;                 /* it ran once */
  /* PPDIFFUSE_CUDA_GEMM_ALGO=timed: the heuristics' first algorithms, to
   * time at the plan's first run outside a capture (then freed). */
  cublasLtMatmulHeuristicResult_t *trials;
  int n_trials;
} LtPlan;

static guint
lt_key_hash (gconstpointer p)
{
  const guint8 *b = p;
  guint h = 5381;

  for (gsize i = 0; i < sizeof (LtKey); i++)
    h = h * 33 + b[i];
  return h;
}

static gboolean
lt_key_equal (gconstpointer a, gconstpointer b)
{
  return memcmp (a, b, sizeof (LtKey)) == 0;
}

static void
lt_plan_free (gpointer p)
{
  LtPlan *plan = p;

  if (plan->w != NULL)
    cublasLtMatrixLayoutDestroy (plan->w);
  if (plan->x != NULL)
    cublasLtMatrixLayoutDestroy (plan->x);
  if (plan->y != NULL)
    cublasLtMatrixLayoutDestroy (plan->y);
  if (plan->desc != NULL)
    cublasLtMatmulDescDestroy (plan->desc);
  g_free (plan->trials);
  g_free (plan);
}

GHashTable *
pp_cuda_lt_plans_new (void)
{
  /* The key is the plan's first member. */
  return g_hash_table_new_full (lt_key_hash, lt_key_equal, NULL,
      lt_plan_free);
}

/* The largest power of two (at most 256) that @p is a multiple of. */
static guint32
alignment (gconstpointer p)
{
  guint32 a = 256;

  while (a > 1 && (guintptr) p % a != 0)
    a /= 2;
  return a;
}

/* A cuBLASLt call of lt_plan: a failure is the op's (the process ends,
 * or under a graph capture the capture fails) and clears *@ok. */
#define LT_TRY(cu, ok, call)                                                \
  G_STMT_START {                                                            \
    GError *pp_lt_error_ = NULL;                                            \
    if (!PP_CUBLAS_TRY (call, &pp_lt_error_)) {                             \
      *(ok) = FALSE;                                                        \
      pp_cuda_op_error ((cu), pp_lt_error_);                                \
    }                                                                       \
  } G_STMT_END

/* @key in words: what a kept choice is for (pp-cuda-tuning.h). */
static gchar *
lt_key_describe (const LtKey * key)
{
  return g_strdup_printf ("%s linear of %d rows, %d → %d%s, alignments x %u, "
      "w %u, y %u, bias %u bytes", key->type == PP_CUDA_F16 ? "float16"
      : "bfloat16", key->rows, key->in, key->out, key->bias ? " with a bias"
      : "", key->align_x, key->align_w, key->align_y, key->align_b);
}

/* The algorithm an earlier process timed for @plan's key, where the
 * heuristics still offer it: taken, and nothing is timed. */
static gboolean
lt_restore (PpCudaBackend * cu, LtPlan * plan)
{
  g_autofree gchar *desc = lt_key_describe (&plan->key);
  gint64 kept[G_N_ELEMENTS (plan->algo.data)];

  G_STATIC_ASSERT (sizeof kept == sizeof plan->algo.data);
  if (!pp_cuda_tuning_lookup (cu->tuning, "gemm", desc, kept,
          G_N_ELEMENTS (kept)))
    return FALSE;
  for (int i = 0; i < plan->n_trials; i++)
    if (memcmp (plan->trials[i].algo.data, kept, sizeof kept) == 0) {
      plan->algo = plan->trials[i].algo;
      g_info ("%s: cuda gemm: %s: the heuristics' algorithm %d, timed "
          "before, kept in %s", cu->be.device, desc, i,
          pp_cuda_tuning_folder (cu->tuning));
      return TRUE;
    }
  g_info ("%s: cuda gemm: %s: the algorithm timed before is no longer among "
      "the heuristics' first %d: timed again", cu->be.device, desc,
      plan->n_trials);
  return FALSE;
}

/* The plan of @key, made (descriptors, the heuristics' first algorithm,
 * and with cu->gemm_timed their first LT_TRIALS to time) at its first
 * use, @bias a bias pointer of the key's alignment (the
 * heuristics read its alignment from the descriptor); NULL when cuBLASLt
 * cannot run it: no algorithm for it (remembered), or a call that failed
 * under a graph capture (which fails the capture; not remembered, the
 * work reruns without a graph). */
static LtPlan *
lt_plan (PpCudaBackend * cu, const LtKey * key, gconstpointer bias)
{
  LtPlan *plan = g_hash_table_lookup (cu->lt_plans, key);
  const cudaDataType_t type = pp_cuda_data_type ((PpCudaType) key->type);
  const guint64 workspace = LT_WORKSPACE_BYTES;
  const guint32 reduction = CUBLASLT_REDUCTION_SCHEME_NONE
      | CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  /* A is w, B is x, C and D are y. */
  const struct
  {
    cublasLtMatmulPreferenceAttributes_t attr;
    guint32 bytes;
  } aligned[] = {
    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key->align_w},
    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key->align_x},
    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key->align_y},
    {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key->align_y},
  };
  cublasLtMatmulPreference_t pref = NULL;
  cublasLtMatmulHeuristicResult_t found[LT_TRIALS];
  const int requested = cu->gemm_timed ? LT_TRIALS : 1;
  cublasStatus_t status;
  gboolean ok = TRUE;
  int n_found = 0;

  if (plan != NULL)
    return plan->usable ? plan : NULL;
  plan = g_new0 (LtPlan, 1);
  plan->key = *key;
  /* Column-major, as pp_cuda_gemm: yᵀ [out, rows] = w [out, in] · xᵀ;
   * w row-major [out, in] is, read column-major, [in, out] with ld in,
   * transposed; x row-major [rows, in] is [in, rows] with ld in. */
  LT_TRY (cu, &ok, cublasLtMatmulDescCreate (&plan->desc,
          CUBLAS_COMPUTE_32F, CUDA_R_32F));
  if (ok)
    LT_TRY (cu, &ok, cublasLtMatmulDescSetAttribute (plan->desc,
            CUBLASLT_MATMUL_DESC_TRANSA, &(cublasOperation_t) { CUBLAS_OP_T },
            sizeof (cublasOperation_t)));
  if (ok)
    LT_TRY (cu, &ok, cublasLtMatmulDescSetAttribute (plan->desc,
            CUBLASLT_MATMUL_DESC_TRANSB, &(cublasOperation_t) { CUBLAS_OP_N },
            sizeof (cublasOperation_t)));
  if (ok && key->bias) {
    LT_TRY (cu, &ok, cublasLtMatmulDescSetAttribute (plan->desc,
            CUBLASLT_MATMUL_DESC_EPILOGUE,
            &(cublasLtEpilogue_t) { CUBLASLT_EPILOGUE_BIAS },
            sizeof (cublasLtEpilogue_t)));
    if (ok)
      LT_TRY (cu, &ok, cublasLtMatmulDescSetAttribute (plan->desc,
              CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &type, sizeof type));
    if (ok)
      LT_TRY (cu, &ok, cublasLtMatmulDescSetAttribute (plan->desc,
              CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  }
  if (ok)
    LT_TRY (cu, &ok, cublasLtMatrixLayoutCreate (&plan->w, type, key->in,
            key->out, key->in));
  if (ok)
    LT_TRY (cu, &ok, cublasLtMatrixLayoutCreate (&plan->x, type, key->in,
            key->rows, key->in));
  if (ok)
    LT_TRY (cu, &ok, cublasLtMatrixLayoutCreate (&plan->y, type, key->out,
            key->rows, key->out));
  /* The alignments each pointer of the key guarantees. */
  if (ok)
    LT_TRY (cu, &ok, cublasLtMatmulPreferenceCreate (&pref));
  if (ok)
    LT_TRY (cu, &ok, cublasLtMatmulPreferenceSetAttribute (pref,
            CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
            sizeof workspace));
  for (guint i = 0; ok && i < G_N_ELEMENTS (aligned); i++)
    LT_TRY (cu, &ok, cublasLtMatmulPreferenceSetAttribute (pref,
            aligned[i].attr, &aligned[i].bytes, sizeof aligned[i].bytes));
  /* A split sum (split-K) keeps its parts in float32: by default cuBLASLt
   * may also add them up in y itself or in y's type, rounding each part
   * to 16 bits, where y is to be its float32 sum rounded once. */
  if (ok)
    LT_TRY (cu, &ok, cublasLtMatmulPreferenceSetAttribute (pref,
            CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reduction,
            sizeof reduction));
  if (!ok) {
    /* Under a capture (elsewhere the process has ended). */
    if (pref != NULL)
      cublasLtMatmulPreferenceDestroy (pref);
    lt_plan_free (plan);
    return NULL;
  }
  status = cublasLtMatmulAlgoGetHeuristic (cu->cublaslt, plan->desc,
      plan->w, plan->x, plan->y, plan->y, pref, requested, found, &n_found);
  cublasLtMatmulPreferenceDestroy (pref);
  /* A refusal is answered (below, or by a capture's failure): its status
   * is not the next kernel's. */
  if (status != CUBLAS_STATUS_SUCCESS)
    pp_cuda_forget_error ();
  if (status == CUBLAS_STATUS_SUCCESS && n_found > 0
      && found[0].state == CUBLAS_STATUS_SUCCESS) {
    plan->algo = found[0].algo;
    plan->usable = TRUE;
    /* The ones to time, in the heuristics' order: where there is a
     * choice. */
    plan->trials = g_new (cublasLtMatmulHeuristicResult_t, n_found);
    for (int i = 0; i < n_found; i++)
      if (found[i].state == CUBLAS_STATUS_SUCCESS)
        plan->trials[plan->n_trials++] = found[i];
    /* Nothing to time where there is no choice, or where an earlier
     * process's is kept. */
    if (plan->n_trials < 2
        || (cu->tuning != NULL && lt_restore (cu, plan))) {
      g_clear_pointer (&plan->trials, g_free);
      plan->n_trials = 0;
    }
  } else if (status != CUBLAS_STATUS_SUCCESS
      && status != CUBLAS_STATUS_NOT_SUPPORTED
      && pp_cuda_capturing_here (cu)) {
    /* Not "no algorithm": the capture fails, and the work reruns
     * without a graph, where it is decided for good. */
    GError *error = NULL;

    pp_cublas_check (status, "cublasLtMatmulAlgoGetHeuristic", __FILE__,
        __LINE__, &error);
    pp_cuda_op_error (cu, error);
    lt_plan_free (plan);
    return NULL;
  } else {
    /* No algorithm, or (outside a capture) a refusal: said where the
     * GPU check's logs show it, not fatal (the float32 way is right). */
    g_message ("%s: cuBLASLt %s a %s linear of %d rows, %d → %d%s "
        "(alignments x %u, w %u, y %u, bias %u bytes%s%s): it runs "
        "another way (a linear through float32, a convolution in cuDNN)",
        cu->be.device, status == CUBLAS_STATUS_SUCCESS
        || status == CUBLAS_STATUS_NOT_SUPPORTED ? "has no algorithm for"
        : "refused", key->type == PP_CUDA_F16 ? "float16" : "bfloat16",
        key->rows, key->in, key->out, key->bias ? " with a bias" : "",
        key->align_x, key->align_w, key->align_y, key->align_b,
        status == CUBLAS_STATUS_SUCCESS ? "" : "; ",
        status == CUBLAS_STATUS_SUCCESS ? "" : cublasGetStatusString (status));
  }
  g_hash_table_insert (cu->lt_plans, &plan->key, plan);
  return plan->usable ? plan : NULL;
}

/* One trial run of a cuBLASLt algorithm (pp_cuda_time_trial): the
 * product into d (never y: a sum into y reads it as C). */
typedef struct
{
  PpCudaBackend *cu;
  const LtPlan *plan;
  const cublasLtMatmulAlgo_t *algo;
  gconstpointer w, x, c;
  const float *beta;
  gpointer d, workspace;
} LtTrial;

static gboolean
lt_trial (gpointer data)
{
  const LtTrial *t = data;
  const float one = 1.0f;

  return cublasLtMatmul (t->cu->cublaslt, t->plan->desc, &one, t->w,
      t->plan->w, t->x, t->plan->x, t->beta, t->c, t->plan->y, t->d,
      t->plan->y, t->algo, t->workspace, LT_WORKSPACE_BYTES, t->cu->stream)
      == CUBLAS_STATUS_SUCCESS;
}

/* Times @plan's trials on the op's operands (x, w, @y as C when
 * @accumulate), their outputs in scratch, keeps the fastest in
 * plan->algo, and logs every trial once at info level ("cuda gemm
 * trials: …"); halted meanwhile, keeps nothing. */
static void
lt_time (PpCudaBackend * cu, LtPlan * plan, gconstpointer w, gconstpointer x,
    gboolean accumulate, gconstpointer y)
{
  const LtKey *k = &plan->key;
  const float one = 1.0f, zero = 0.0f;
  gpointer d = pp_cuda_scratch (cu, PP_CUDA_SCRATCH_B,
      (gsize) k->rows * k->out * sizeof (guint16));
  gpointer workspace = pp_cuda_scratch (cu, PP_CUDA_SCRATCH_WORKSPACE,
      LT_WORKSPACE_BYTES);
  g_autoptr (GString) text = g_string_new (NULL);
  double best = INFINITY;
  int chosen = 0;

  for (int i = 0; i < plan->n_trials; i++) {
    const cublasLtMatmulHeuristicResult_t *r = &plan->trials[i];
    LtTrial trial = { cu, plan, &r->algo, w, x, accumulate ? y : d,
      accumulate ? &one : &zero, d, workspace
    };
    g_autofree gchar *what = g_strdup_printf ("cuBLASLt's algorithm %d "
        "of a linear of %d rows, %d → %d (PPDIFFUSE_CUDA_GEMM_ALGO=timed)",
        i, k->rows, k->in, k->out);
    const double ms = pp_cuda_time_trial (cu, what, lt_trial, &trial,
        LT_TRIAL_RUNS);

    g_string_append_printf (text, "%s%d ", i > 0 ? "; " : "", i);
    if (ms < 0.0)
      g_string_append (text, "failed");
    else
      g_string_append_printf (text, "%.4f ms (%" G_GSIZE_FORMAT " bytes of "
          "workspace, %.2f waves)", ms, r->workspaceSize,
          (double) r->wavesCount);
    if (ms >= 0.0 && ms < best) {
      best = ms;
      chosen = i;
    }
  }
  /* Halted meanwhile (the trials' scratch did not fit): trials that did
   * not run choose nothing, and the plan is timed at its next run. */
  if (pp_cuda_halted (cu))
    return;
  plan->algo = plan->trials[chosen].algo;
  if (cu->tuning != NULL) {
    g_autofree gchar *desc = lt_key_describe (k);
    gint64 kept[G_N_ELEMENTS (plan->algo.data)];

    memcpy (kept, plan->algo.data, sizeof kept);
    pp_cuda_tuning_store (cu->tuning, "gemm", desc, kept,
        G_N_ELEMENTS (kept));
  }
  g_info ("%s: cuda gemm trials: %s linear of %d rows, %d → %d%s%s, the "
      "heuristics' algorithms in their order: %s; %d chosen", cu->be.device,
      k->type == PP_CUDA_F16 ? "float16" : "bfloat16", k->rows, k->in,
      k->out, k->bias ? " with a bias" : "", accumulate ? ", added" : "",
      text->str, chosen);
  g_clear_pointer (&plan->trials, g_free);
  plan->n_trials = 0;
}

/* A linear op of rows × in → out whose x (@x_type: float32, or @t as it
 * is), w, b (NULL: none) and y are of 16-bit type @t, as one cuBLASLt call
 * (the bias in its epilogue), added to @c when @accumulate (of y's type
 * and shape; y itself, read and written in place, when NULL), the sum
 * rounded once; FALSE when cuBLASLt cannot run it (nothing was
 * enqueued). */
static gboolean
linear_lt (PpCudaBackend * cu, PpCudaType t, gconstpointer x,
    PpCudaType x_type, gconstpointer w, gconstpointer b, int rows, int in,
    int out, gboolean accumulate, gconstpointer c, gpointer y)
{
  const guint32 align_c = accumulate && c != NULL ? alignment (c) : 256;
  /* A float32 x is narrowed into scratch, which starts on 256 bytes; C
   * and D share a layout, and so their alignment. */
  const LtKey key = { rows, in, out, t, b != NULL,
    x_type == t ? alignment (x) : 256, alignment (w),
    MIN (alignment (y), align_c), b != NULL ? alignment (b) : 0
  };
  const float one = 1.0f, zero = 0.0f;
  const float *beta = accumulate ? &one : &zero;
  cublasStatus_t status;
  GError *error = NULL;
  gpointer workspace;
  LtPlan *plan;
  int ld = in;

  if (c == NULL)
    c = y;
  /* The kernel cuBLASLt's heuristics pick may read the bias 16 bytes at
   * a time (they judge its alignment by the pointer the plan is made
   * with, whose alignment the key holds): a bias starting between two
   * such places (a slice of a larger tensor) takes the float32 way. */
  if (b != NULL && key.align_b < LT_BIAS_ALIGNMENT)
    return FALSE;
  plan = lt_plan (cu, &key, b);
  if (plan == NULL)
    return FALSE;
  if (x_type != t)
    x = operand (cu, x, x_type, t, rows, in, &ld, PP_CUDA_SCRATCH_A);
  if (b != NULL)
    PP_CUBLAS_OP_TRY (cu, cublasLtMatmulDescSetAttribute (plan->desc,
            CUBLASLT_MATMUL_DESC_BIAS_POINTER, &b, sizeof b));
  /* Timed at its first run (PPDIFFUSE_CUDA_GEMM_ALGO), which must be
   * outside a capture: a graph that recorded the heuristics' first
   * algorithm would then differ from the runs without it, which take the
   * fastest (another order of sums, other bits).  So a product whose
   * algorithm is still to be timed fails a capture, and the run without
   * a graph times it. */
  if (plan->n_trials > 0 && pp_cuda_capturing_here (cu)) {
    if (cu->capture_error == NULL)
      g_set_error (&cu->capture_error, PP_ERROR, PP_ERROR_DEVICE,
          "%s: a linear of %d rows, %d → %d whose cuBLASLt algorithm is "
          "still to be timed, first met inside a CUDA graph capture (a run "
          "without a graph times it)", cu->be.device, key.rows, key.in,
          key.out);
    return TRUE;
  }
  if (plan->n_trials > 0 && !pp_cuda_halted (cu))
    lt_time (cu, plan, w, x, accumulate, c);
  workspace = pp_cuda_scratch (cu, PP_CUDA_SCRATCH_WORKSPACE,
      LT_WORKSPACE_BYTES);
  /* Halted: no work, and no refusal to remember. */
  if (pp_cuda_halted (cu))
    return TRUE;
  status = cublasLtMatmul (cu->cublaslt, plan->desc, &one, w, plan->w, x,
      plan->x, beta, c, plan->y, y, plan->y, &plan->algo, workspace,
      LT_WORKSPACE_BYTES, cu->stream);
  if (status != CUBLAS_STATUS_SUCCESS && !plan->ran
      && !pp_cuda_capturing_here (cu)
      && (status == CUBLAS_STATUS_NOT_SUPPORTED
          || status == CUBLAS_STATUS_INVALID_VALUE
          || status == CUBLAS_STATUS_ARCH_MISMATCH)) {
    /* The heuristics' algorithm does not run this product after all
     * (nothing was enqueued but x's narrowing, which is harmless): the
     * float32 way, from now on. */
    pp_cuda_forget_error ();
    plan->usable = FALSE;
    g_message ("%s: cuBLASLt refused the algorithm its heuristics chose "
        "for a %s linear of %d rows, %d → %d%s (%s): it runs another way "
        "(a linear through float32, a convolution in cuDNN)", cu->be.device,
        t == PP_CUDA_F16 ? "float16" : "bfloat16", rows, in, out,
        b != NULL ? " with a bias" : "",
        cublasGetStatusString (status));
    return FALSE;
  }
  /* Any other failure ends the process (a capture: fails it). */
  if (pp_cublas_check (status, "cublasLtMatmul", __FILE__, __LINE__, &error))
    plan->ran = TRUE;
  else
    pp_cuda_op_error (cu, error);
  return TRUE;
}

/* linear (@accumulate FALSE) and linear_add (TRUE), named @op in
 * messages. */
static void
linear_op (PpCudaBackend * cu, const char *op, PpView x_view, int rows,
    int in, PpView w, PpView b, int out, gboolean accumulate, PpOut y_view)
{
  const PpCudaType wtype = pp_cuda_operand_type (cu, op, "w", w);
  const PpCudaType xtype = pp_cuda_act_type (cu, op, "x",
      x_view.dtype);
  const PpCudaType btype = pp_view_is_none (b) ? wtype
      : pp_cuda_operand_type (cu, op, "b", b);
  /* Otherwise x as it is when the product reads it so (float32, or of the
   * weights' 16-bit type: the bits of its widened copy narrowed again);
   * y through float32 scratch when it is 16-bit (the bias is added in
   * float32), widened first when the product is added to it. */
  const gboolean x_as_is = xtype == PP_CUDA_F32
      || (xtype == wtype && pp_cuda_aligned (x_view.data));
  gconstpointer x;
  float *y;

  g_return_if_fail (rows > 0 && in > 0 && out > 0);

  /* A 16-bit output of the weights' type, x read as it is or narrowed to
   * that type, a bias of it too: one cuBLASLt call. */
  if (cu->gemm_out_act && wtype != PP_CUDA_F32 && btype == wtype
      && pp_cuda_act_type (cu, op, "y", y_view.dtype) == wtype
      && (xtype == PP_CUDA_F32 || xtype == wtype)
      && linear_lt (cu, wtype, x_view.data, xtype, w.data,
          pp_view_is_none (b) ? NULL : b.data, rows, in, out, accumulate,
          NULL, y_view.data))
    return;
  x = x_as_is ? x_view.data : pp_cuda_in (cu, op, "x", x_view);
  y = accumulate ? pp_cuda_out (cu, op, "y", y_view)
      : pp_cuda_out_whole (cu, op, "y", y_view);

  /* y [rows,out] (+)= x [rows,in] · wᵀ, w [out,in]. */
  pp_cuda_gemm (cu, FALSE, TRUE, rows, out, in, 1.0f, x,
      x_as_is ? xtype : PP_CUDA_F32, in, w.data, wtype, in,
      accumulate ? 1.0f : 0.0f, y, PP_CUDA_F32, out);
  if (!pp_view_is_none (b))
    PP_CUDA_OP_RUN (cu, pp_cuda_add_row_bias (y, rows, out, b.data, btype,
            cu->stream));
}

gboolean
pp_cuda_product_lt (PpCudaBackend * cu, PpCudaType t, gconstpointer x,
    gconstpointer w, gconstpointer b, int rows, int in, int out,
    gconstpointer c, gpointer y)
{
  return linear_lt (cu, t, x, t, w, b, rows, in, out, c != NULL, c, y);
}

void
pp_cuda_op_linear (PpCudaBackend * cu, PpView x, int rows, int in, PpView w,
    PpView b, int out, PpOut y)
{
  linear_op (cu, "linear", x, rows, in, w, b, out, FALSE, y);
}

void
pp_cuda_op_linear_add (PpCudaBackend * cu, PpView x, int rows, int in,
    PpView w, PpView b, int out, PpOut y)
{
  linear_op (cu, "linear_add", x, rows, in, w, b, out, TRUE, y);
}

void
pp_cuda_op_matmul (PpCudaBackend * cu, gboolean trans_a, gboolean trans_b,
    int m, int n, int k, PpView a, int lda, PpView b, int ldb,
    gboolean accumulate, PpOut y_view, int ldy)
{
  const PpCudaType ta = pp_cuda_operand_type (cu, "matmul", "a", a);
  const PpCudaType tb = pp_cuda_operand_type (cu, "matmul", "b", b);
  const float beta = accumulate ? 1.0f : 0.0f;

  g_return_if_fail (m > 0 && n > 0 && k > 0);
  g_return_if_fail (lda >= (trans_a ? m : k) && ldb >= (trans_b ? k : n)
      && ldy >= n);

  /* a, b and y of one 16-bit type: cuBLAS reads y as it is (when it
   * accumulates) and writes it, the sum in float32 rounded once, with no
   * float32 copy of y (PPDIFFUSE_CUDA_GEMM_OUT=act). */
  if (cu->gemm_out_act && ta != PP_CUDA_F32 && ta == tb
      && pp_cuda_act_type (cu, "matmul", "y", y_view.dtype) == ta)
    pp_cuda_gemm (cu, trans_a, trans_b, m, n, k, 1.0f, a.data, ta, lda,
        b.data, tb, ldb, beta, y_view.data, ta, ldy);
  else if (ta != PP_CUDA_F32 && tb != PP_CUDA_F32 && ta != tb)
    /* One float16 and one bfloat16 operand: neither narrows to the other
     * without loss, so both are widened (the CPU backends' product). */
    pp_cuda_gemm (cu, trans_a, trans_b, m, n, k, 1.0f,
        pp_cuda_in (cu, "matmul", "a", a), PP_CUDA_F32, lda,
        pp_cuda_in (cu, "matmul", "b", b), PP_CUDA_F32, ldb, beta,
        pp_cuda_out (cu, "matmul", "y", y_view), PP_CUDA_F32, ldy);
  else
    pp_cuda_gemm (cu, trans_a, trans_b, m, n, k, 1.0f, a.data, ta, lda,
        b.data, tb, ldb, beta, pp_cuda_out (cu, "matmul", "y", y_view),
        PP_CUDA_F32, ldy);
}
