/* ppdiffuse — the cuda backend: device memory, staging, the stream and
 * library handles of one GPU, and its op table (generated from
 * PP_OPS_LIST as the CPU backends' are: lock, make the device current, run
 * the op, unlock). */
#include "pp-cuda-backend.h"
#include "pp-cuda-arch.h"
#include "pp-cuda-choice.h"
#include "pp-cuda-private.h"
#include "pp-cuda-staging.h"
#ifdef PP_HAVE_CUDNN
#include "pp-cuda-sdpa.h"
#endif
#include "pp-error.h"

#include <string.h>

/* Blocks start on 256 bytes (cudaMalloc's alignment, and the blocks'
 * sizes are multiples of it); the backend promises it (the 16-bit GEMM
 * and vector loads want it) and checks it. */
#define CUDA_BUFFER_ALIGN 256
G_STATIC_ASSERT (PP_CUDA_BLOCK_ALIGN % CUDA_BUFFER_ALIGN == 0);
/* cuBLAS's workspace: what its guide advises for Hopper (more than
 * earlier GPUs need). */
#define CUDA_CUBLAS_WORKSPACE ((gsize) 32 << 20)
/* Device indices the process-wide table has room for. */
#define CUDA_MAX_DEVICES 64

/* Scratch */

/* Releases the retired blocks once no graph can launch on them (a launch
 * still queued comes before their next user's work). */
static void
free_retired (PpCudaBackend * cu)
{
  if (cu->graphs_live > 0 || cu->retired->len == 0)
    return;
  for (guint i = 0; i < cu->retired->len; i++)
    pp_cuda_release (cu, g_ptr_array_index (cu->retired, i));
  g_ptr_array_set_size (cu->retired, 0);
}

static void
enter (PpCudaBackend * cu)
{
  g_mutex_lock (&cu->lock);
  while (cu->capturing != NULL && cu->capturing != g_thread_self ())
    g_cond_wait (&cu->capture_done, &cu->lock);
  /* The calling thread may have another device current (several backends
   * in one process). */
  PP_CUDA_OP_TRY (cu, cudaSetDevice (cu->device));
}

static void
leave (PpCudaBackend * cu)
{
  g_mutex_unlock (&cu->lock);
}

/* Whether the calling thread is capturing a graph, which may not @what
 * (upload, download, synchronize, free): a copy from the staging buffers
 * would become a node that copies whatever was staged last at every
 * launch, and a synchronize would break the capture.  The capture then
 * fails with the reason, and the work reruns without a graph. */
static gboolean
refused_in_capture (PpCudaBackend * cu, const gchar * what)
{
  if (!pp_cuda_capturing_here (cu))
    return FALSE;
  if (cu->capture_error == NULL)
    g_set_error (&cu->capture_error, PP_ERROR, PP_ERROR_DEVICE,
        "%s: %s inside a CUDA graph capture (captured work may only "
        "compute on device memory)", cu->be.device ? cu->be.device : "?",
        what);
  return TRUE;
}

/* Memory */

static gpointer
cuda_alloc (PpBackend * be, gsize bytes, GError ** error)
{
  PpCudaBackend *cu = be->priv;
  gpointer mem;

  /* Halted: it takes no more of the device, its failure answers. */
  if (!pp_backend_running (be, error))
    return NULL;
  enter (cu);
  mem = pp_cuda_obtain (cu, bytes, error);
  if (mem != NULL)
    cu->buffers_live++;
  leave (cu);
  if (mem == NULL) {
    g_prefix_error (error, "%s: %" G_GSIZE_FORMAT " bytes: ", be->device,
        bytes);
    return NULL;
  }
  g_assert ((guintptr) mem % CUDA_BUFFER_ALIGN == 0);
  return mem;
}

static void
cuda_free (PpBackend * be, gpointer mem)
{
  PpCudaBackend *cu = be->priv;
  gsize bytes;

  enter (cu);
  bytes = pp_cuda_block_size (cu, mem);
  g_assert (bytes > 0 && cu->buffers_live > 0);
  cu->buffers_live--;
  pp_cuda_conv_filters_forget (cu, mem, bytes);
  if (refused_in_capture (cu, "a free")) {
    /* The buffer and its filter copies wait in the retired list until no
     * graph can launch on them (free_retired). */
    g_ptr_array_add (cu->retired, mem);
  } else {
    /* Kept, not freed: enqueued work that still uses it comes before its
     * next user's, and a cudaFree would wait for every kernel of the
     * device (pp-cuda-blocks.h). */
    pp_cuda_release (cu, mem);
    /* Nothing in use (a pipeline closed): the memory goes back. */
    if (cu->buffers_live == 0)
      pp_cuda_give_back_kept (cu);
  }
  leave (cu);
}

/* Waits for a staging copy, outside the backend's lock (a transfer
 * holds its direction's lock only): no capture is refused here, so a
 * failure is any op's outside one (pp_cuda_op_error), with the lock
 * taken for it. */
static void
staging_wait (PpCudaBackend * cu, cudaEvent_t copied)
{
  GError *error = NULL;

  if (!PP_CUDA_TRY (cudaEventSynchronize (copied), &error)) {
    enter (cu);
    pp_cuda_op_error (cu, error);
    leave (cu);
  }
}

/* Copies @count elements of host @src (@src_dtype) to device @dst
 * (@dst_dtype), through the upload staging buffers (pp-cuda-staging.h
 * converts): while one buffer's copy runs, the host fills the other.
 * Returns once the host has staged everything: @src may be reused at
 * once, and the events keep a buffer from being refilled before its copy
 * has left it; work enqueued later on the stream sees the data.  The
 * backend's lock is taken for each copy's enqueueing only; FALSE, with
 * nothing copied, when the calling thread captures a graph (@what is
 * refused there). */
static gboolean
staged_upload (PpCudaBackend * cu, guint8 * dst, gconstpointer src,
    gsize count, PpDType src_dtype, PpDType dst_dtype, const gchar * what)
{
  PpCudaStaging *st = &cu->up;
  PpStagingPlan plan;
  GError *error = NULL;
  gboolean refused;
  gsize chunks;

  enter (cu);
  refused = refused_in_capture (cu, what);
  leave (cu);
  if (refused)
    return FALSE;
  if (!pp_staging_plan_init (&plan, count, src_dtype, dst_dtype,
          PP_CUDA_STAGING_BYTES, &error))
    pp_cuda_fatal (cu, error);
  chunks = pp_staging_n_chunks (&plan);
  g_mutex_lock (&st->lock);
  for (gsize i = 0; i < chunks; i++) {
    const guint b = i % PP_CUDA_STAGING_BUFFERS;
    const PpStagingChunk c = pp_staging_chunk (&plan, i);

    staging_wait (cu, st->copied[b]);
    pp_staging_fill (&plan, &c, st->buffer[b], src);
    enter (cu);
    /* A filter written over has a channels-last copy no longer. */
    pp_cuda_conv_filters_forget (cu, dst + c.dst_offset, c.dst_bytes);
    PP_CUDA_OP_RUN (cu, cudaMemcpyAsync (dst + c.dst_offset,
            st->buffer[b], c.dst_bytes, cudaMemcpyHostToDevice,
            cu->stream));
    PP_CUDA_OP_TRY (cu, cudaEventRecord (st->copied[b], cu->stream));
    leave (cu);
  }
  g_mutex_unlock (&st->lock);
  return TRUE;
}

static void
cuda_upload (PpBackend * be, gpointer dst, gconstpointer src, gsize bytes)
{
  staged_upload (be->priv, dst, src, bytes, PP_DTYPE_U8, PP_DTYPE_U8,
      "an upload");
}

/* Copies @bytes of device @src to host @dst through the download staging
 * buffers: chunk i + 1 is copied to the device's other buffer while the
 * host copies chunk i out of its own.  Each copy runs behind the work
 * queued before it, which the host waits for without the backend's lock:
 * another thread queues its work meanwhile (pp-cuda-private.h,
 * PpCudaStaging). */
static void
cuda_download (PpBackend * be, gpointer dst, gconstpointer src, gsize bytes)
{
  PpCudaBackend *cu = be->priv;
  PpCudaStaging *st = &cu->down;
  const gsize chunks = (bytes + PP_CUDA_DOWN_STAGING_BYTES - 1)
      / PP_CUDA_DOWN_STAGING_BYTES;
  gboolean refused;

  enter (cu);
  refused = refused_in_capture (cu, "a download");
  /* A filter laid out in place is read as its owner wrote it. */
  if (!refused)
    pp_cuda_conv_filters_read (cu, src, bytes);
  leave (cu);
  if (refused)
    return;
  g_mutex_lock (&st->lock);
  for (gsize i = 0; i <= chunks; i++) {
    if (i < chunks) {
      const guint b = i % PP_CUDA_STAGING_BUFFERS;
      const gsize off = i * PP_CUDA_DOWN_STAGING_BYTES;

      enter (cu);
      PP_CUDA_OP_RUN (cu, cudaMemcpyAsync (st->buffer[b],
              (const guint8 *) src + off, MIN (PP_CUDA_DOWN_STAGING_BYTES,
                  bytes - off), cudaMemcpyDeviceToHost, cu->stream));
      PP_CUDA_OP_TRY (cu, cudaEventRecord (st->copied[b], cu->stream));
      leave (cu);
    }
    if (i > 0) {
      const guint b = (i - 1) % PP_CUDA_STAGING_BUFFERS;
      const gsize off = (i - 1) * PP_CUDA_DOWN_STAGING_BYTES;

      staging_wait (cu, st->copied[b]);
      memcpy ((guint8 *) dst + off, st->buffer[b],
          MIN (PP_CUDA_DOWN_STAGING_BYTES, bytes - off));
    }
  }
  g_mutex_unlock (&st->lock);
}

static void
cuda_copy (PpBackend * be, gpointer dst, gconstpointer src, gsize bytes)
{
  PpCudaBackend *cu = be->priv;

  enter (cu);
  /* A filter laid out in place is read as its owner wrote it. */
  pp_cuda_conv_filters_read (cu, src, bytes);
  pp_cuda_conv_filters_forget (cu, dst, bytes);
  PP_CUDA_OP_RUN (cu, cudaMemcpyAsync (dst, src, bytes,
          cudaMemcpyDeviceToDevice, cu->stream));
  leave (cu);
}

static void
cuda_fill (PpBackend * be, gpointer dst, float value, gsize n)
{
  PpCudaBackend *cu = be->priv;

  enter (cu);
  pp_cuda_conv_filters_forget (cu, dst, n * sizeof (float));
  PP_CUDA_OP_RUN (cu, pp_cuda_fill (dst, value, n, cu->stream));
  leave (cu);
}

static void
cuda_synchronize (PpBackend * be)
{
  PpCudaBackend *cu = be->priv;

  enter (cu);
  if (!refused_in_capture (cu, "a synchronize"))
    PP_CUDA_OP_TRY (cu, cudaStreamSynchronize (cu->stream));
  leave (cu);
}

/* The weights are narrowed on the host, into the staging buffers, so that
 * only their stored size crosses the bus and no float32 copy of them is
 * ever on the device. */
static gpointer
cuda_upload_weights (PpBackend * be, const float *src, gsize n,
    PpDType dtype, GError ** error)
{
  PpCudaBackend *cu = be->priv;
  const gsize size = dtype == PP_DTYPE_F32 ? sizeof (float)
      : sizeof (guint16);
  gpointer mem = cuda_alloc (be, MAX (n * size, 1), error);

  if (mem == NULL)
    return NULL;
  staged_upload (cu, mem, src, n, PP_DTYPE_F32, dtype, "a weights upload");
  return mem;
}

/* A captured graph, instantiated, and what it held. */
typedef struct
{
  cudaGraphExec_t exec;
  guint nodes, kernels;
} CudaGraph;

/* @graph's nodes and, of them, its kernel nodes (in @counted); FALSE
 * where the runtime did not say. */
static gboolean
count_nodes (cudaGraph_t graph, CudaGraph * counted)
{
  size_t n = 0;
  g_autofree cudaGraphNode_t *nodes = NULL;

  if (cudaGraphGetNodes (graph, NULL, &n) != cudaSuccess)
    return FALSE;
  nodes = g_new0 (cudaGraphNode_t, MAX (n, 1));
  if (cudaGraphGetNodes (graph, nodes, &n) != cudaSuccess)
    return FALSE;
  counted->nodes = (guint) n;
  for (size_t i = 0; i < n; i++) {
    enum cudaGraphNodeType type;

    if (cudaGraphNodeGetType (nodes[i], &type) != cudaSuccess)
      return FALSE;
    counted->kernels += type == cudaGraphNodeTypeKernel;
  }
  return TRUE;
}

/* CUDA graphs: the stream is captured (relaxed mode: the ops may still
 * grow a scratch buffer with cudaMalloc) while @func issues its ops, and the
 * graph is instantiated once.  The backend's lock is not held across the
 * capture (each op takes it), but other threads wait in enter () until the
 * capture ends: nothing of theirs may land in the graph, and a synchronize
 * of a capturing stream (a worker's sender before an NCCL send) would
 * break it. */
static gpointer
cuda_graph_capture (PpBackend * be, PpGraphFunc func, gpointer data,
    GError ** error)
{
  PpCudaBackend *cu = be->priv;
  cudaGraph_t graph = NULL;
  cudaGraphExec_t exec = NULL;
  CudaGraph *captured = NULL;
  cudaError_t ended;
  gboolean ok;

  enter (cu);
  ok = PP_CUDA_TRY (cudaStreamBeginCapture (cu->stream,
          cudaStreamCaptureModeRelaxed), error);
  if (ok)
    cu->capturing = g_thread_self ();
  else
    pp_cuda_forget_error ();
  leave (cu);
  if (!ok)
    return NULL;
  ok = func (data, error);
  enter (cu);
  ended = cudaStreamEndCapture (cu->stream, &graph);
  cu->capturing = NULL;
  g_cond_broadcast (&cu->capture_done);
  if (ok && cu->capture_error != NULL) {
    g_propagate_error (error, g_steal_pointer (&cu->capture_error));
    ok = FALSE;
  }
  g_clear_error (&cu->capture_error);
  if (ok)
    ok = pp_cuda_check (ended, "cudaStreamEndCapture", __FILE__, __LINE__,
        error) && PP_CUDA_TRY (cudaGraphInstantiate (&exec, graph, 0), error);
  if (ok) {
    captured = g_new0 (CudaGraph, 1);
    captured->exec = exec;
    /* For the benchmarks; a runtime that does not say leaves them 0. */
    if (!count_nodes (graph, captured)) {
      pp_cuda_forget_error ();
      captured->nodes = captured->kernels = 0;
    }
  }
  if (graph != NULL)
    cudaGraphDestroy (graph);
  if (ok) {
    cu->graphs_live++;
  } else {
    pp_cuda_forget_error ();
    free_retired (cu);
  }
  leave (cu);
  return captured;
}

static gboolean
cuda_graph_nodes (PpBackend * be, gpointer graph, guint * nodes,
    guint * kernels)
{
  const CudaGraph *g = graph;

  (void) be;
  *nodes = g->nodes;
  *kernels = g->kernels;
  return g->nodes > 0;
}

static gboolean
cuda_graph_launch (PpBackend * be, gpointer graph, GError ** error)
{
  PpCudaBackend *cu = be->priv;
  gboolean ok;

  enter (cu);
  ok = PP_CUDA_TRY (cudaGraphLaunch (((CudaGraph *) graph)->exec,
          cu->stream), error);
  /* Answered by @error (a sticky fault stays, and is reported again). */
  if (!ok)
    pp_cuda_forget_error ();
  leave (cu);
  return ok;
}

static void
cuda_graph_free (PpBackend * be, gpointer graph)
{
  PpCudaBackend *cu = be->priv;

  enter (cu);
  /* A launch of it may still run (a graph is dropped when what it was
   * captured with is about to be replaced). */
  PP_CUDA_OP_TRY (cu, cudaStreamSynchronize (cu->stream));
  cudaGraphExecDestroy (((CudaGraph *) graph)->exec);
  g_free (graph);
  g_assert (cu->graphs_live > 0);
  cu->graphs_live--;
  free_retired (cu);
  leave (cu);
}

/* Profiles' marks and the data planes' fences: events on the compute
 * stream.  An event of @flags recorded behind the work issued so far, a
 * host thread's wait for it sleeping with PPDIFFUSE_CUDA_WAIT=sleep;
 * none during a capture (an event recorded there would become a node of
 * the graph). */
static gpointer
record_event (PpBackend * be, unsigned int flags)
{
  PpCudaBackend *cu = be->priv;
  cudaEvent_t event = NULL;

  enter (cu);
  if (cu->capturing == NULL) {
    PP_CUDA_OP_TRY (cu, cudaEventCreateWithFlags (&event, flags
            | (cu->wait_sleep ? cudaEventBlockingSync : 0)));
    PP_CUDA_OP_TRY (cu, cudaEventRecord (event, cu->stream));
  }
  leave (cu);
  return event;
}

static gpointer
cuda_mark (PpBackend * be)
{
  return record_event (be, cudaEventDefault);
}

static gdouble
cuda_elapsed (PpBackend * be, gpointer from, gpointer to)
{
  PpCudaBackend *cu = be->priv;
  float ms = 0;

  enter (cu);
  PP_CUDA_OP_TRY (cu, cudaEventSynchronize ((cudaEvent_t) to));
  PP_CUDA_OP_TRY (cu, cudaEventElapsedTime (&ms, (cudaEvent_t) from,
          (cudaEvent_t) to));
  leave (cu);
  return ms / 1e3;
}

/* The hold: a host function on the stream that sleeps; the work queued
 * behind it starts when it returns. */
static void CUDART_CB
hold_on_host (void *data)
{
  g_usleep ((gulong) GPOINTER_TO_SIZE (data));
}

static gboolean
cuda_hold (PpBackend * be, gdouble seconds)
{
  PpCudaBackend *cu = be->priv;
  gboolean held = FALSE;

  enter (cu);
  if (cu->capturing == NULL) {
    PP_CUDA_OP_TRY (cu, cudaLaunchHostFunc (cu->stream, hold_on_host,
            GSIZE_TO_POINTER ((gsize) (seconds * 1e6))));
    held = TRUE;
  }
  leave (cu);
  return held;
}

/* A mark or a fence. */
static void
cuda_event_free (PpBackend * be, gpointer event)
{
  PpCudaBackend *cu = be->priv;

  if (event == NULL)
    return;
  enter (cu);
  PP_CUDA_OP_TRY (cu, cudaEventDestroy ((cudaEvent_t) event));
  leave (cu);
}

/* Fences: events without timing (cheaper to record and wait on than the
 * profile's marks); @stream's later work waits for one on the device. */
static gpointer
cuda_fence (PpBackend * be)
{
  return record_event (be, cudaEventDisableTiming);
}

static void
cuda_fence_wait (PpBackend * be, gpointer fence, gpointer stream)
{
  PpCudaBackend *cu = be->priv;

  enter (cu);
  PP_CUDA_OP_TRY (cu, cudaStreamWaitEvent ((cudaStream_t) stream,
          (cudaEvent_t) fence, 0));
  leave (cu);
}

/* After a kept failure (pp_backend_recover): unless a graph may still
 * launch on them, the scratch buffers, the filters' copies and every plan
 * and choice made per shape (cuBLASLt's, cuDNN's convolutions, graphs
 * and fused attention, with what they refused) are dropped, so that
 * nothing the failure cut short is kept; then the blocks kept for reuse
 * go back to the device, so that the work tried next has the most
 * room. */
static void
cuda_trim (PpBackend * be)
{
  PpCudaBackend *cu = be->priv;

  enter (cu);
  /* Work queued before the failure may still use what goes (a cuDNN
   * plan's execution reads the plan). */
  PP_CUDA_OP_TRY (cu, cudaStreamSynchronize (cu->stream));
  if (cu->graphs_live == 0) {
    for (guint s = 0; s < PP_CUDA_SCRATCH_COUNT; s++) {
      if (cu->scratch[s].mem != NULL)
        pp_cuda_release (cu, cu->scratch[s].mem);
      cu->scratch[s].mem = NULL;
      cu->scratch[s].bytes = 0;
    }
#ifdef PP_HAVE_CUDNN
    pp_cuda_conv_filters_trim (cu);
    g_hash_table_remove_all (cu->conv_plans);
    g_hash_table_remove_all (cu->conv_graphs);
    g_hash_table_remove_all (cu->sdpa_plans);
#endif
    g_hash_table_remove_all (cu->lt_plans);
    free_retired (cu);
  }
  pp_cuda_give_back_kept (cu);
  leave (cu);
}

static void
cuda_give_back (PpBackend * be)
{
  PpCudaBackend *cu = be->priv;

  enter (cu);
  /* Not while a thread captures a graph: a cudaFree would end the
   * capture (the capture frees nothing it would need back). */
  if (cu->capturing == NULL)
    pp_cuda_give_back_kept (cu);
  leave (cu);
}

static const PpBackendMemory cuda_memory = {
  .alloc = cuda_alloc,
  .free = cuda_free,
  .upload = cuda_upload,
  .download = cuda_download,
  .copy = cuda_copy,
  .fill = cuda_fill,
  .synchronize = cuda_synchronize,
  .upload_weights = cuda_upload_weights,
  .graph_capture = cuda_graph_capture,
  .graph_launch = cuda_graph_launch,
  .graph_free = cuda_graph_free,
  .graph_nodes = cuda_graph_nodes,
  .stream = pp_cuda_backend_stream,
  .make_current = pp_cuda_backend_make_current,
  .mark = cuda_mark,
  .elapsed = cuda_elapsed,
  .mark_free = cuda_event_free,
  .hold = cuda_hold,
  .fence = cuda_fence,
  .fence_wait = cuda_fence_wait,
  .fence_free = cuda_event_free,
  .trim = cuda_trim,
  .give_back = cuda_give_back,
  .trace_enable = pp_cuda_trace_enable,
  .trace = pp_cuda_trace,
};

/* Ops */

#define CUDA_OP(name, NAME, params, args, flops, views)                     \
  static void                                                               \
  cuda_##name (PpBackend * be, PP_OPS_UNPAREN params)                       \
  {                                                                         \
    PpCudaBackend *cu = be->priv;                                           \
                                                                            \
    enter (cu);                                                             \
    /* Halted by a kept failure: its buffers may be missing. */             \
    if (!pp_cuda_halted (cu)) {                                             \
      pp_cuda_op_##name (cu, PP_OPS_UNPAREN args);                          \
      pp_cuda_acts_finish (cu);                                             \
    }                                                                       \
    leave (cu);                                                             \
  }
PP_OPS_LIST (CUDA_OP)
#undef CUDA_OP

/* The ops of a range only enqueue work: one range covers all rows, and the
 * GPU parallelises each op.  Not under the lock: @func calls ops, which
 * take it. */
static void
cuda_for_rows (PpBackend * be, int rows, PpRowsFunc func, gpointer data)
{
  if (rows > 0)
    func (0, rows, data);
}

static const PpOps cuda_ops = {
#define CUDA_ENTRY(name, NAME, params, args, flops, views) \
  .name = cuda_##name,
  PP_OPS_LIST (CUDA_ENTRY)
#undef CUDA_ENTRY
  .for_rows = cuda_for_rows,
};

/* Creation */

/* @st's pinned buffers of @bytes each, and their events: a host thread
 * waiting for one sleeps with @sleep (PPDIFFUSE_CUDA_WAIT), else spins. */
static gboolean
staging_init (PpCudaStaging * st, gsize bytes, gboolean sleep,
    GError ** error)
{
  const unsigned int flags = cudaEventDisableTiming
      | (sleep ? cudaEventBlockingSync : 0);

  g_mutex_init (&st->lock);
  for (guint b = 0; b < PP_CUDA_STAGING_BUFFERS; b++)
    if (!PP_CUDA_TRY (cudaHostAlloc ((void **) &st->buffer[b], bytes,
                cudaHostAllocDefault), error)
        || !PP_CUDA_TRY (cudaEventCreateWithFlags (&st->copied[b], flags),
            error))
      return FALSE;
  return TRUE;
}

static gboolean
init_handles (PpCudaBackend * cu, GError ** error)
{
  if (!PP_CUDA_TRY (cudaStreamCreateWithFlags (&cu->stream,
              cudaStreamNonBlocking), error)
      || !PP_CUBLAS_TRY (cublasCreate (&cu->cublas), error)
      || !PP_CUBLAS_TRY (cublasSetStream (cu->cublas, cu->stream), error)
      || !PP_CUBLAS_TRY (cublasLtCreate (&cu->cublaslt), error))
    return FALSE;
  cu->sizes = g_hash_table_new (g_direct_hash, g_direct_equal);
  cu->kept = pp_cuda_blocks_new ();
  /* cuBLAS's own workspace, set after the stream (which resets it to
   * cuBLAS's pool): from its pool a product captured into a graph would
   * allocate as the graph's memory nodes. */
  cu->cublas_workspace = pp_cuda_obtain (cu, CUDA_CUBLAS_WORKSPACE, error);
  if (cu->cublas_workspace == NULL
      || !PP_CUBLAS_TRY (cublasSetWorkspace (cu->cublas,
              cu->cublas_workspace, CUDA_CUBLAS_WORKSPACE), error))
    return FALSE;
  cu->lt_plans = pp_cuda_lt_plans_new ();
#ifdef PP_HAVE_CUDNN
  if (!PP_CUDNN_TRY (cudnnCreate (&cu->cudnn), error)
      || !PP_CUDNN_TRY (cudnnSetStream (cu->cudnn, cu->stream), error))
    return FALSE;
  cu->conv_plans = pp_cuda_conv_plans_new ();
  cu->sdpa_plans = pp_cuda_sdpa_plans_new ();
  cu->conv_graphs = pp_cuda_conv_graphs_new ();
  cu->conv_filters = pp_cuda_conv_filters_new ();
#endif
  /* TF32 only on request: cuBLAS's default math mode already keeps
   * float32 GEMMs exact.  A split sum of a 16-bit product adds its parts
   * in float32, never in the output's type (which would round the sum
   * more than once). */
  if (!PP_CUBLAS_TRY (cublasSetMathMode (cu->cublas, (cublasMath_t)
              ((cu->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH)
                  | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
          error))
    return FALSE;
  return staging_init (&cu->up, PP_CUDA_STAGING_BYTES, cu->wait_sleep, error)
      && staging_init (&cu->down, PP_CUDA_DOWN_STAGING_BYTES, cu->wait_sleep,
      error);
}

/* The libraries' versions as loaded (not as built against): what a GPU
 * run's log needs to tell one cuDNN's behaviour from another's. */
static gchar *
library_versions (void)
{
  int driver = 0, runtime = 0;
  size_t cudnn = 0;

  cudaDriverGetVersion (&driver);
  cudaRuntimeGetVersion (&runtime);
#ifdef PP_HAVE_CUDNN
  cudnn = cudnnGetVersion ();
#endif
  return g_strdup_printf ("driver CUDA %d.%d, runtime %d.%d, cuBLASLt %zu, "
      "cuDNN %zu.%zu.%zu", driver / 1000, driver % 1000 / 10,
      runtime / 1000, runtime % 1000 / 10, cublasLtGetVersion (),
      cudnn / 10000, cudnn % 10000 / 100, cudnn % 100);
}

static gchar *
describe (gint device, GError ** error)
{
  struct cudaDeviceProp prop;

  if (!PP_CUDA_TRY (cudaGetDeviceProperties (&prop, device), error))
    return NULL;
  return g_strdup_printf ("cuda:%d %s, sm_%d%d, %.1f GiB, %d SMs", device,
      prop.name, prop.major, prop.minor,
      (double) prop.totalGlobalMem / (1 << 30), prop.multiProcessorCount);
}

/* The device code this build has (ext/meson.build, from the cuda-archs
 * option). */
#ifndef PP_CUDA_ARCHS
#error "PP_CUDA_ARCHS and PP_CUDA_PTX_ARCH come with the CUDA build's flags"
#endif
/* The oldest GPUs this toolkit builds for. */
#if CUDART_VERSION >= 13000
#define OLDEST_SM 75
#else
#define OLDEST_SM 50
#endif

/* Whether @device (@desc) runs this build's kernels.  Refused where the
 * build has no code for it (pp-cuda-arch.h), naming what would, or where
 * its driver loads none (a driver older than the PTX, say): at the
 * backend's making, not at a model's first kernel.  Where the driver
 * compiles them from the PTX, said at info level: that start loads
 * slower. */
static gboolean
check_device_code (gint device, const gchar * desc, GError ** error)
{
  g_autofree gchar *code = pp_cuda_code_describe (PP_CUDA_ARCHS,
      PP_CUDA_PTX_ARCH);
  struct cudaDeviceProp prop;
  cudaError_t status;
  int binary = 0;
  gint arch, sm;
  PpCudaCode kind;

  if (!PP_CUDA_TRY (cudaGetDeviceProperties (&prop, device), error))
    return FALSE;
  sm = prop.major * 10 + prop.minor;
  kind = pp_cuda_code_for (PP_CUDA_ARCHS, PP_CUDA_PTX_ARCH, prop.major,
      prop.minor, &arch);
  if (kind == PP_CUDA_CODE_NONE) {
    /* What would run there: a build for it, or the CPU. */
    g_autofree gchar *fix = sm >= OLDEST_SM
        ? g_strdup_printf ("build with -Dcuda-archs=%d%s%s (meson configure "
        "BUILD_DIR -Dcuda-archs=…, then ninja -C BUILD_DIR), or use the CPU "
        "backend (backend=cpu)", sm, PP_CUDA_ARCHS[0] != '\0' ? "," : "",
        PP_CUDA_ARCHS)
        : g_strdup_printf ("this CUDA toolkit (%d.%d) builds for %d.%d and "
        "later: use the CPU backend (backend=cpu)", CUDART_VERSION / 1000,
        CUDART_VERSION % 1000 / 10, OLDEST_SM / 10, OLDEST_SM % 10);

    g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "%s cannot run this "
        "build's kernels: compute capability %d.%d runs none of its device "
        "code (%s); %s", desc, prop.major, prop.minor, code, fix);
    return FALSE;
  }
  status = pp_cuda_kernel_image (&binary);
  if (status != cudaSuccess) {
    pp_cuda_forget_error ();
    g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "%s cannot load this "
        "build's kernels (%s: %s): the build has %s%s", desc,
        cudaGetErrorName (status), cudaGetErrorString (status), code,
        kind == PP_CUDA_CODE_PTX ? ", and its driver compiles the PTX "
        "only where it is not older than the toolkit that wrote it: update "
        "the driver, or build for this GPU (-Dcuda-archs)" : "");
    return FALSE;
  }
  if (kind == PP_CUDA_CODE_PTX)
    g_info ("%s: this build has no binary for sm_%d (it has %s): the "
        "driver compiles each kernel from the PTX for compute_%d as it "
        "first loads (sm_%d now), and keeps it in its cache; -Dcuda-archs=%d "
        "saves that", desc, sm, code, arch, binary, sm);
  else
    g_debug ("%s: kernels of the binary for sm_%d", desc, binary);
  return TRUE;
}

/* A backend for @device; NULL with @error (what was made is leaked: the
 * device is unusable anyway). */
static PpBackend *
create (gint device, GError ** error)
{
  /* PPDIFFUSE_CUDA_GROUP_NORM's values, the default first, and the way
   * each names. */
  static const gchar *const group_norm_ways[] = { "ticket", "vector",
    "split", "whole", "grid", NULL
  };
  static const PpCudaGroupNormWay group_norm_kinds[] = {
    PP_CUDA_GROUP_NORM_TICKET, PP_CUDA_GROUP_NORM_VECTOR,
    PP_CUDA_GROUP_NORM_SPLIT, PP_CUDA_GROUP_NORM_WHOLE,
    PP_CUDA_GROUP_NORM_GRID
  };
  /* PPDIFFUSE_CUDA_LAYER_NORM's, the default first, and the kernels' way
   * each names. */
  static const gchar *const layer_norm_ways[] = { "width", "vector",
    "warp", "block", "octet", NULL
  };
  static const int layer_norm_kernels[] = { PP_CUDA_LAYER_NORM_WIDTH,
    PP_CUDA_LAYER_NORM_VECTOR, PP_CUDA_LAYER_NORM_WARP,
    PP_CUDA_LAYER_NORM_BLOCK, PP_CUDA_LAYER_NORM_OCTET
  };
  /* PPDIFFUSE_CUDA_GROUP_NORM_TILE's, the default first, and the values
   * each names. */
  static const gchar *const group_norm_tiles[] = { "2048", "512", "1024",
    "4096", "8192", "16384", "32768", NULL
  };
  static const int group_norm_tile_values[] = { 2048, 512, 1024, 4096,
    8192, 16384, 32768
  };
  /* PPDIFFUSE_CUDA_CONV_EPILOGUE's, the default first. */
  static const gchar *const epilogue_ways[] = { "fused", "pass", NULL };
  /* PPDIFFUSE_CUDA_GEMM_ALGO's, the default first. */
  static const gchar *const gemm_algos[] = { "heuristic", "timed", NULL };
  /* PPDIFFUSE_CUDA_CONV_API's, the default first. */
  static const gchar *const conv_apis[] = { "legacy", "graph", NULL };
  /* PPDIFFUSE_CUDA_CONV_GEMM's, the default first, and the pixels each
   * names. */
  static const gchar *const conv_gemm_ways[] = { "0", "64", "256", "1024",
    NULL
  };
  static const int conv_gemm_pixels[] = { 0, 64, 256, 1024 };
  /* PPDIFFUSE_CUDA_ACTIVATIONS's, the default first. */
  static const gchar *const activation_ways[] = { "weights", "f32", NULL };
  /* PPDIFFUSE_CUDA_GEMM_OUT's. */
  static const gchar *const gemm_out_ways[] = { "act", "f32", NULL };
  /* PPDIFFUSE_CUDA_PDL's. */
  static const gchar *const pdl_ways[] = { "off", "on", NULL };
  /* PPDIFFUSE_CUDA_WAIT's. */
  static const gchar *const wait_ways[] = { "spin", "sleep", NULL };
  /* PPDIFFUSE_CUDA_FILTERS's. */
  static const gchar *const filter_ways[] = { "in-place", "copy", NULL };
  PpCudaBackend *cu;
  gchar *desc, *versions;
  guint way = 0, layer_way = 0, epilogue = 0, conv_api = 0, activations = 0;
  guint gemm_out = 0, gemm_algo = 0, pdl = 0, wait = 0, filters = 0;
  guint tile = 0, conv_gemm = 0;
  struct cudaDeviceProp prop = { 0 };

  if (!PP_CUDA_TRY (cudaSetDevice (device), error))
    return NULL;
  desc = describe (device, error);
  if (desc == NULL)
    return NULL;
  if (!check_device_code (device, desc, error)) {
    g_free (desc);
    return NULL;
  }
  cu = g_new0 (PpCudaBackend, 1);
  cu->device = device;
  cu->tf32 = g_strcmp0 (g_getenv (PP_CUDA_TF32_ENV), "1") == 0;
  if (!pp_cuda_attention_parse (g_getenv (PP_CUDA_ATTENTION_ENV),
          &cu->attention, error)
      || !pp_cuda_conv_algo_parse (g_getenv (PP_CUDA_CONV_ALGO_ENV),
          &cu->conv_timed, error)
      || !pp_cuda_conv_layout_parse (g_getenv (PP_CUDA_CONV_LAYOUT_ENV),
          &cu->conv_layout, error)
      || !pp_cuda_choice_parse (PP_CUDA_CONV_EPILOGUE_ENV,
          g_getenv (PP_CUDA_CONV_EPILOGUE_ENV), epilogue_ways, &epilogue,
          error)
      || !pp_cuda_choice_parse (PP_CUDA_CONV_API_ENV,
          g_getenv (PP_CUDA_CONV_API_ENV), conv_apis, &conv_api, error)
      || !pp_cuda_choice_parse (PP_CUDA_CONV_GEMM_ENV,
          g_getenv (PP_CUDA_CONV_GEMM_ENV), conv_gemm_ways, &conv_gemm,
          error)
      || !pp_cuda_choice_parse (PP_CUDA_GEMM_ALGO_ENV,
          g_getenv (PP_CUDA_GEMM_ALGO_ENV), gemm_algos, &gemm_algo, error)
      || !pp_cuda_choice_parse (PP_CUDA_GROUP_NORM_ENV,
          g_getenv (PP_CUDA_GROUP_NORM_ENV), group_norm_ways, &way, error)
      || !pp_cuda_choice_parse (PP_CUDA_GROUP_NORM_TILE_ENV,
          g_getenv (PP_CUDA_GROUP_NORM_TILE_ENV), group_norm_tiles, &tile,
          error)
      || !pp_cuda_choice_parse (PP_CUDA_LAYER_NORM_ENV,
          g_getenv (PP_CUDA_LAYER_NORM_ENV), layer_norm_ways, &layer_way,
          error)
      || !pp_cuda_choice_parse (PP_CUDA_ACTIVATIONS_ENV,
          g_getenv (PP_CUDA_ACTIVATIONS_ENV), activation_ways, &activations,
          error)
      || !pp_cuda_choice_parse (PP_CUDA_GEMM_OUT_ENV,
          g_getenv (PP_CUDA_GEMM_OUT_ENV), gemm_out_ways, &gemm_out,
          error)
      || !pp_cuda_choice_parse (PP_CUDA_PDL_ENV, g_getenv (PP_CUDA_PDL_ENV),
          pdl_ways, &pdl, error)
      || !pp_cuda_choice_parse (PP_CUDA_WAIT_ENV,
          g_getenv (PP_CUDA_WAIT_ENV), wait_ways, &wait, error)
      || !pp_cuda_choice_parse (PP_CUDA_FILTERS_ENV,
          g_getenv (PP_CUDA_FILTERS_ENV), filter_ways, &filters, error)) {
    g_free (cu);
    g_free (desc);
    return NULL;
  }
  /* The kernels wait for the grids before them only where they are built
   * for 9.0 and later (an older device's kernels would run early). */
  if (pdl != 0 && (!PP_CUDA_TRY (cudaGetDeviceProperties (&prop, device),
              error) || prop.major < 9)) {
    if (error != NULL && *error == NULL)
      g_set_error (error, PP_ERROR, PP_ERROR_CONFIG, "%s=on needs a device "
          "of compute capability 9.0 or later; %s is %d.%d: unset it",
          PP_CUDA_PDL_ENV, desc, prop.major, prop.minor);
    g_free (cu);
    g_free (desc);
    return NULL;
  }
  /* Every backend of the process launches the kernels one way: the last
   * one made sets it, from the same environment. */
  pp_cuda_set_programmatic (pdl != 0);
  pp_cuda_set_group_norm_tile (group_norm_tile_values[tile]);
  G_STATIC_ASSERT (G_N_ELEMENTS (group_norm_kinds) + 1
      == G_N_ELEMENTS (group_norm_ways));
  G_STATIC_ASSERT (G_N_ELEMENTS (layer_norm_kernels) + 1
      == G_N_ELEMENTS (layer_norm_ways));
  cu->group_norm_way = group_norm_kinds[way];
  cu->layer_norm_way = layer_norm_kernels[layer_way];
  cu->gemm_out_act = gemm_out == 0;
  cu->gemm_timed = gemm_algo == 1;
  cu->conv_fused = epilogue == 0;
  cu->conv_graph = conv_api == 1;
  G_STATIC_ASSERT (G_N_ELEMENTS (conv_gemm_pixels) + 1
      == G_N_ELEMENTS (conv_gemm_ways));
  cu->conv_gemm_pixels = conv_gemm_pixels[conv_gemm];
  cu->wait_sleep = wait == 1;
  cu->filters_copied = filters == 1;
  if (!init_handles (cu, error)) {
    g_prefix_error (error, "%s: ", desc);
    g_free (desc);
    return NULL;
  }
  versions = library_versions ();
  /* What a timed choice depends on: the device, the libraries, TF32. */
  if ((cu->conv_timed || cu->gemm_timed)
      && PP_CUDA_TRY (cudaGetDeviceProperties (&prop, device), NULL)) {
    g_autofree gchar *identity = g_strdup_printf ("%s, sm_%d%d, %s, TF32 %s",
        prop.name, prop.major, prop.minor, versions, cu->tf32 ? "on" : "off");

    cu->tuning = pp_cuda_tuning_new (g_getenv (PP_CUDA_TUNING_ENV),
        identity);
  }
  g_mutex_init (&cu->lock);
  g_cond_init (&cu->capture_done);
  cu->retired = g_ptr_array_new ();
  cu->be.name = "cuda";
  cu->be.stacks_projections = TRUE;
  cu->be.plans_shapes = TRUE;
  cu->be.device = desc;
  cu->be.device_index = device;
  /* Every choice above that changes the bits, but the activations' (the
   * handshake's "activations"). */
  cu->be.ways = g_strdup_printf ("attention=%s conv-algo=%s conv-layout=%s "
      "conv-epilogue=%s conv-api=%s conv-gemm=%s gemm-algo=%s gemm-out=%s "
      "group-norm=%s group-norm-tile=%s layer-norm=%s tf32=%s pdl=%s",
      pp_cuda_attention_name (cu->attention),
      cu->conv_timed ? "timed" : "heuristic",
      pp_cuda_conv_layout_name (cu->conv_layout), epilogue_ways[epilogue],
      conv_apis[conv_api], conv_gemm_ways[conv_gemm], gemm_algos[gemm_algo],
      gemm_out_ways[gemm_out],
      group_norm_ways[way], group_norm_tiles[tile],
      layer_norm_ways[layer_way], cu->tf32 ? "on" : "off", pdl_ways[pdl]);
  cu->be.memory = &cuda_memory;
  cu->be.ops = &cuda_ops;
  cu->be.default_weight_dtype = PP_DTYPE_F16;
  cu->be.view_dtypes = PP_DTYPE_BIT (PP_DTYPE_F32)
      | PP_DTYPE_BIT (PP_DTYPE_F16) | PP_DTYPE_BIT (PP_DTYPE_BF16);
  /* The kernels read and write activations as floats (a 16-bit product
   * narrows a copy of its float32 operand in scratch memory); a 16-bit
   * activation is widened for them and narrowed after (pp_cuda_in). */
  cu->be.act_dtypes = PP_DTYPE_BIT (PP_DTYPE_F32)
      | PP_DTYPE_BIT (PP_DTYPE_F16) | PP_DTYPE_BIT (PP_DTYPE_BF16);
  cu->be.act_follows_weights = activations == 0;
  cu->be.act16_layout = PP_LAYOUT_NHWC;
  cu->be.priv = cu;
  g_info ("backend cuda: %s (%s)%s, %s attention, %s convolution algorithms, "
      "%s convolution layout, convolution epilogues %s, cuDNN's %s API for "
      "16-bit channels-last convolutions, those of at most %d output pixels "
      "as products (0: none), %s group norms, "
      "%s layer norms, "
      "activations %s, 16-bit linear outputs %s, %s cuBLASLt algorithms, "
      "%s launches, host waits for copies: %s, channels-last filters %s%s%s",
      desc, versions,
      cu->tf32 ? ", TF32 allowed" : "",
      cu->attention == PP_CUDA_ATTENTION_FUSED ? "fused"
      : cu->attention == PP_CUDA_ATTENTION_GEMM ? "16-bit GEMM" : "float32",
      cu->conv_timed ? "timed" : "heuristic",
      cu->conv_layout == PP_CUDA_CONV_NCHW ? "NCHW"
      : cu->conv_layout == PP_CUDA_CONV_PADDED ? "channels-last (padded)"
      : "channels-last",
      epilogue_ways[epilogue], conv_apis[conv_api], cu->conv_gemm_pixels,
      group_norm_ways[way], layer_norm_ways[layer_way],
      activation_ways[activations],
      cu->gemm_out_act ? "as they are (cuBLASLt)" : "through float32",
      gemm_algos[gemm_algo], pdl ? "programmatic dependent" : "plain",
      wait_ways[wait], filters ? "copied" : "laid out in place",
      cu->tuning != NULL ? ", timed choices kept in " : "",
      cu->tuning != NULL ? pp_cuda_tuning_folder (cu->tuning) : "");
  g_free (versions);
  return &cu->be;
}

gint
pp_cuda_backend_n_devices (GError ** error)
{
  return pp_cuda_device_count (error);
}

PpBackend *
pp_cuda_backend_get (gint device, GError ** error)
{
  static GMutex lock;
  static PpBackend *backends[CUDA_MAX_DEVICES];
  PpBackend *be;
  gint count;

#ifndef PP_HAVE_CUDNN
  /* Its convolutions are cuDNN's. */
  g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "the CUDA backend needs "
      "cuDNN, which this build was made without");
  return NULL;
#endif
  count = pp_cuda_device_count (error);
  if (count < 0)
    return NULL;
  if (device < 0 || device >= count || device >= CUDA_MAX_DEVICES) {
    g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "device index %d out of "
        "range: this process sees %d CUDA devices%s", device, count,
        count == 0 ? " (cudaGetDeviceCount: cudaErrorNoDevice)" : "");
    return NULL;
  }
  g_mutex_lock (&lock);
  be = backends[device];
  if (be == NULL)
    be = backends[device] = create (device, error);
  g_mutex_unlock (&lock);
  return be;
}

gpointer
pp_cuda_backend_stream (PpBackend * be)
{
  PpCudaBackend *cu = be->priv;

  return cu->stream;
}

void
pp_cuda_backend_make_current (PpBackend * be)
{
  PpCudaBackend *cu = be->priv;

  PP_CUDA_OP_TRY (cu, cudaSetDevice (cu->device));
}
