/* ppdiffuse — the CUDA backend's insides, shared by its C files: the
 * per-device state, grow-only scratch buffers, fatal error checks, and
 * the ops' implementations.  Callers of pp_cuda_op_* hold the backend's
 * lock with its device current. */
#pragma once

#include <glib.h>

#include "pp-backend-impl.h"
#include "pp-cuda-attention-plan.h"
#include "pp-cuda-blocks.h"
#include "pp-cuda-conv-key.h"
#include "pp-ops.h"
#include "pp-cuda-check.h"
#include "pp-cuda-kernels.h"
#include "pp-cuda-staging.h"
#include "pp-cuda-tuning.h"

G_BEGIN_DECLS

/* Scratch buffers, each used by one op at a time (the lock serialises
 * ops), grown on demand and never shrunk. */
typedef enum
{
  PP_CUDA_SCRATCH_A,            /* an operand narrowed to 16 bits */
  PP_CUDA_SCRATCH_B,            /* the other operand, or a 16-bit output */
  PP_CUDA_SCRATCH_C,            /* a third operand narrowed (a fused
                                 * convolution's residual) */
  PP_CUDA_SCRATCH_WORKSPACE,    /* cuDNN's workspace */
  PP_CUDA_SCRATCH_SCORES,       /* attention scores */
  PP_CUDA_SCRATCH_QKV,          /* attention's q, k, v narrowed */
  PP_CUDA_SCRATCH_PROBS,        /* its 16-bit probabilities or output */
  PP_CUDA_SCRATCH_STATS,        /* a group norm's per-slice statistics */
  PP_CUDA_SCRATCH_TICKETS,      /* a group norm's counts of tiles done, 0
                                 * between ops (zeroed when made) */
  /* 16-bit activations widened for one op (pp_cuda_in, pp_cuda_out). */
  PP_CUDA_SCRATCH_ACT_0,
  PP_CUDA_SCRATCH_ACT_1,
  PP_CUDA_SCRATCH_ACT_2,
  PP_CUDA_SCRATCH_ACT_3,
  /* Channels-last activations laid out channels first for one op
   * (pp_cuda_nchw_in, pp_cuda_nchw_out). */
  PP_CUDA_SCRATCH_LAYOUT_0,
  PP_CUDA_SCRATCH_LAYOUT_1,
  PP_CUDA_SCRATCH_LAYOUT_2,
  PP_CUDA_SCRATCH_COUNT
} PpCudaScratch;

/* Pinned host buffers that uploads and downloads go through, each
 * direction its own (PpCudaStaging): two, so that filling or emptying one
 * overlaps the copy of the other; an upload's large enough that a chunk's
 * narrowing is worth spreading over the host's cores, a download's (a
 * plain copy out) smaller. */
#define PP_CUDA_STAGING_BUFFERS 2
#define PP_CUDA_STAGING_BYTES ((gsize) 32 << 20)
#define PP_CUDA_DOWN_STAGING_BYTES ((gsize) 4 << 20)

/* One direction's staging buffers, used by one transfer at a time: @lock
 * is held through the transfer, the backend's lock only while a copy is
 * enqueued.  So a transfer's waits (for its copies, which run behind all
 * the work queued on the stream before them) leave the backend to the
 * other threads meanwhile (rank 0's other thread queues its frame's work),
 * and an upload never waits for a download's buffer. */
typedef struct
{
  GMutex lock;
  guint8 *buffer[PP_CUDA_STAGING_BUFFERS];
  cudaEvent_t copied[PP_CUDA_STAGING_BUFFERS];
} PpCudaStaging;

/* PPDIFFUSE_CUDA_GROUP_NORM's ways: the split way's channels-last
 * kernels eight channels a thread, the split kernels (several blocks a
 * group; channels last where the shape has tiles), or one block a group
 * (channels first). */
typedef enum
{
  PP_CUDA_GROUP_NORM_VECTOR,
  PP_CUDA_GROUP_NORM_SPLIT,
  PP_CUDA_GROUP_NORM_WHOLE,
  /* Channels last, eight channels a thread, two launches: one pass of
   * sums, combined by the last tile of a sample to finish. */
  PP_CUDA_GROUP_NORM_TICKET,
  /* The ticket way's sums in one cooperative launch: the tiles meet,
   * then each normalises its own pixels. */
  PP_CUDA_GROUP_NORM_GRID,
} PpCudaGroupNormWay;

typedef struct
{
  PpBackend be;
  gint device;
  /* Serialises every memory call and op: rank 0 drives one backend from
   * two threads, and the stream, the handles and the scratch buffers are
   * shared. */
  GMutex lock;
  /* The thread capturing the stream into a graph, NULL when none: other
   * threads wait (capture_done) rather than enqueue into, or synchronize,
   * a stream under capture. */
  GThread *capturing;
  GCond capture_done;
  /* The first thing a capture did that a graph cannot hold (a scratch
   * buffer that had to grow, a call that failed): the capture fails with
   * it. */
  GError *capture_error;
  /* Graphs instantiated and not yet freed: they hold the scratch buffers'
   * addresses, so a buffer that grows meanwhile is retired (kept) rather
   * than freed, until the last graph goes. */
  guint graphs_live;
  GPtrArray *retired;
  cudaStream_t stream;
  cublasHandle_t cublas;
  gpointer cublas_workspace;
  /* cuBLASLt, for a linear op written straight in 16 bits with its bias
   * in the product's epilogue (gemm_out_act), and its plans per shape. */
  cublasLtHandle_t cublaslt;
  GHashTable *lt_plans;
  gboolean gemm_out_act;
  /* New cuBLASLt plans time the heuristics' algorithms
   * (PP_CUDA_GEMM_ALGO_ENV). */
  gboolean gemm_timed;
#ifdef PP_HAVE_CUDNN
  cudnnHandle_t cudnn;
  GHashTable *conv_plans;       /* PpCudaConvKey → its descriptors, algo */
  GHashTable *sdpa_plans;       /* pp-cuda-sdpa.h */
  /* The convolutions' operation graphs (pp-cuda-conv-graph.c). */
  GHashTable *conv_graphs;
  /* 16-bit filter buffer → its channels-last copy (device memory). */
  GHashTable *conv_filters;
#endif
  PpCudaConvLayout conv_layout;
  PpCudaGroupNormWay group_norm_way;
  /* PP_CUDA_LAYER_NORM_WARP (a warp per row), _BLOCK, _VECTOR or
   * _OCTET. */
  int layer_norm_way;
  /* Every device block obtained (pp_cuda_obtain) and not yet released →
   * its size: what is released is kept in @kept with it, and what is kept
   * per buffer (the filters' copies) is dropped when the buffer is
   * freed. */
  GHashTable *sizes;
  /* Released blocks, kept for reuse (pp-cuda-blocks.h). */
  PpCudaBlocks *kept;
  /* Buffers of the memory table (alloc, free) not yet freed: at none, the
   * kept blocks go back to the device. */
  guint buffers_live;
  gboolean tf32;
  gboolean wait_sleep;          /* PPDIFFUSE_CUDA_WAIT=sleep */
  gboolean filters_copied;      /* PPDIFFUSE_CUDA_FILTERS=copy */
  PpCudaAttention attention;
  /* New convolution plans time cuDNN's algorithms (else: heuristics). */
  gboolean conv_timed;
  /* Where the timed choices are kept for later processes; NULL when
   * nothing is timed, or "off" (pp-cuda-tuning.h). */
  PpCudaTuning *tuning;
  /* Convolutions add their bias, residual and ReLU in cuDNN's fused call
   * where it runs them (PP_CUDA_CONV_EPILOGUE_ENV). */
  gboolean conv_fused;
  /* 16-bit channels-last convolutions and their epilogues run as cuDNN
   * operation graphs where cuDNN has an engine for them
   * (PP_CUDA_CONV_API_ENV). */
  gboolean conv_graph;
  /* 16-bit channels-last convolutions of this many output pixels or
   * fewer run as im2col and a cuBLASLt product (PP_CUDA_CONV_GEMM_ENV;
   * 0: none). */
  int conv_gemm_pixels;
  PpCudaStaging up, down;
  struct
  {
    gpointer mem;
    gsize bytes;
  } scratch[PP_CUDA_SCRATCH_COUNT];
  /* The 16-bit activations of the op running (under the lock): widened
   * into scratch by pp_cuda_in and pp_cuda_out, the written ones narrowed
   * back by pp_cuda_acts_finish. */
  PpWidened acts[PP_CUDA_SCRATCH_ACT_3 - PP_CUDA_SCRATCH_ACT_0 + 1];
  guint n_acts;
  /* Its channels-last activations copied channels first by
   * pp_cuda_nchw_in and pp_cuda_nchw_out_whole (@wide: the copy, of the
   * activation's dtype), the written ones laid back by
   * pp_cuda_acts_finish. */
  PpWidened laid[PP_CUDA_SCRATCH_LAYOUT_2 - PP_CUDA_SCRATCH_LAYOUT_0 + 1];
  guint n_laid;
} PpCudaBackend;

/* Ends the process with @error (a failed call inside an op, which returns
 * void: a clear crash beats silent garbage), naming the device. */
G_GNUC_NORETURN void pp_cuda_fatal (PpCudaBackend * cu, GError * error);

/* Whether the calling thread is capturing @cu's stream into a graph:
 * what it enqueues is recorded, not run. */
gboolean pp_cuda_capturing_here (const PpCudaBackend * cu);
/* Clears the calling thread's last runtime error, which a call whose
 * failure is handled leaves behind (a failed capture, a library's refusal
 * that a fallback answers): the kernels' launch checks read it
 * (cudaGetLastError) and would take it for their own.  A sticky fault
 * (the device's memory) stays, and the next call reports it. */
void pp_cuda_forget_error (void);
/* A library's trial, timed on @cu's stream (outside a capture): @run
 * (@data) enqueues one run of it and says whether it could. */
typedef gboolean (*PpCudaTrialFunc) (gpointer data);
/* The mean time in ms of @runs runs of @run after one more (a warm-up),
 * waited for; a negative value when a run or the timing failed (its error
 * forgotten, the stream waited for: it is not the next kernel's).  A
 * fault of the device's meanwhile is the op's failure (pp_cuda_op_error),
 * its message naming the trial, @what. */
double pp_cuda_time_trial (PpCudaBackend * cu, const gchar * what,
    PpCudaTrialFunc run, gpointer data, int runs);
/* A call inside an op failed with @error.  On the thread capturing a
 * graph, where nothing has run yet and a call the capture cannot hold
 * fails (a library that synchronizes, an invalidated capture), the first
 * such error is kept in capture_error, the capture fails with it, and the
 * work runs without a graph.  Elsewhere the failure is real: where the
 * process keeps failures (pp_backend_halt) the backend halts, and the op
 * returns here and goes on with what work it issues skipped (the _RUN
 * checks: its buffers may be missing); otherwise the process ends
 * (pp_cuda_fatal). */
void pp_cuda_op_error (PpCudaBackend * cu, GError * error);
/* Whether a kept failure halted @cu: work is no longer enqueued. */
#define pp_cuda_halted(cu) pp_backend_is_halted (&(cu)->be)

/* Checks of calls inside ops: a failure, with the call, file:line and the
 * runtime's status text, goes to pp_cuda_op_error. */
#define PP_CUDA_OP_TRY(cu, call)                                            \
  G_STMT_START {                                                            \
    GError *pp_op_error_ = NULL;                                            \
    if (!PP_CUDA_TRY (call, &pp_op_error_))                                 \
      pp_cuda_op_error ((cu), pp_op_error_);                                \
  } G_STMT_END
#define PP_CUBLAS_OP_TRY(cu, call)                                          \
  G_STMT_START {                                                            \
    GError *pp_op_error_ = NULL;                                            \
    if (!PP_CUBLAS_TRY (call, &pp_op_error_))                               \
      pp_cuda_op_error ((cu), pp_op_error_);                                \
  } G_STMT_END
#ifdef PP_HAVE_CUDNN
#define PP_CUDNN_OP_TRY(cu, call)                                           \
  G_STMT_START {                                                            \
    GError *pp_op_error_ = NULL;                                            \
    if (!PP_CUDNN_TRY (call, &pp_op_error_))                                \
      pp_cuda_op_error ((cu), pp_op_error_);                                \
  } G_STMT_END
#endif
/* The same for calls that enqueue work on device buffers (a kernel, a
 * copy, a library's product or convolution): skipped, not made, once a
 * kept failure halted the backend, since a buffer the failed call was to
 * provide may be missing.  Calls that make, set or free handles and
 * events use the _TRY forms and always run, so that nothing is left half
 * made. */
#define PP_CUDA_OP_RUN(cu, call)                                            \
  G_STMT_START {                                                            \
    if (!pp_cuda_halted (cu))                                               \
      PP_CUDA_OP_TRY (cu, call);                                            \
  } G_STMT_END
#define PP_CUBLAS_OP_RUN(cu, call)                                          \
  G_STMT_START {                                                            \
    if (!pp_cuda_halted (cu))                                               \
      PP_CUBLAS_OP_TRY (cu, call);                                          \
  } G_STMT_END

/* Device memory: every block the backend uses (buffers, scratch, the
 * filters' copies) comes from pp_cuda_obtain and goes back through
 * pp_cuda_release, which keeps it for reuse rather than freeing it
 * (pp-cuda-blocks.h says why).  Every user of a block is either ordered on
 * the backend's stream or waited for by the host before the release (an
 * NCCL transfer returns once its event is done), so a block is handed out
 * again without a synchronize: the next user's work queues behind the
 * last one's (a next user on another stream, an NCCL receive into a
 * tensor just allocated, waits for a fence first: pp_chunk_fit_tensor).
 * A block a graph may launch on is not released until no graph is left
 * (the retired list).  With the lock held. */
/* A block of at least @bytes, kept or new; when the device is full, the
 * kept blocks go back to it and the allocation is tried once more.  NULL
 * with @error when it still fails. */
gpointer pp_cuda_obtain (PpCudaBackend * cu, gsize bytes, GError ** error);
/* Keeps @mem, obtained by pp_cuda_obtain, for reuse. */
void pp_cuda_release (PpCudaBackend * cu, gpointer mem);
/* The size of obtained block @mem (0 for another pointer). */
gsize pp_cuda_block_size (PpCudaBackend * cu, gconstpointer mem);
/* Frees the kept blocks (after a synchronize: the stream may still use
 * them); returns the bytes given back.  Never during a capture. */
gsize pp_cuda_give_back_kept (PpCudaBackend * cu);

/* What scratch buffer @slot holds, for messages. */
const gchar *pp_cuda_scratch_name (PpCudaScratch slot);
/* Scratch buffer @slot with at least @bytes; aborts when the device is out
 * of memory. */
gpointer pp_cuda_scratch (PpCudaBackend * cu, PpCudaScratch slot,
    gsize bytes);
/* How view @v (parameter @param of op @op) is stored, for the kernels'
 * type dispatch; ends the process for a dtype no kernel here reads (the
 * wrappers refuse it first: PpBackend.view_dtypes). */
PpCudaType pp_cuda_view_type (PpCudaBackend * cu, const char *op,
    const char *param, PpView v);
/* pp_cuda_view_type for an operand a product reads as a matrix (linear's
 * w and b, matmul's a and b): a convolution's 16-bit filter laid out
 * channels last in its own bytes among the view's (one weight read by a
 * convolution and by a product) is laid back first
 * (pp_cuda_conv_filters_read), so that the product reads what was
 * uploaded. */
PpCudaType pp_cuda_operand_type (PpCudaBackend * cu, const char *op,
    const char *param, PpView v);

/* The float32 data of activation @v (parameter @param of op @op), NULL
 * when it is absent: the kernels read and write activations as float32.
 * A 16-bit one (F16, BF16) is widened into scratch for the op; ends the
 * process for any other dtype (the wrappers refuse it first). */
const float *pp_cuda_in (PpCudaBackend * cu, const char *op,
    const char *param, PpView v);
/* The same for an activation the op writes, or updates in place: a 16-bit
 * one is widened (its contents too: an op may read it, or write only part
 * of it) and narrowed back by pp_cuda_acts_finish. */
float *pp_cuda_out (PpCudaBackend * cu, const char *op, const char *param,
    PpOut o);
/* The same for an activation the op writes whole without reading it: its
 * scratch is not filled first. */
float *pp_cuda_out_whole (PpCudaBackend * cu, const char *op,
    const char *param, PpOut o);
/* The storage type of activation @param of @op, of @dtype (F32, F16,
 * BF16), for a kernel that reads or writes it as it is; ends the process
 * for any other dtype (the wrappers refuse it first). */
PpCudaType pp_cuda_act_type (PpCudaBackend * cu, const char *op,
    const char *param, PpDType dtype);
/* Whether device memory at @p starts on the 256 bytes scratch and
 * cudaMalloc start on: a library handed an activation as it is (not a
 * scratch copy) then makes the choices, and gives the bits, it would for
 * the copy. */
static inline gboolean
pp_cuda_aligned (gconstpointer p)
{
  return (guintptr) p % 256 == 0;
}
/* Spatial activation @v [n, c, hw] of op @op channels first: itself when
 * it is so laid out (or absent), else a copy in scratch of its dtype.
 * The kernels here read spatial tensors channels first; a native
 * channels-last kernel reads the view as it is instead. */
PpView pp_cuda_nchw_in (PpCudaBackend * cu, const char *op,
    const char *param, PpView v, int n, int c, int hw);
/* The same for a spatial activation the op writes whole without reading
 * it (its copy is not filled first), laid back channels last by
 * pp_cuda_acts_finish.  (An op that updates a channels-last view in place
 * reads it as it is: add_channel.) */
PpOut pp_cuda_nchw_out_whole (PpCudaBackend * cu, const char *op,
    const char *param, PpOut o, int n, int c, int hw);
/* After an op: narrows its written 16-bit activations back from their
 * scratch (round to nearest even), lays its written channels-last ones
 * back (pp_cuda_nchw_out_whole), and forgets them. */
void pp_cuda_acts_finish (PpCudaBackend * cu);

/* The ops, in pp-cuda-ops.c (kernels), pp-cuda-gemm.c (cuBLAS),
 * pp-cuda-conv.c (cuDNN) and pp-cuda-attention.c. */
#define PP_CUDA_OP_DECL(name, NAME, params, args, flops, views) \
  void pp_cuda_op_##name (PpCudaBackend * cu, PP_OPS_UNPAREN params);
PP_OPS_LIST (PP_CUDA_OP_DECL)
#undef PP_CUDA_OP_DECL

/* cuBLAS's name of @t (pp-cuda-gemm.c). */
cudaDataType_t pp_cuda_data_type (PpCudaType t);

/* The linear op's plans on cuBLASLt (pp-cuda-gemm.c). */
GHashTable *pp_cuda_lt_plans_new (void);

/* y [rows, out] = x [rows, in] · wᵀ (w [out, in]) + b [out] (NULL: none)
 * + c [rows, out] (NULL: none; may be y), all of 16-bit type @t, in one
 * cuBLASLt call, summed in float32 and rounded once (the linear op's
 * plans, PPDIFFUSE_CUDA_GEMM_ALGO's choice); FALSE when cuBLASLt cannot
 * run it, having enqueued nothing. */
gboolean pp_cuda_product_lt (PpCudaBackend * cu, PpCudaType t,
    gconstpointer x, gconstpointer w, gconstpointer b, int rows, int in,
    int out, gconstpointer c, gpointer y);

/* y [m,n] (ld ldy) = alpha · op(a) · op(b) + beta · y, row-major, a and b
 * stored as @ta and @tb (their views' dtypes), y as @ty (float32, or the
 * operands' 16-bit type); the matmul op's semantics with a scale, for
 * linear and matmul. */
void pp_cuda_gemm (PpCudaBackend * cu, gboolean trans_a, gboolean trans_b,
    int m, int n, int k, float alpha, gconstpointer a, PpCudaType ta,
    int lda, gconstpointer b, PpCudaType tb, int ldb, float beta,
    gpointer y, PpCudaType ty, int ldy);

#ifdef PP_HAVE_CUDNN
/* Whether cuDNN's @status refuses a call (not supported, a parameter it
 * will not take, an execution it could not start): at a plan's first run
 * outside a capture, another way may take the work.  Any other status (an
 * internal error, a device's fault) is the op's failure. */
static inline gboolean
pp_cudnn_refused (cudnnStatus_t status)
{
  const int category = CUDNN_STATUS_CATEGORY (status);

  return category == CUDNN_STATUS_NOT_SUPPORTED
      || category == CUDNN_STATUS_BAD_PARAM
      || category == CUDNN_STATUS_EXECUTION_FAILED;
}

/* The convolutions' per-shape plans (pp-cuda-conv.c, pp-cuda-conv-graph.c). */
GHashTable *pp_cuda_conv_plans_new (void);
GHashTable *pp_cuda_conv_graphs_new (void);
/* Runs the 16-bit channels-last convolution of @key (x, the filter's
 * channels-last copy w and y all of the weights' type) as one cuDNN
 * operation graph with its epilogue: y = relu ((conv + bias) + res),
 * each part where given (@bias NULL: none, else of @btype, [cout]; @res
 * NULL: none, else of y's type and layout), summed in float32 and rounded
 * once.  TRUE when it ran, or when it failed or a capture failed instead
 * (the op's error, or the capture's: a graph first met under a capture is
 * planned by the run without one that follows); FALSE when cuDNN has no
 * engine for the graph (said once at info level) or a pointer is not on
 * 16 bytes: nothing was written, and the caller runs it the legacy way. */
gboolean pp_cuda_conv_graph_run (PpCudaBackend * cu,
    const PpCudaConvKey * key, gconstpointer x, gconstpointer w,
    gconstpointer bias, PpCudaType btype, gconstpointer res, gboolean relu,
    gpointer y);
#endif
/* The convolutions' filters laid out channels last (pp-cuda-filters.c):
 * the table of them, cu->conv_filters. */
GHashTable *pp_cuda_conv_filters_new (void);
/* The channels-last copy ([cout_pad, kh, kw, cin_pad]: past @key's
 * channels, zeros) of 16-bit filter @weight of @key's shape, made on its
 * first use and kept until its buffer is freed
 * (pp_cuda_conv_filters_forget: a buffer of that address later is another
 * filter); a copy of another shape, padding or dtype at the same address
 * is made again.  An unpadded 1×1 filter is its own copy.  NULL during a
 * capture that would have to make it (the convolution then runs
 * channels-first).
 *
 * An unpadded filter is laid channels last in place, no copy made, where
 * no graph may read it channels first: none is live and none is being
 * captured (a graph captured while the filter was not yet laid out read
 * it channels first).  Its layout is the same at every use (the
 * convolution's layout follows its channels, pp_cuda_conv_nhwc), so only
 * conv2d's channels-last path reads it; a transfer from it or a write to
 * part of it lays it back first (pp_cuda_conv_filters_read,
 * pp_cuda_conv_filters_forget).  A 16-bit UNet's filters need no second
 * copy so: 1 GiB of SD-Turbo's 2.9 (docs/perf.md).  PPDIFFUSE_CUDA_FILTERS
 * =copy makes copies always (the way before). */
gconstpointer pp_cuda_filter_nhwc (PpCudaBackend * cu, PpView weight,
    const PpCudaConvKey * key, int cout_pad, int cin_pad);
/* Drops what the convolutions keep of filters among the @bytes at @mem
 * (being freed or written); a filter laid channels last in place and
 * written in part is laid back first. */
void pp_cuda_conv_filters_forget (PpCudaBackend * cu, gconstpointer mem,
    gsize bytes);
/* Lays back channels first the filters laid channels last in place among
 * the @bytes at @mem (about to be read by a transfer). */
void pp_cuda_conv_filters_read (PpCudaBackend * cu, gconstpointer mem,
    gsize bytes);
/* Drops the filters' copies and keeps those laid out in place (the
 * filters' own bytes, which stay as they are: after a kept failure). */
void pp_cuda_conv_filters_trim (PpCudaBackend * cu);

/* Kernel traces (PpBackendMemory.trace_enable and .trace,
 * pp-cuda-trace.c). */
gboolean pp_cuda_trace_enable (PpBackend * be, GError ** error);
GArray *pp_cuda_trace (PpBackend * be, PpGraphFunc func, gpointer data,
    GError ** error);

G_END_DECLS
