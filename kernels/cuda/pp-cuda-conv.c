/* ppdiffuse — conv2d on cuDNN (legacy API).
 *
 * Every shape gets a plan once, cached by PpCudaConvKey: its descriptors
 * and its algorithm, the heuristics' first choice within
 * CONV_MAX_WORKSPACE, which every process makes alike (the tool and a
 * mesh's workers give the same bytes).  PPDIFFUSE_CUDA_CONV_ALGO=timed
 * takes instead the fastest of cuDNN's timed trials on the op's own
 * buffers (cudnnFindConvolutionForwardAlgorithmEx), so during a model's
 * warm-up.  A shape first met while the stream is captured into a graph
 * fails the capture (nothing may be timed there, and cuDNN may load
 * kernels for it): the work reruns without a graph, which makes the plan
 * the way every other run does, and the next capture finds it.
 *
 * With 16-bit weights (the weight view's dtype, part of the key) the
 * convolution runs in that type (a float32 x narrowed into a scratch
 * buffer, y produced in 16 bits and widened back to float32 with the bias
 * added; an activation of the weights' type read and written as it is),
 * accumulating in float32 on tensor cores; with float32 weights it is
 * exact float32 (FMA math) unless TF32 was asked for.
 *
 * Tensor cores want channels last.  Where pp_cuda_conv_nhwc says so
 * (PPDIFFUSE_CUDA_CONV_LAYOUT), a 16-bit convolution runs channels-last:
 * a channels-first x is transposed to NHWC by the narrowing pass, a
 * channels-first y transposed back by the widening pass (a channels-last
 * x or y, PpView.layout, is read or written as it is), and the filter is
 * read laid out channels last, in its own bytes or as a copy, from its
 * first use on (pp_cuda_filter_nhwc, pp-cuda-filters.c), so cuDNN changes
 * no layout itself.  Elsewhere a
 * channels-last view is copied channels first (pp_cuda_nchw_in), except
 * under PPDIFFUSE_CUDA_CONV_LAYOUT=padded, where a convolution whose
 * channels are not multiples of 8 runs channels-last too, its channels
 * padded with zeros (conv_padded).
 *
 * The bias, a residual and the ReLU are added by a pass of the backend's
 * own over y after cuDNN wrote it, or, with PPDIFFUSE_CUDA_CONV_EPILOGUE=
 * fused, in cuDNN's convolution epilogue
 * (cudnnConvolutionBiasActivationForward) where cuDNN runs it for the
 * shape: summed in float32 and rounded once, the 16-bit output's passes
 * then only laying it out or widening it. */
#include "pp-cuda-conv-key.h"
#include "pp-cuda-private.h"
#include "pp-error.h"

#ifdef PP_HAVE_CUDNN

/* The largest workspace an algorithm may ask for: faster algorithms that
 * need more are passed over rather than taking device memory from the
 * models. */
#define CONV_MAX_WORKSPACE ((gsize) 256 << 20)

typedef struct
{
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  cudnnMathType_t math;
  cudnnConvolutionFwdAlgo_t algo;
  gsize workspace;
  /* Algorithms (bit per value) that cuDNN refused to run for this shape
   * after offering them: passed over from then on. */
  guint32 refused;
  gboolean ran;                 /* its algorithm ran once */
  /* cuDNN's fused bias, residual and activation (conv_fused): the bias's
   * descriptor (1 × cout × 1 × 1 of the plan's type), made at the first
   * fused run; per activation (identity, ReLU) its descriptor and whether
   * cuDNN ran it or refused it. */
  cudnnTensorDescriptor_t bias;
  cudnnActivationDescriptor_t act[2];
  gboolean fused_ran[2], fused_refused[2];
} ConvPlan;

G_STATIC_ASSERT (CUDNN_CONVOLUTION_FWD_ALGO_COUNT <= 32);

static void
conv_plan_free (gpointer data)
{
  ConvPlan *p = data;

  cudnnDestroyTensorDescriptor (p->x);
  cudnnDestroyTensorDescriptor (p->y);
  cudnnDestroyFilterDescriptor (p->w);
  cudnnDestroyConvolutionDescriptor (p->conv);
  if (p->bias != NULL)
    cudnnDestroyTensorDescriptor (p->bias);
  for (guint a = 0; a < G_N_ELEMENTS (p->act); a++)
    if (p->act[a] != NULL)
      cudnnDestroyActivationDescriptor (p->act[a]);
  g_free (p);
}

GHashTable *
pp_cuda_conv_plans_new (void)
{
  return g_hash_table_new_full (pp_cuda_conv_key_hash,
      pp_cuda_conv_key_equal, g_free, conv_plan_free);
}

static cudnnDataType_t
data_type (PpDType dtype)
{
  switch (dtype) {
    case PP_DTYPE_F16:
      return CUDNN_DATA_HALF;
    case PP_DTYPE_BF16:
      return CUDNN_DATA_BFLOAT16;
    default:
      return CUDNN_DATA_FLOAT;
  }
}

/* Whether @algo runs the plan's convolution within the workspace bound
 * (its size for the descriptor's math type in *@bytes). */
static gboolean
usable (PpCudaBackend * cu, const ConvPlan * p,
    cudnnConvolutionFwdAlgo_t algo, gsize * bytes)
{
  size_t size = 0;

  if (cudnnGetConvolutionForwardWorkspaceSize (cu->cudnn, p->x, p->w,
          p->conv, p->y, algo, &size) != CUDNN_STATUS_SUCCESS
      || size > CONV_MAX_WORKSPACE)
    return FALSE;
  *bytes = size;
  return TRUE;
}

/* Takes ranked result @r for plan @p if it runs within the workspace
 * bound: its algorithm with the math type it was ranked under (cuDNN
 * ranks the pairs; the descriptor's own type may select a slower kernel
 * of the same algorithm), except that an exact float32 plan stays FMA.
 * Never a pair that converts float32 data to half precision (less
 * precision and range than TF32, which is all a float32 plan allows), nor
 * a nondeterministic one (the tool and a mesh's workers give the same
 * bytes). */
static gboolean
adopt (PpCudaBackend * cu, ConvPlan * p,
    const cudnnConvolutionFwdAlgoPerf_t * r)
{
  const cudnnMathType_t math = p->math == CUDNN_FMA_MATH ? CUDNN_FMA_MATH
      : r->mathType;
  gsize bytes;

  if (r->status != CUDNN_STATUS_SUCCESS
      || (p->refused & (1u << r->algo))
      || r->mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
      || r->determinism != CUDNN_DETERMINISTIC)
    return FALSE;
  if (math != p->math && cudnnSetConvolutionMathType (p->conv, math)
      != CUDNN_STATUS_SUCCESS)
    return FALSE;
  if (!usable (cu, p, r->algo, &bytes)) {
    if (math != p->math)
      PP_CUDNN_OP_TRY (cu, cudnnSetConvolutionMathType (p->conv, p->math));
    return FALSE;
  }
  p->math = math;
  p->algo = r->algo;
  p->workspace = bytes;
  return TRUE;
}

/* How many results cuDNN's ranking and trials may give: (algorithm, math
 * type) pairs, more than the algorithms. */
static int
max_results (PpCudaBackend * cu)
{
  int count = 0;

  PP_CUDNN_OP_TRY (cu, cudnnGetConvolutionForwardAlgorithmMaxCount
      (cu->cudnn, &count));
  return MAX (count, CUDNN_CONVOLUTION_FWD_ALGO_COUNT);
}

/* How the logs name math type @math. */
static const gchar *
math_name (cudnnMathType_t math)
{
  return math == CUDNN_FMA_MATH ? "FMA" : math == CUDNN_DEFAULT_MATH
      ? "default" : "tensor-op";
}

/* cuDNN's name of forward algorithm @algo, without its prefix. */
static const gchar *
algo_name (cudnnConvolutionFwdAlgo_t algo)
{
  switch (algo) {
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM:
      return "IMPLICIT_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM:
      return "IMPLICIT_PRECOMP_GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_GEMM:
      return "GEMM";
    case CUDNN_CONVOLUTION_FWD_ALGO_DIRECT:
      return "DIRECT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT:
      return "FFT";
    case CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING:
      return "FFT_TILING";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD:
      return "WINOGRAD";
    case CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED:
      return "WINOGRAD_NONFUSED";
    default:
      return "(unnamed)";
  }
}

/* Once a shape, at info level: every (algorithm, math type) cuDNN's
 * trials timed, fastest first, with its time and workspace, and the
 * failed ones' status: where a shape's time goes, and what the timed
 * choice passed over. */
static void
trials_log (PpCudaBackend * cu, const PpCudaConvKey * key,
    const cudnnConvolutionFwdAlgoPerf_t * perf, int found)
{
  g_autoptr (GString) text = NULL;
  g_autofree gchar *desc = NULL;

  if (g_log_writer_default_would_drop (G_LOG_LEVEL_INFO, G_LOG_DOMAIN))
    return;
  text = g_string_new (NULL);
  for (int i = 0; i < found; i++) {
    const cudnnConvolutionFwdAlgoPerf_t *r = &perf[i];

    g_string_append_printf (text, "%s%s %s", i > 0 ? "; " : "",
        algo_name (r->algo), math_name (r->mathType));
    if (r->status == CUDNN_STATUS_SUCCESS)
      g_string_append_printf (text, " %.3f ms, %zu bytes%s", r->time,
          r->memory, r->determinism == CUDNN_DETERMINISTIC ? ""
          : ", nondeterministic");
    else
      g_string_append_printf (text, " %s", cudnnGetErrorString (r->status));
  }
  desc = pp_cuda_conv_key_describe (key);
  g_info ("%s: cuda conv trials: %s: %s", cu->be.device, desc, text->str);
}

/* Picks the algorithm cuDNN's trials on @x, @w and @y (the op's own
 * buffers: the trials write @y, which the op then overwrites) find
 * fastest, within the workspace bound; FALSE when none ran or the trials
 * could not (the heuristics choose then).  The trials get the workspace
 * the hungriest algorithm within the bound asks for, not the bound
 * itself: the scratch buffer never shrinks. */
static gboolean
time_algorithm (PpCudaBackend * cu, ConvPlan * p, const PpCudaConvKey * key,
    gconstpointer x, gconstpointer w, gpointer y)
{
  const int count = max_results (cu);
  g_autofree cudnnConvolutionFwdAlgoPerf_t *perf =
      g_new0 (cudnnConvolutionFwdAlgoPerf_t, count);
  gsize need = 0;
  gpointer workspace = NULL;
  cudnnStatus_t status;
  int found = 0;

  for (int a = 0; a < CUDNN_CONVOLUTION_FWD_ALGO_COUNT; a++) {
    gsize bytes;

    if (usable (cu, p, (cudnnConvolutionFwdAlgo_t) a, &bytes))
      need = MAX (need, bytes);
  }
  if (need > 0)
    workspace = pp_cuda_scratch (cu, PP_CUDA_SCRATCH_WORKSPACE, need);
  /* Halted: no trial runs (conv_plan keeps no plan made now). */
  if (pp_cuda_halted (cu))
    return FALSE;
  status = cudnnFindConvolutionForwardAlgorithmEx (cu->cudnn, p->x, x, p->w,
      w, p->conv, p->y, y, count, &found, perf, workspace, need);
  /* A CUDA error under a failed trial (the search may succeed with some
   * failed) is not the next kernel's; the search waited for the device,
   * so no later work's error is hidden. */
  pp_cuda_forget_error ();
  if (status != CUDNN_STATUS_SUCCESS) {
    g_debug ("cuDNN's convolution trials say %s: the heuristics choose",
        cudnnGetErrorString (status));
    return FALSE;
  }
  trials_log (cu, key, perf, found);
  /* The results come fastest first. */
  for (int i = 0; i < found; i++)
    if (adopt (cu, p, &perf[i])) {
      if (cu->tuning != NULL) {
        g_autofree gchar *desc = pp_cuda_conv_key_describe (key);
        const gint64 kept[2] = { p->algo, p->math };

        pp_cuda_tuning_store (cu->tuning, "conv", desc, kept, 2);
      }
      return TRUE;
    }
  return FALSE;
}

/* The algorithm and math type an earlier process's trials chose for
 * @key, where they still run within the workspace bound: taken, and
 * nothing is timed. */
static gboolean
restore_algorithm (PpCudaBackend * cu, ConvPlan * p,
    const PpCudaConvKey * key)
{
  g_autofree gchar *desc = pp_cuda_conv_key_describe (key);
  cudnnConvolutionFwdAlgoPerf_t r = { 0 };
  gint64 kept[2];

  if (cu->tuning == NULL
      || !pp_cuda_tuning_lookup (cu->tuning, "conv", desc, kept, 2))
    return FALSE;
  r.status = CUDNN_STATUS_SUCCESS;
  r.determinism = CUDNN_DETERMINISTIC;
  r.algo = (cudnnConvolutionFwdAlgo_t) kept[0];
  r.mathType = (cudnnMathType_t) kept[1];
  if (kept[0] < 0 || kept[0] >= CUDNN_CONVOLUTION_FWD_ALGO_COUNT
      || !adopt (cu, p, &r)) {
    g_info ("%s: cuda conv: %s: the algorithm timed before (%s) does not "
        "run here now: timed again", cu->be.device, desc,
        kept[0] >= 0 && kept[0] < CUDNN_CONVOLUTION_FWD_ALGO_COUNT
        ? algo_name (r.algo) : "not an algorithm");
    return FALSE;
  }
  g_info ("%s: cuda conv: %s: timed before, kept in %s", cu->be.device,
      desc, pp_cuda_tuning_folder (cu->tuning));
  return TRUE;
}

/* Picks the algorithm of @key's plan @p: the heuristics' ranking, first
 * one that runs within the workspace bound. */
static void
choose_algorithm (PpCudaBackend * cu, ConvPlan * p, const PpCudaConvKey * key)
{
  /* The one cuDNN supports most widely (16-bit channels-last included)
   * first. */
  static const cudnnConvolutionFwdAlgo_t fallbacks[] = {
    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
    CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
  };
  const int count = max_results (cu);
  g_autofree cudnnConvolutionFwdAlgoPerf_t *perf =
      g_new0 (cudnnConvolutionFwdAlgoPerf_t, count);
  g_autofree gchar *desc = NULL;
  int found = 0;

  PP_CUDNN_OP_TRY (cu, cudnnGetConvolutionForwardAlgorithm_v7 (cu->cudnn,
          p->x, p->w, p->conv, p->y, count, &found, perf));
  for (int i = 0; i < found; i++)
    if (adopt (cu, p, &perf[i]))
      return;
  /* None of the ranked ones: the implicit GEMMs, which need little or no
   * workspace, when cuDNN says they run this convolution. */
  desc = pp_cuda_conv_key_describe (key);
  for (guint i = 0; i < G_N_ELEMENTS (fallbacks); i++) {
    gsize bytes;

    if (!(p->refused & (1u << fallbacks[i]))
        && usable (cu, p, fallbacks[i], &bytes)) {
      g_debug ("cuDNN ranks no usable algorithm for a %s convolution: "
          "algorithm %d", desc, fallbacks[i]);
      p->algo = fallbacks[i];
      p->workspace = bytes;
      return;
    }
  }
  pp_cuda_op_error (cu, g_error_new (PP_ERROR, PP_ERROR_DEVICE,
          "cuDNN has no algorithm for a %s convolution (%d of its ranked "
          "ones, none within %" G_GSIZE_FORMAT " bytes of workspace%s, nor an "
          "implicit GEMM)", desc, found, (gsize) CONV_MAX_WORKSPACE,
          p->refused != 0 ? " or not refused when run" : ""));
}

/* The math type a plan of @key starts from: float32 stays float32 (FMA
 * math: cuDNN's default would allow TF32 on Ampere and later), unless
 * TF32 was asked for; 16-bit inputs go to tensor cores. */
static cudnnMathType_t
plan_math (PpCudaBackend * cu, const PpCudaConvKey * key)
{
  if (key->dtype != PP_DTYPE_F32)
    return CUDNN_TENSOR_OP_MATH;
  return cu->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

/* Runs @p's convolution of @x by @w into @y.  At the plan's first run, an
 * algorithm cuDNN offered but then refuses to run (not supported, a bad
 * parameter, its kernel failing to launch) is passed over for the next
 * one, outside a capture: nothing was written. */
static void
conv_forward (PpCudaBackend * cu, ConvPlan * p, const PpCudaConvKey * key,
    gconstpointer x, gconstpointer w, gpointer y)
{
  const float one = 1.0f, zero = 0.0f;
  const cudnnMathType_t base = plan_math (cu, key);
  GError *error = NULL;

  for (;;) {
    gpointer workspace = p->workspace > 0 ? pp_cuda_scratch (cu,
        PP_CUDA_SCRATCH_WORKSPACE, p->workspace) : NULL;
    cudnnStatus_t status;
    g_autofree gchar *desc = NULL;

    /* Halted: no work, and no refusal to remember. */
    if (pp_cuda_halted (cu))
      return;
    status = cudnnConvolutionForward (cu->cudnn, &one, p->x, x,
        p->w, w, p->conv, p->algo, workspace, p->workspace, &zero, p->y, y);

    if (status == CUDNN_STATUS_SUCCESS) {
      p->ran = TRUE;
      return;
    }
    if (p->ran || pp_cuda_capturing_here (cu)
        || !pp_cudnn_refused (status)) {
      pp_cudnn_check (status, "cudnnConvolutionForward", __FILE__, __LINE__,
          &error);
      pp_cuda_op_error (cu, error);
      return;
    }
    pp_cuda_forget_error ();
    desc = pp_cuda_conv_key_describe (key);
    g_message ("%s: cuDNN refused to run algorithm %d for a %s convolution "
        "(%s): the next one", cu->be.device, p->algo, desc,
        cudnnGetErrorString (status));
    p->refused |= 1u << p->algo;
    /* The next choice starts from the plan's own math type again. */
    if (p->math != base) {
      PP_CUDNN_OP_TRY (cu, cudnnSetConvolutionMathType (p->conv, base));
      p->math = base;
    }
    choose_algorithm (cu, p, key);
  }
}

/* The descriptors @p's fused call of activation @a (0: identity, 1: ReLU)
 * needs, made at its first use; FALSE after an error (recorded as the
 * op's). */
static gboolean
fused_descriptors (PpCudaBackend * cu, ConvPlan * p,
    const PpCudaConvKey * key, int a)
{
  GError *error = NULL;

  /* The bias 1 × cout × 1 × 1: the same bytes in either format. */
  if ((p->bias == NULL
          && (!PP_CUDNN_TRY (cudnnCreateTensorDescriptor (&p->bias), &error)
              || !PP_CUDNN_TRY (cudnnSetTensor4dDescriptor (p->bias,
                      key->nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                      data_type (key->dtype), 1, key->cout, 1, 1),
                  &error)))
      || (p->act[a] == NULL
          && (!PP_CUDNN_TRY (cudnnCreateActivationDescriptor (&p->act[a]),
                  &error)
              || !PP_CUDNN_TRY (cudnnSetActivationDescriptor (p->act[a],
                      a == 1 ? CUDNN_ACTIVATION_RELU
                      : CUDNN_ACTIVATION_IDENTITY, CUDNN_NOT_PROPAGATE_NAN,
                      0.0), &error)))) {
    pp_cuda_op_error (cu, error);
    return FALSE;
  }
  return TRUE;
}

/* Whether cuDNN's fused call may run @p's convolution with @bias (of
 * @btype) and @relu, the weights being of @wtype: asked for
 * (PPDIFFUSE_CUDA_CONV_EPILOGUE), a bias of the weights' type, the
 * identity activation with IMPLICIT_PRECOMP_GEMM alone, and not an
 * activation cuDNN refused for the plan at its first fused run. */
static gboolean
fused_may_run (const PpCudaBackend * cu, const ConvPlan * p, PpView bias,
    PpCudaType btype, PpCudaType wtype, gboolean relu)
{
  return cu->conv_fused && !pp_view_is_none (bias) && btype == wtype
      && !p->fused_refused[relu ? 1 : 0] && (relu
      || p->algo == CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
}

/* Runs @p's convolution of @x by @w into @y with its bias @bias (of the
 * plan's type), the residual @res (of y's type and layout; NULL: none)
 * and @relu in cuDNN's fused call, where fused_may_run says it may:
 * relu (conv + res + bias), summed in float32 and rounded once into @y.
 * FALSE when cuDNN refuses it at the plan's first fused run with that
 * activation (nothing was written: the caller's convolution and bias
 * pass run it; a message says so, once).  TRUE when it ran, or when a
 * capture failed instead (capture_error: a fused call first met under a
 * capture is tried by the run without a graph that follows, as a new
 * plan is made). */
static gboolean
conv_forward_fused (PpCudaBackend * cu, ConvPlan * p,
    const PpCudaConvKey * key, gconstpointer x, gconstpointer w,
    gconstpointer bias, gconstpointer res, gboolean relu, gpointer y)
{
  const int a = relu ? 1 : 0;
  const float one = 1.0f, alpha2 = res != NULL ? 1.0f : 0.0f;
  const gchar *what = res != NULL
      ? (relu ? "bias, residual and ReLU" : "bias and residual")
      : (relu ? "bias and ReLU" : "bias");
  g_autofree gchar *desc = NULL;
  gpointer workspace;
  cudnnStatus_t status;

  g_assert (!p->fused_refused[a]);
  if (!p->fused_ran[a] && pp_cuda_capturing_here (cu)) {
    if (cu->capture_error == NULL) {
      desc = pp_cuda_conv_key_describe (key);
      g_set_error (&cu->capture_error, PP_ERROR, PP_ERROR_DEVICE,
          "%s: cuDNN's fused %s of a %s convolution first met inside a "
          "CUDA graph capture (a run without a graph tries it)",
          cu->be.device, what, desc);
    }
    return TRUE;
  }
  if (!fused_descriptors (cu, p, key, a))
    return TRUE;
  workspace = p->workspace > 0 ? pp_cuda_scratch (cu,
      PP_CUDA_SCRATCH_WORKSPACE, p->workspace) : NULL;
  /* Halted: no work, and no refusal to remember. */
  if (pp_cuda_halted (cu))
    return TRUE;
  /* z is y itself, unread, where there is no residual. */
  status = cudnnConvolutionBiasActivationForward (cu->cudnn, &one, p->x, x,
      p->w, w, p->conv, p->algo, workspace, p->workspace, &alpha2, p->y,
      res != NULL ? res : y, p->bias, bias, p->act[a], p->y, y);
  if (status == CUDNN_STATUS_SUCCESS) {
    if (!p->fused_ran[a]
        && !g_log_writer_default_would_drop (G_LOG_LEVEL_INFO,
            G_LOG_DOMAIN)) {
      desc = pp_cuda_conv_key_describe (key);
      g_info ("%s: cuda conv fused: %s: %s in cuDNN's epilogue (%s)",
          cu->be.device, desc, what, algo_name (p->algo));
    }
    p->fused_ran[a] = TRUE;
    return TRUE;
  }
  if (p->fused_ran[a] || pp_cuda_capturing_here (cu)
      || !pp_cudnn_refused (status)) {
    GError *error = NULL;

    pp_cudnn_check (status, "cudnnConvolutionBiasActivationForward",
        __FILE__, __LINE__, &error);
    pp_cuda_op_error (cu, error);
    return TRUE;
  }
  pp_cuda_forget_error ();
  desc = pp_cuda_conv_key_describe (key);
  g_message ("%s: cuDNN refused its fused %s for a %s convolution "
      "(algorithm %s: %s): the bias pass adds them", cu->be.device, what,
      desc, algo_name (p->algo), cudnnGetErrorString (status));
  p->fused_refused[a] = TRUE;
  return FALSE;
}

/* The plan of @key's shape; a new one's algorithm is timed on @x, @w and
 * @y when so asked.  NULL under a capture that would have to make one, or
 * when a call failed under a capture (the capture then fails), and while
 * the backend is halted (pp_cuda_halted: its buffers may be missing, and
 * a plan made now would keep a choice made without running anything). */
static ConvPlan *
conv_plan (PpCudaBackend * cu, const PpCudaConvKey * key, gconstpointer x,
    gconstpointer w, gpointer y)
{
  const cudnnDataType_t t = data_type (key->dtype);
  const int ho = pp_conv2d_out_size (key->h, key->kh, key->stride, key->pad);
  const int wo = pp_conv2d_out_size (key->w, key->kw, key->stride, key->pad);
  const cudnnTensorFormat_t format = key->nhwc ? CUDNN_TENSOR_NHWC
      : CUDNN_TENSOR_NCHW;
  const cudnnMathType_t math = plan_math (cu, key);
  ConvPlan *p = g_hash_table_lookup (cu->conv_plans, key);
  g_autofree gchar *desc = NULL;
  gboolean timed;

  if (p != NULL)
    return p;
  if (pp_cuda_halted (cu))
    return NULL;
  if (pp_cuda_capturing_here (cu)) {
    if (cu->capture_error == NULL) {
      desc = pp_cuda_conv_key_describe (key);
      g_set_error (&cu->capture_error, PP_ERROR, PP_ERROR_DEVICE,
          "%s: a %s convolution first met inside a CUDA graph capture "
          "(its plan is made by a run without a graph)", cu->be.device,
          desc);
    }
    return NULL;
  }
  p = g_new0 (ConvPlan, 1);
  PP_CUDNN_OP_TRY (cu, cudnnCreateTensorDescriptor (&p->x));
  PP_CUDNN_OP_TRY (cu, cudnnCreateTensorDescriptor (&p->y));
  PP_CUDNN_OP_TRY (cu, cudnnCreateFilterDescriptor (&p->w));
  PP_CUDNN_OP_TRY (cu, cudnnCreateConvolutionDescriptor (&p->conv));
  PP_CUDNN_OP_TRY (cu, cudnnSetTensor4dDescriptor (p->x, format, t, key->n,
          key->cin, key->h, key->w));
  PP_CUDNN_OP_TRY (cu, cudnnSetTensor4dDescriptor (p->y, format, t, key->n,
          key->cout, ho, wo));
  PP_CUDNN_OP_TRY (cu, cudnnSetFilter4dDescriptor (p->w, t, format,
          key->cout, key->cin, key->kh, key->kw));
  /* Cross-correlation is what PyTorch calls convolution; float32
   * accumulation whatever the inputs. */
  PP_CUDNN_OP_TRY (cu, cudnnSetConvolution2dDescriptor (p->conv, key->pad,
          key->pad, key->stride, key->stride, 1, 1, CUDNN_CROSS_CORRELATION,
          CUDNN_DATA_FLOAT));
  PP_CUDNN_OP_TRY (cu, cudnnSetConvolutionMathType (p->conv, math));
  p->math = math;
  timed = cu->conv_timed && (restore_algorithm (cu, p, key)
      || time_algorithm (cu, p, key, x, w, y));
  if (!timed)
    choose_algorithm (cu, p, key);
  /* Halted meanwhile (the trials' workspace did not fit): a choice made
   * on trials that did not run is not kept. */
  if (pp_cuda_halted (cu)) {
    conv_plan_free (p);
    return NULL;
  }
  g_hash_table_insert (cu->conv_plans, g_memdup2 (key, sizeof *key), p);
  /* Once a shape: which algorithm each convolution of a model runs (the
   * benchmark's profile gives their times). */
  if (g_log_writer_default_would_drop (G_LOG_LEVEL_INFO, G_LOG_DOMAIN))
    return p;
  desc = pp_cuda_conv_key_describe (key);
  g_info ("%s: cuda conv: %s: %s (%s, %s math), %" G_GSIZE_FORMAT " bytes "
      "of workspace", cu->be.device, desc, algo_name (p->algo),
      timed ? "timed" : "heuristics", math_name (p->math), p->workspace);
  return p;
}

/* Whether 16-bit weights (@wtype) read x and write y as they are: each of
 * the weights' type or float32 (the same bits as through float32 scratch:
 * a 16-bit one is what the narrowing of its widened copy gives), starting
 * where scratch would (on 256 bytes: cuDNN's and the kernels' choices may
 * follow the alignment, and so their bits). */
static gboolean
conv_as_is (PpCudaBackend * cu, PpCudaType wtype, PpView x, PpOut y)
{
  const PpCudaType xtype = pp_cuda_act_type (cu, "conv2d", "x", x.dtype);
  const PpCudaType ytype = pp_cuda_act_type (cu, "conv2d", "y", y.dtype);

  return wtype != PP_CUDA_F32
      && (xtype == PP_CUDA_F32 || xtype == wtype)
      && (ytype == PP_CUDA_F32 || ytype == wtype)
      && pp_cuda_aligned (x.data) && pp_cuda_aligned (y.data);
}

/* The residual @res (of @ytype, laid out as y's @layout) as a fused
 * epilogue reads it: in the weights' type (@key's dtype) and the
 * convolution's layout, narrowed or laid channels last into scratch where
 * it is not, so that float32 activations and channels-first ones get the
 * bits of 16-bit channels-last ones. */
static gconstpointer
epilogue_residual (PpCudaBackend * cu, const PpCudaConvKey * key,
    gconstpointer res, PpCudaType ytype, PpLayout layout)
{
  const PpCudaType wtype = key->dtype == PP_DTYPE_BF16 ? PP_CUDA_BF16
      : PP_CUDA_F16;
  const int ho = pp_conv2d_out_size (key->h, key->kh, key->stride, key->pad);
  const int wo = pp_conv2d_out_size (key->w, key->kw, key->stride, key->pad);
  const gsize count = (gsize) key->n * key->cout * ho * wo;
  const gboolean laid = key->nhwc && layout != PP_LAYOUT_NHWC;
  gpointer copy;

  if (ytype == wtype && !laid)
    return res;
  copy = pp_cuda_scratch (cu, PP_CUDA_SCRATCH_C, count * sizeof (guint16));
  if (laid)
    PP_CUDA_OP_RUN (cu, pp_cuda_transpose_typed (res, ytype, key->n,
            key->cout, ho * wo, NULL, PP_CUDA_F32, 0, copy, wtype,
            cu->stream));
  else {
    g_assert (ytype == PP_CUDA_F32);
    PP_CUDA_OP_RUN (cu, pp_cuda_narrow_2d (res, 1, count, count, copy, wtype,
            cu->stream));
  }
  return copy;
}

/* A convolution's operands as its ways read them: x, y and the residual
 * (NULL: none) where the op reads and writes them, of their activation
 * types or in float32 scratch (xtype, ytype), laid out as x_layout and
 * y_layout; the bias (of btype) and the ReLU still to be added. */
typedef struct
{
  PpCudaConvKey key;
  int ho, wo;
  PpCudaType wtype, xtype, ytype, btype;
  PpLayout x_layout, y_layout;
  const void *x, *res;
  void *y;
  PpView bias;
  gboolean relu;
} ConvOperands;

/* The 16-bit convolution of @x16 by @filter into @y16 in cuDNN: with
 * @op's bias, residual and ReLU (those it has) in its operation graph or
 * fused call where cuDNN takes them (*@fused TRUE; the residual then in
 * y16's type and layout, epilogue_residual), else the convolution alone
 * (*@fused FALSE: they are still to add).  FALSE under a failed
 * capture.  conv2d's 16-bit way and the padded one (conv_padded). */
static gboolean
conv_cudnn_16 (PpCudaBackend * cu, const ConvOperands * op,
    gconstpointer x16, gconstpointer filter, gpointer y16, gboolean * fused)
{
  const PpCudaConvKey *key = &op->key;
  gconstpointer z = NULL;
  ConvPlan *p;

  *fused = FALSE;
  if (cu->conv_graph && key->nhwc) {
    if (op->res != NULL)
      z = epilogue_residual (cu, key, op->res, op->ytype, op->y_layout);
    *fused = pp_cuda_conv_graph_run (cu, key, x16, filter,
        pp_view_is_none (op->bias) ? NULL : op->bias.data, op->btype, z,
        op->relu, y16);
    if (*fused)
      return TRUE;
  }
  p = conv_plan (cu, key, x16, filter, y16);
  if (p == NULL)
    return FALSE;
  if (fused_may_run (cu, p, op->bias, op->btype, op->wtype, op->relu)) {
    /* The residual as the graph had it, when it refused. */
    if (op->res != NULL && z == NULL)
      z = epilogue_residual (cu, key, op->res, op->ytype, op->y_layout);
    *fused = conv_forward_fused (cu, p, key, x16, filter, op->bias.data, z,
        op->relu, y16);
  }
  if (!*fused)
    conv_forward (cu, p, key, x16, filter, y16);
  return TRUE;
}

/* A 16-bit convolution whose channels are not all multiples of
 * PP_CUDA_CONV_NHWC_CHANNELS (pp_cuda_conv_padded), channels-last on
 * tensor cores with its input and output channels padded with zeros to
 * the next multiple, where it would otherwise run channels first with
 * its activations transposed around it (a model's first and last
 * convolutions: an image's 3 channels at its full size, a latent's 4).
 * One pass lays x out padded (narrowed on the way); the filter is read
 * from its padded channels-last copy; another pass takes y's channels
 * back, laid out as y is, and adds the bias, the residual and the ReLU,
 * which cuDNN's epilogue adds instead where no output channel is padded
 * (the pass then only lays y out, where y is not written as it is: of
 * the weights' type and channels last).  The zeros add nothing
 * to the sums.  FALSE, having done nothing, during a capture that would
 * have to make the filter's copy (the channels-first way then runs it). */
static gboolean
conv_padded (PpCudaBackend * cu, const PpCudaConvKey * key, PpView x_view,
    PpView weight, PpView bias, PpView residual, gboolean relu,
    PpOut y_view)
{
  const PpCudaType wtype = pp_cuda_view_type (cu, "conv2d", "weight",
      weight);
  const PpCudaType btype = pp_cuda_view_type (cu, "conv2d", "bias", bias);
  const int ho = pp_conv2d_out_size (key->h, key->kh, key->stride, key->pad);
  const int wo = pp_conv2d_out_size (key->w, key->kw, key->stride, key->pad);
  const gsize hw = (gsize) key->h * key->w, howo = (gsize) ho * wo;
  PpCudaConvKey padded = *key;
  gconstpointer filter, x16;
  gpointer y16;
  gboolean with_res = !pp_view_is_none (residual), epilogue = FALSE;

  padded.cin = pp_cuda_conv_pad_channels (key->cin);
  padded.cout = pp_cuda_conv_pad_channels (key->cout);
  padded.nhwc = TRUE;
  filter = pp_cuda_filter_nhwc (cu, weight, key, padded.cout, padded.cin);
  if (filter == NULL)
    return FALSE;
  /* The residual as the last pass reads it: laid out as y. */
  if (with_res && residual.layout != y_view.layout) {
    if (y_view.layout == PP_LAYOUT_NHWC)
      g_error ("conv2d: a channels-first residual for a channels-last "
          "output");
    residual = pp_cuda_nchw_in (cu, "conv2d", "residual", residual, key->n,
        key->cout, howo);
  }

  /* x of any activation type, laid out either way, read by the padding
   * pass, unless it is already what the convolution reads. */
  const PpCudaType xtype = pp_cuda_act_type (cu, "conv2d", "x", x_view.dtype);
  const gboolean x_nhwc = x_view.layout == PP_LAYOUT_NHWC;

  if (x_nhwc && xtype == wtype && key->cin == padded.cin
      && pp_cuda_aligned (x_view.data))
    x16 = x_view.data;
  else {
    gpointer laid = pp_cuda_scratch (cu, PP_CUDA_SCRATCH_A,
        key->n * hw * padded.cin * sizeof (guint16));

    PP_CUDA_OP_RUN (cu, pp_cuda_pad_channels (x_view.data, xtype, x_nhwc,
            key->n, key->cin, hw, laid, wtype, key->n, padded.cin,
            cu->stream));
    x16 = laid;
  }

  /* y and the residual as they are, or both through float32 scratch, as
   * the other ways take them: a residual of another type than y's, or
   * one of a 16-bit type other than the weights' (the epilogue reads it
   * in the weights' type, epilogue_residual). */
  const PpCudaType y_act = pp_cuda_act_type (cu, "conv2d", "y",
      y_view.dtype);
  const gboolean as_is = !with_res || (residual.dtype == y_view.dtype
      && (y_act == wtype || y_act == PP_CUDA_F32));
  const PpCudaType ytype = as_is ? y_act : PP_CUDA_F32;
  void *y = as_is ? y_view.data
      : pp_cuda_out_whole (cu, "conv2d", "y", y_view);
  const void *res = !with_res ? NULL : as_is ? residual.data
      : pp_cuda_in (cu, "conv2d", "residual", residual);
  const gboolean y_nhwc = y_view.layout == PP_LAYOUT_NHWC;
  /* No output channel padded: cuDNN's epilogue (the operation graph's, or
   * the fused call's) adds the bias, the residual (in y16's type and
   * layout, epilogue_residual) and the ReLU, rounded once into y16, as
   * conv2d's other ways do: float32 and channels-first activations get
   * the bits of 16-bit channels-last ones, rounded. */
  const gboolean whole = key->cout == padded.cout;
  const gboolean y_direct = whole && y_nhwc && ytype == wtype
      && pp_cuda_aligned (y);

  y16 = y_direct ? y : pp_cuda_scratch (cu, PP_CUDA_SCRATCH_B,
      key->n * howo * padded.cout * sizeof (guint16));
  const ConvOperands op = {
    .key = padded, .ho = ho, .wo = wo, .wtype = wtype, .xtype = wtype,
    .ytype = ytype, .btype = btype, .x_layout = PP_LAYOUT_NHWC,
    .y_layout = y_view.layout, .x = x16, .y = y16,
    .res = whole ? res : NULL,
    .bias = whole ? bias : pp_view_none (), .relu = whole && relu,
  };

  if (!conv_cudnn_16 (cu, &op, x16, filter, y16, &epilogue))
    return TRUE;                /* a failed capture */
  epilogue = epilogue && whole;
  if (y16 == y && (epilogue || (pp_view_is_none (bias) && !with_res
              && !relu)))
    return TRUE;
  PP_CUDA_OP_RUN (cu, pp_cuda_unpad_channels (y16, wtype, key->n,
          padded.cout, howo, y, ytype, y_nhwc, key->cout,
          epilogue ? NULL : bias.data, btype, epilogue ? NULL : res,
          !epilogue && relu, cu->stream));
  return TRUE;
}

/* A 16-bit (@t) channels-last convolution of at most
 * cu->conv_gemm_pixels output pixels as a product: its patches as the
 * rows of a matrix in scratch (pp_cuda_im2col_nhwc; a 1×1 convolution's
 * x is that matrix already), times the channels-last @filter [cout, kh ·
 * kw · cin] as a linear op's weights, with @bias (NULL: none) and @res
 * (NULL: none) in cuBLASLt's epilogue: y [n · ho · wo, cout].  FALSE,
 * having enqueued nothing cuDNN's way needs, where it does not take the
 * convolution. */
static gboolean
conv_as_product (PpCudaBackend * cu, const PpCudaConvKey * key, int ho,
    int wo, PpCudaType t, gconstpointer x, gconstpointer filter,
    gconstpointer bias, gconstpointer res, gpointer y)
{
  const gint64 rows = (gint64) key->n * ho * wo;
  const gint64 k = (gint64) key->kh * key->kw * key->cin;
  const gboolean patches = key->kh != 1 || key->kw != 1
      || key->stride != 1 || key->pad != 0;
  gconstpointer a = x;

  if (rows > cu->conv_gemm_pixels || k > G_MAXINT
      || (patches && (key->cin % 8 != 0 || (guintptr) x % 16 != 0)))
    return FALSE;
  if (patches) {
    gpointer m = pp_cuda_scratch (cu, PP_CUDA_SCRATCH_A,
        (gsize) rows * (gsize) k * sizeof (guint16));

    if (m == NULL)
      return TRUE;              /* a failed capture */
    PP_CUDA_OP_RUN (cu, pp_cuda_im2col_nhwc (x, key->n, key->h, key->w,
            key->cin, key->kh, key->kw, key->stride, key->pad, ho, wo, m,
            cu->stream));
    a = m;
  }
  return pp_cuda_product_lt (cu, t, a, filter, bias, (int) rows, (int) k,
      key->cout, res, y);
}

/* Float32 weights: exact float32 (or TF32) in cuDNN's legacy API, with
 * the bias, the residual and the ReLU in its fused call where it takes
 * them, else in a pass of the backend's own after it. */
static void
conv2d_f32 (PpCudaBackend * cu, const ConvOperands * op, gconstpointer w)
{
  ConvPlan *p = conv_plan (cu, &op->key, op->x, w, op->y);

  if (p == NULL)
    return;                     /* a failed capture */
  if (fused_may_run (cu, p, op->bias, op->btype, op->wtype, op->relu)
      && conv_forward_fused (cu, p, &op->key, op->x, w, op->bias.data,
          op->res, op->relu, op->y))
    return;
  conv_forward (cu, p, &op->key, op->x, w, op->y);
  if (!pp_view_is_none (op->bias) || op->relu || op->res != NULL)
    PP_CUDA_OP_RUN (cu, pp_cuda_channel_bias_residual (op->y, PP_CUDA_F32,
            op->y, PP_CUDA_F32, op->key.n, op->key.cout,
            (gsize) op->ho * op->wo, op->bias.data, op->btype, op->res,
            op->relu, cu->stream));
}

/* x as a 16-bit convolution reads it: as it is where it is of the
 * weights' type and in the convolution's layout, else narrowed (and,
 * channels-last, transposed) in one pass into scratch A. */
static gconstpointer
conv_x16 (PpCudaBackend * cu, const ConvOperands * op)
{
  const PpCudaConvKey *key = &op->key;
  const gsize count = (gsize) key->n * key->cin * key->h * key->w;
  const gboolean transposed = key->nhwc && op->x_layout != PP_LAYOUT_NHWC;
  gpointer packed;

  if (!transposed && op->xtype == op->wtype)
    return op->x;
  packed = pp_cuda_scratch (cu, PP_CUDA_SCRATCH_A, count * sizeof (guint16));
  if (transposed)
    PP_CUDA_OP_RUN (cu, pp_cuda_transpose_typed (op->x, op->xtype, key->n,
            key->cin, key->h * key->w, NULL, PP_CUDA_F32, 0, packed,
            op->wtype, cu->stream));
  else
    PP_CUDA_OP_RUN (cu, pp_cuda_narrow_2d (op->x, 1, count, count, packed,
            op->wtype, cu->stream));
  return packed;
}

/* y from the 16-bit convolution's @y16, in the pass that lays it out as
 * y, widens it and adds what cuDNN did not (@fused: it added the bias,
 * the residual and the ReLU). */
static void
conv_y_from_16 (PpCudaBackend * cu, const ConvOperands * op,
    gconstpointer y16, gboolean fused)
{
  const PpCudaConvKey *key = &op->key;
  const int n = key->n, cout = key->cout;
  const gsize howo = (gsize) op->ho * op->wo;
  const PpView bias = fused ? pp_view_none () : op->bias;
  const void *res = fused ? NULL : op->res;
  const gboolean relu = !fused && op->relu;

  if (key->nhwc && op->y_layout == PP_LAYOUT_NHWC) {
    /* Rows of cout channels: the bias per column, as the transpose below
     * adds it (a float sum, rounded to y's type), and the residual. */
    if (y16 != op->y || !pp_view_is_none (bias) || relu || res != NULL)
      PP_CUDA_OP_RUN (cu, pp_cuda_channel_bias_residual (y16, op->wtype,
              op->y, op->ytype, n * (int) howo, cout, 1, bias.data,
              op->btype, res, relu, cu->stream));
  } else if (key->nhwc && res != NULL) {
    /* Laid back with the bias in float32 (x16, read before it on the
     * stream, is done with scratch A), then the residual and the relu,
     * rounded once into y. */
    float *sum = pp_cuda_scratch (cu, PP_CUDA_SCRATCH_A,
        n * cout * howo * sizeof (float));

    PP_CUDA_OP_RUN (cu, pp_cuda_transpose_typed (y16, op->wtype, n,
            (int) howo, cout, bias.data, op->btype, 0, sum, PP_CUDA_F32,
            cu->stream));
    PP_CUDA_OP_RUN (cu, pp_cuda_channel_bias_residual (sum, PP_CUDA_F32,
            op->y, op->ytype, n, cout, howo, NULL, PP_CUDA_F32, res, relu,
            cu->stream));
  } else if (key->nhwc)
    PP_CUDA_OP_RUN (cu, pp_cuda_transpose_typed (y16, op->wtype, n,
            (int) howo, cout, bias.data, op->btype, relu, op->y, op->ytype,
            cu->stream));
  else if (y16 != op->y || !pp_view_is_none (bias) || relu || res != NULL)
    PP_CUDA_OP_RUN (cu, pp_cuda_channel_bias_residual (y16, op->wtype,
            op->y, op->ytype, n, cout, howo, bias.data, op->btype, res,
            relu, cu->stream));
}

/* 16-bit weights: x narrowed (and, channels-last, transposed) in one
 * pass, y produced in 16 bits and widened back (and transposed) with the
 * bias (and the relu) in another; an activation already in the weights'
 * type is read as it is, and written so, the bias (and relu) applied in
 * place.  @filter is the weights laid out channels last where @op's key
 * says so. */
static void
conv2d_16 (PpCudaBackend * cu, const ConvOperands * op, gconstpointer filter)
{
  const PpCudaConvKey *key = &op->key;
  const gsize y_count = (gsize) key->n * key->cout * op->ho * op->wo;
  const gconstpointer x16 = conv_x16 (cu, op);
  /* y in cuDNN's layout for the plan and in the weights' type is written
   * as it is. */
  const gpointer y16 = (!key->nhwc || op->y_layout == PP_LAYOUT_NHWC)
      && op->ytype == op->wtype ? op->y : pp_cuda_scratch (cu,
      PP_CUDA_SCRATCH_B, y_count * sizeof (guint16));
  gboolean fused;

  /* Few output pixels: a product (PPDIFFUSE_CUDA_CONV_GEMM). */
  if (key->nhwc && x16 == op->x && y16 == op->y && !op->relu
      && (pp_view_is_none (op->bias) || op->btype == op->wtype)
      && conv_as_product (cu, key, op->ho, op->wo, op->wtype, x16, filter,
          pp_view_is_none (op->bias) ? NULL : op->bias.data, op->res, y16))
    return;
  if (conv_cudnn_16 (cu, op, x16, filter, y16, &fused))
    conv_y_from_16 (cu, op, y16, fused);
}

void
pp_cuda_op_conv2d (PpCudaBackend * cu, PpView x_view, int n, int cin,
    int h, int w, PpView weight, PpView bias, int cout, int kh, int kw,
    int stride, int pad, PpView residual, gboolean relu, PpOut y_view)
{
  const int ho = pp_conv2d_out_size (h, kh, stride, pad);
  const int wo = pp_conv2d_out_size (w, kw, stride, pad);

  /* Refused before any copy or plan is made. */
  g_return_if_fail (n > 0 && cin > 0 && h > 0 && w > 0 && cout > 0);
  g_return_if_fail (kh > 0 && kw > 0 && stride > 0 && pad >= 0);
  g_return_if_fail (ho > 0 && wo > 0);
  /* The channels-last bias pass counts rows in an int. */
  g_return_if_fail ((gint64) n * ho * wo <= G_MAXINT);

  const PpCudaType wtype = pp_cuda_view_type (cu, "conv2d", "weight",
      weight);
  ConvOperands op = {
    .key = { n, cin, h, w, cout, kh, kw, stride, pad, weight.dtype, FALSE },
    .ho = ho, .wo = wo, .wtype = wtype,
    .btype = pp_cuda_view_type (cu, "conv2d", "bias", bias),
    .bias = bias, .relu = relu,
  };
  gconstpointer filter = weight.data;

  if (pp_cuda_conv_padded (cu->conv_layout, &op.key)
      && conv_padded (cu, &op.key, x_view, weight, bias, residual, relu,
          y_view))
    return;
  /* Channels-last activations: read and written as they are where the
   * 16-bit convolution runs channels last anyway (PPDIFFUSE_CUDA_CONV_LAYOUT
   * for the shape, its filter copy at hand: the same plan, so the same
   * bits, without the transposes it would make), else copied channels
   * first for the descriptors. */
  const gboolean keep_nhwc = (x_view.layout == PP_LAYOUT_NHWC
      || y_view.layout == PP_LAYOUT_NHWC)
      && conv_as_is (cu, wtype, x_view, y_view)
      && pp_cuda_conv_nhwc (cu->conv_layout, &op.key)
      && pp_cuda_filter_nhwc (cu, weight, &op.key, cout, cin) != NULL;

  if (!keep_nhwc) {
    x_view = pp_cuda_nchw_in (cu, "conv2d", "x", x_view, n, cin, h * w);
    y_view = pp_cuda_nchw_out_whole (cu, "conv2d", "y", y_view, n, cout,
        ho * wo);
  }
  /* The residual, laid out as y is now and read by the pass that adds the
   * bias: of y's type (so as it is when y is, else float32 scratch). */
  const gboolean with_res = !pp_view_is_none (residual);

  if (with_res && residual.layout != y_view.layout) {
    if (y_view.layout == PP_LAYOUT_NHWC)
      g_error ("conv2d: a channels-first residual for a channels-last "
          "output");
    residual = pp_cuda_nchw_in (cu, "conv2d", "residual", residual, n, cout,
        ho * wo);
  }
  /* Other activations go through float32 scratch. */
  const gboolean as_is = conv_as_is (cu, wtype, x_view, y_view)
      && (!with_res || residual.dtype == y_view.dtype);

  op.xtype = pp_cuda_act_type (cu, "conv2d", "x", x_view.dtype);
  op.ytype = pp_cuda_act_type (cu, "conv2d", "y", y_view.dtype);
  if (!as_is)
    op.xtype = op.ytype = PP_CUDA_F32;
  op.x_layout = x_view.layout;
  op.y_layout = y_view.layout;
  op.x = as_is ? x_view.data : pp_cuda_in (cu, "conv2d", "x", x_view);
  op.y = as_is ? y_view.data : pp_cuda_out_whole (cu, "conv2d", "y", y_view);
  op.res = !with_res ? NULL : as_is ? residual.data
      : pp_cuda_in (cu, "conv2d", "residual", residual);
  if (wtype == PP_CUDA_F32) {
    conv2d_f32 (cu, &op, weight.data);
    return;
  }
  /* The filter laid out channels last where the shape runs so. */
  if (pp_cuda_conv_nhwc (cu->conv_layout, &op.key)) {
    filter = pp_cuda_filter_nhwc (cu, weight, &op.key, cout, cin);
    op.key.nhwc = filter != NULL;
    if (filter == NULL)
      filter = weight.data;
  }
  g_assert (op.key.nhwc || !keep_nhwc);
  conv2d_16 (cu, &op, filter);
}

#else /* !PP_HAVE_CUDNN: the backend is not created (pp-cuda-backend.h). */

void
pp_cuda_op_conv2d (PpCudaBackend * cu, PpView x, int n, int cin, int h,
    int w, PpView weight, PpView bias, int cout, int kh, int kw, int stride,
    int pad, PpView residual, gboolean relu, PpOut y)
{
  g_error ("conv2d: the CUDA backend was built without cuDNN");
}

#endif
