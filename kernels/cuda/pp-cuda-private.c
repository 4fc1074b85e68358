/* ppdiffuse — the CUDA backend's insides that its ops use
 * (pp-cuda-private.h): the fatal error, the scratch buffers, the views'
 * storage types and the activations' data.  Kept out of pp-cuda-backend.c,
 * whose op table calls the ops: the ops call nothing above them. */
#include "pp-cuda-private.h"
#include "pp-cuda-convert.h"
#include "pp-error.h"

/* Errors */

void
pp_cuda_fatal (PpCudaBackend * cu, GError * error)
{
  g_error ("CUDA backend %s: %s", cu->be.device ? cu->be.device : "?",
      error->message);
}

gboolean
pp_cuda_capturing_here (const PpCudaBackend * cu)
{
  return cu->capturing != NULL && cu->capturing == g_thread_self ();
}

void
pp_cuda_forget_error (void)
{
  (void) cudaGetLastError ();
}

/* Whether @e is a kernel's fault, which the CUDA context keeps for good
 * (the runtime answers it to every call after it: a "sticky" error). */
static gboolean
context_lost (cudaError_t e)
{
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorMisalignedAddress:
    case cudaErrorIllegalInstruction:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorHardwareStackError:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return TRUE;
    default:
      return FALSE;
  }
}

void
pp_cuda_op_error (PpCudaBackend * cu, GError * error)
{
  if (!pp_cuda_capturing_here (cu)) {
    /* Not the next call's failure; but a fault of a kernel's (an illegal
     * address, a device-side assert) stays the context's for good, and
     * the runtime gives it back again (as it does the lack of a device,
     * which is not a fault). */
    pp_cuda_forget_error ();
    if (context_lost (cudaGetLastError ())) {
      g_atomic_int_set (&cu->be.lost, 1);
      g_prefix_error (&error, "the device's context is lost (nothing runs "
          "on it again in this process: restart the application): ");
    }
    g_prefix_error (&error, "CUDA backend %s: ",
        cu->be.device ? cu->be.device : "?");
    if (!pp_backend_halt (&cu->be, error))
      g_error ("%s", error->message);
    return;
  }
  /* The failed call's status is in @error now (the work reruns without a
   * graph once the capture has failed). */
  pp_cuda_forget_error ();
  if (cu->capture_error == NULL) {
    g_prefix_error (&error, "%s: while a CUDA graph was captured: ",
        cu->be.device ? cu->be.device : "?");
    cu->capture_error = error;
  } else {
    g_error_free (error);
  }
}

/* The stream's wait failed with @status: the op's failure, said as
 * @happened (taken). */
static void
stream_fault (PpCudaBackend * cu, cudaError_t status, gchar * happened)
{
  GError *error = NULL;

  pp_cuda_check (status, "cudaStreamSynchronize", __FILE__, __LINE__,
      &error);
  g_prefix_error (&error, "%s: ", happened);
  g_free (happened);
  pp_cuda_op_error (cu, error);
}

double
pp_cuda_time_trial (PpCudaBackend * cu, const gchar * what,
    PpCudaTrialFunc run, gpointer data, int runs)
{
  cudaEvent_t start = NULL, stop = NULL;
  float ms = -1.0f;
  unsigned int flags;
  cudaError_t before;
  gboolean ok;

  /* Halted: the trial's buffers may be missing. */
  if (pp_cuda_halted (cu))
    return -1.0;
  /* The work queued before it, done first: a fault of its kernels comes
   * to light at the next wait, which is not to be the trial's (a trial
   * runs once a shape, at its first run, so the wait costs little). */
  before = cudaStreamSynchronize (cu->stream);
  if (before != cudaSuccess) {
    stream_fault (cu, before, g_strdup_printf ("the work queued before %s "
            "was timed failed on the device", what));
    return -1.0;
  }
  /* Timed either way; waited for as every other wait of the backend
   * (PPDIFFUSE_CUDA_WAIT). */
  flags = cu->wait_sleep ? cudaEventBlockingSync : cudaEventDefault;
  ok = cudaEventCreateWithFlags (&start, flags) == cudaSuccess
      && cudaEventCreateWithFlags (&stop, flags) == cudaSuccess
      && run (data) && cudaEventRecord (start, cu->stream) == cudaSuccess;
  for (int r = 0; ok && r < runs; r++)
    ok = run (data);
  ok = ok && cudaEventRecord (stop, cu->stream) == cudaSuccess
      && cudaEventSynchronize (stop) == cudaSuccess
      && cudaEventElapsedTime (&ms, start, stop) == cudaSuccess;
  if (start != NULL)
    cudaEventDestroy (start);
  if (stop != NULL)
    cudaEventDestroy (stop);
  if (!ok) {
    const cudaError_t fault = cudaStreamSynchronize (cu->stream);

    /* A library's refusal leaves the stream as it was.  A trial whose
     * kernels faulted (an engine or algorithm that reads past a buffer or
     * from a misaligned address) has lost the device's context: every
     * call from now on fails, so that is said here, naming the trial, not
     * by whichever op comes next. */
    if (fault != cudaSuccess) {
      stream_fault (cu, fault, g_strdup_printf ("%s faulted on the device "
              "while it was timed (the way that times it is optional: leave "
              "it unset)", what));
      return -1.0;
    }
    pp_cuda_forget_error ();
    return -1.0;
  }
  return ms / runs;
}

/* Device memory */

static void
free_block (gpointer mem, gpointer data)
{
  PpCudaBackend *cu = data;

  PP_CUDA_OP_TRY (cu, cudaFree (mem));
}

gsize
pp_cuda_give_back_kept (PpCudaBackend * cu)
{
  g_return_val_if_fail (cu->capturing == NULL, 0);

  if (pp_cuda_blocks_count (cu->kept) == 0)
    return 0;
  PP_CUDA_OP_TRY (cu, cudaStreamSynchronize (cu->stream));
  return pp_cuda_blocks_drain (cu->kept, free_block, cu);
}

/* The device memory this process holds in use: the blocks obtained and
 * not released. */
static gsize
held_bytes (PpCudaBackend * cu)
{
  GHashTableIter iter;
  gpointer size;
  gsize total = 0;

  g_hash_table_iter_init (&iter, cu->sizes);
  while (g_hash_table_iter_next (&iter, NULL, &size))
    total += GPOINTER_TO_SIZE (size);
  return total;
}

gpointer
pp_cuda_obtain (PpCudaBackend * cu, gsize bytes, GError ** error)
{
  gsize block = 0;
  gpointer mem = pp_cuda_blocks_take (cu->kept, bytes, &block);
  cudaError_t rc;

  if (mem == NULL) {
    block = pp_cuda_blocks_round (bytes);
    rc = cudaMalloc (&mem, block);
    if (rc == cudaErrorMemoryAllocation && cu->capturing == NULL
        && pp_cuda_blocks_count (cu->kept) > 0) {
      gsize given;

      /* Kept blocks of other sizes fill the device: they go back. */
      pp_cuda_forget_error ();
      given = pp_cuda_give_back_kept (cu);
      g_info ("%s: %" G_GSIZE_FORMAT " bytes did not fit; gave back the %"
          G_GSIZE_FORMAT " bytes of freed buffers kept for reuse and tried "
          "again", cu->be.device ? cu->be.device : "?", block, given);
      rc = cudaMalloc (&mem, block);
    }
    if (rc == cudaErrorMemoryAllocation) {
      pp_cuda_forget_error ();
      g_set_error (error, PP_ERROR, PP_ERROR_RESOURCE, "out of device "
          "memory: %" G_GSIZE_FORMAT " MiB did not fit beside the %"
          G_GSIZE_FORMAT " MiB this process holds there (cudaMalloc: %s); "
          "use a smaller frame, a smaller frame-batch or no stream-batch, "
          "fewer ranks on this device, or a device with more memory",
          (block + (1 << 20) - 1) >> 20, held_bytes (cu) >> 20,
          cudaGetErrorName (rc));
      return NULL;
    }
    if (!pp_cuda_check (rc, "cudaMalloc", __FILE__, __LINE__, error)) {
      /* Answered by @error: not the next kernel launch's failure. */
      pp_cuda_forget_error ();
      return NULL;
    }
  }
  g_hash_table_insert (cu->sizes, mem, GSIZE_TO_POINTER (block));
  return mem;
}

gsize
pp_cuda_block_size (PpCudaBackend * cu, gconstpointer mem)
{
  return GPOINTER_TO_SIZE (g_hash_table_lookup (cu->sizes, mem));
}

void
pp_cuda_release (PpCudaBackend * cu, gpointer mem)
{
  const gsize block = pp_cuda_block_size (cu, mem);

  g_return_if_fail (block > 0);
  g_hash_table_remove (cu->sizes, mem);
  pp_cuda_blocks_keep (cu->kept, mem, block);
}

/* Scratch */

static const gchar *const scratch_names[PP_CUDA_SCRATCH_COUNT] = {
  [PP_CUDA_SCRATCH_A] = "16-bit operand A",
  [PP_CUDA_SCRATCH_B] = "16-bit operand B",
  [PP_CUDA_SCRATCH_C] = "16-bit operand C (a convolution's residual)",
  [PP_CUDA_SCRATCH_WORKSPACE] = "library workspace (cuDNN, cuBLASLt)",
  [PP_CUDA_SCRATCH_SCORES] = "attention scores",
  [PP_CUDA_SCRATCH_QKV] = "attention's 16-bit q, k and v",
  [PP_CUDA_SCRATCH_PROBS] = "attention's 16-bit probabilities or output",
  [PP_CUDA_SCRATCH_STATS] = "group norm statistics",
  [PP_CUDA_SCRATCH_TICKETS] = "group norm tile counts",
  [PP_CUDA_SCRATCH_ACT_0] = "16-bit activation 0, widened",
  [PP_CUDA_SCRATCH_ACT_1] = "16-bit activation 1, widened",
  [PP_CUDA_SCRATCH_ACT_2] = "16-bit activation 2, widened",
  [PP_CUDA_SCRATCH_ACT_3] = "16-bit activation 3, widened",
  [PP_CUDA_SCRATCH_LAYOUT_0] = "channels-last activation 0, laid channels "
      "first",
  [PP_CUDA_SCRATCH_LAYOUT_1] = "channels-last activation 1, laid channels "
      "first",
  [PP_CUDA_SCRATCH_LAYOUT_2] = "channels-last activation 2, laid channels "
      "first",
};

const gchar *
pp_cuda_scratch_name (PpCudaScratch slot)
{
  g_return_val_if_fail (slot < PP_CUDA_SCRATCH_COUNT, NULL);

  return scratch_names[slot];
}

gpointer
pp_cuda_scratch (PpCudaBackend * cu, PpCudaScratch slot, gsize bytes)
{
  gpointer old = cu->scratch[slot].mem;
  GError *error = NULL;

  if (cu->scratch[slot].bytes >= bytes)
    return old;
  /* Halted: the work that would use it is skipped, and the memory is not
   * asked for again until the backend recovers. */
  if (pp_cuda_halted (cu))
    return old;
  if (cu->capturing != NULL) {
    /* A graph cannot hold a buffer that grows while it is recorded, and a
     * synchronize would break the capture: the capture fails (relaxed
     * capture still allows the allocation, so the ops it records stay
     * valid until it is thrown away). */
    if (cu->capture_error == NULL)
      g_set_error (&cu->capture_error, PP_ERROR, PP_ERROR_DEVICE,
          "%s: the %s scratch buffer had to grow from %" G_GSIZE_FORMAT
          " to %" G_GSIZE_FORMAT " bytes while a CUDA graph was captured; "
          "run the work once without a graph first (a warm-up pass) so that "
          "its buffers are in place", cu->be.device, pp_cuda_scratch_name (slot),
          cu->scratch[slot].bytes, bytes);
    if (old != NULL)
      g_ptr_array_add (cu->retired, old);
  } else if (old != NULL && cu->graphs_live > 0) {
    /* Graphs may still launch on the old buffer: keep it. */
    g_ptr_array_add (cu->retired, old);
  } else if (old != NULL) {
    /* Enqueued work that still reads it comes before the next user's. */
    pp_cuda_release (cu, old);
  }
  cu->scratch[slot].mem = pp_cuda_obtain (cu, bytes, &error);
  cu->scratch[slot].bytes = 0;
  /* Under a capture a failed allocation fails the capture and returns:
   * the slot stays empty, and the rerun without a graph asks again. */
  if (error != NULL) {
    g_prefix_error (&error, "the %s scratch buffer, %" G_GSIZE_FORMAT
        " bytes: ", pp_cuda_scratch_name (slot), bytes);
    pp_cuda_op_error (cu, error);
  }
  if (cu->scratch[slot].mem != NULL)
    cu->scratch[slot].bytes = bytes;
  /* Counts start at 0, and each user leaves them so.  A capture that got
   * here has failed (its graph never runs) and cannot zero them: the
   * slot is left to grow again at its next use, which the run without a
   * graph makes. */
  if (slot == PP_CUDA_SCRATCH_TICKETS && cu->scratch[slot].mem != NULL) {
    if (cu->capturing == NULL)
      PP_CUDA_OP_RUN (cu, cudaMemsetAsync (cu->scratch[slot].mem, 0, bytes,
              cu->stream));
    else
      cu->scratch[slot].bytes = 0;
  }
  return cu->scratch[slot].mem;
}

/* Parameters */

/* How @dtype is stored, in *@type; FALSE for a dtype no kernel reads. */
static gboolean
storage_type (PpDType dtype, PpCudaType * type)
{
  switch (dtype) {
    case PP_DTYPE_F32:
      *type = PP_CUDA_F32;
      return TRUE;
    case PP_DTYPE_F16:
      *type = PP_CUDA_F16;
      return TRUE;
    case PP_DTYPE_BF16:
      *type = PP_CUDA_BF16;
      return TRUE;
    default:
      return FALSE;
  }
}

PpCudaType
pp_cuda_view_type (PpCudaBackend * cu, const char *op, const char *param,
    PpView v)
{
  PpCudaType t = PP_CUDA_F32;

  /* An absent view is never read. */
  if (v.data != NULL && !storage_type (v.dtype, &t))
    pp_cuda_fatal (cu, g_error_new (PP_ERROR, PP_ERROR_DEVICE, "%s: "
            "parameter %s is of dtype %u, which no kernel of the cuda "
            "backend reads", op, param, (guint) v.dtype));
  return t;
}

/* Ends the process: activation @param of @op is of @dtype, which no
 * kernel here reads or writes. */
static G_GNUC_NORETURN void
refuse_activation (PpCudaBackend * cu, const char *op, const char *param,
    PpDType dtype)
{
  pp_cuda_fatal (cu, g_error_new (PP_ERROR, PP_ERROR_DEVICE, "%s: "
          "activation %s is of dtype %u, and the cuda backend takes "
          "activations as float32, float16 or bfloat16 (dtypes %u, %u, %u) "
          "only", op, param, (guint) dtype, (guint) PP_DTYPE_F32,
          (guint) PP_DTYPE_F16, (guint) PP_DTYPE_BF16));
}

/* Activations: the kernels compute on float32, so a 16-bit activation
 * passes through float32 scratch for the op, as on the CPU backends
 * (kernels/cpu/pp-cpu-backend.c): widened before, the written ones
 * narrowed after.  Ops run one at a time under the backend's lock, in
 * stream order, so a strided output widened and narrowed whole comes back
 * unchanged where the op did not write. */
static float *
act_float (PpCudaBackend * cu, const char *op, const char *param,
    gpointer data, PpDType dtype, gsize numel, gboolean read,
    gboolean written)
{
  const guint slot = cu->n_acts;
  float *wide;

  if (data == NULL || dtype == PP_DTYPE_F32)
    return data;
  if (dtype != PP_DTYPE_F16 && dtype != PP_DTYPE_BF16)
    refuse_activation (cu, op, param, dtype);
  g_assert (slot < G_N_ELEMENTS (cu->acts));
  wide = pp_cuda_scratch (cu, PP_CUDA_SCRATCH_ACT_0 + slot,
      MAX (numel, 1) * sizeof (float));
  if (read && dtype == PP_DTYPE_F16)
    PP_CUDA_OP_RUN (cu, pp_cuda_f16_to_f32 (data, wide, numel, cu->stream));
  else if (read)
    PP_CUDA_OP_RUN (cu, pp_cuda_bf16_to_f32 (data, wide, numel, cu->stream));
  cu->acts[cu->n_acts++] = (PpWidened) { data, dtype, numel, wide,
    written };
  return wide;
}

PpCudaType
pp_cuda_act_type (PpCudaBackend * cu, const char *op, const char *param,
    PpDType dtype)
{
  PpCudaType t;

  if (!storage_type (dtype, &t))
    refuse_activation (cu, op, param, dtype);
  return t;
}

const float *
pp_cuda_in (PpCudaBackend * cu, const char *op, const char *param, PpView v)
{
  return act_float (cu, op, param, (gpointer) v.data, v.dtype, v.numel,
      TRUE, FALSE);
}

float *
pp_cuda_out (PpCudaBackend * cu, const char *op, const char *param, PpOut o)
{
  return act_float (cu, op, param, o.data, o.dtype, o.numel, TRUE, TRUE);
}

float *
pp_cuda_out_whole (PpCudaBackend * cu, const char *op, const char *param,
    PpOut o)
{
  return act_float (cu, op, param, o.data, o.dtype, o.numel, FALSE, TRUE);
}

/* Channels-last activations: the spatial kernels here read and write
 * channels first, so a channels-last view is copied into scratch of its
 * dtype, transposed, for the op, and a written one transposed back after
 * it (after its narrowing, when it was also widened). */
static gpointer
laid_nchw (PpCudaBackend * cu, const char *op, const char *param,
    gpointer data, PpDType dtype, gsize numel, int n, int c, int hw,
    gboolean read, gboolean written)
{
  const PpCudaType type = pp_cuda_act_type (cu, op, param, dtype);
  const guint slot = cu->n_laid;
  void (*note) (const char *) = g_atomic_pointer_get
      (&cu->be.note_layout_copy);
  gpointer copy;

  g_assert (slot < G_N_ELEMENTS (cu->laid));
  g_assert (numel == (gsize) n * c * hw);
  if (note != NULL)
    note (op);
  copy = pp_cuda_scratch (cu, PP_CUDA_SCRATCH_LAYOUT_0 + slot,
      MAX (numel, 1) * pp_cuda_dtype_size (dtype));
  /* [n, hw, c] → [n, c, hw]. */
  if (read)
    PP_CUDA_OP_RUN (cu, pp_cuda_transpose_typed (data, type, n, hw, c, NULL,
            PP_CUDA_F32, 0, copy, type, cu->stream));
  cu->laid[cu->n_laid++] = (PpWidened) { data, dtype, numel, copy, written,
    PP_LAYOUT_NHWC, n, c, hw };
  return copy;
}

PpView
pp_cuda_nchw_in (PpCudaBackend * cu, const char *op, const char *param,
    PpView v, int n, int c, int hw)
{
  if (v.data == NULL || v.layout != PP_LAYOUT_NHWC)
    return v;
  return pp_view (laid_nchw (cu, op, param, (gpointer) v.data, v.dtype,
          v.numel, n, c, hw, TRUE, FALSE), v.dtype, v.numel);
}

PpOut
pp_cuda_nchw_out_whole (PpCudaBackend * cu, const char *op,
    const char *param, PpOut o, int n, int c, int hw)
{
  if (o.layout != PP_LAYOUT_NHWC)
    return o;
  return pp_out (laid_nchw (cu, op, param, o.data, o.dtype, o.numel, n, c,
          hw, FALSE, TRUE), o.dtype, o.numel);
}

void
pp_cuda_acts_finish (PpCudaBackend * cu)
{
  for (guint i = 0; i < cu->n_acts; i++) {
    if (!cu->acts[i].written)
      continue;
    if (cu->acts[i].dtype == PP_DTYPE_F16)
      PP_CUDA_OP_RUN (cu, pp_cuda_f32_to_f16 (cu->acts[i].wide,
              cu->acts[i].data, cu->acts[i].numel, cu->stream));
    else
      PP_CUDA_OP_RUN (cu, pp_cuda_f32_to_bf16 (cu->acts[i].wide,
              cu->acts[i].data, cu->acts[i].numel, cu->stream));
  }
  cu->n_acts = 0;
  for (guint i = 0; i < cu->n_laid; i++) {
    const PpWidened *a = &cu->laid[i];
    const PpCudaType type = pp_cuda_act_type (cu, "layout", "copy",
        a->dtype);

    /* [n, c, hw] → [n, hw, c]. */
    if (a->written)
      PP_CUDA_OP_RUN (cu, pp_cuda_transpose_typed (a->wide, type, a->n,
              a->c, a->hw, NULL, PP_CUDA_F32, 0, a->data, type,
              cu->stream));
  }
  cu->n_laid = 0;
}
