/* ppdiffuse — the CUDA backend's insides that its ops use
 * (pp-cuda-private.h): the fatal error, the scratch buffers, the views'
 * storage types and the activations' data.  Kept out of pp-cuda-backend.c,
 * whose op table calls the ops: the ops call nothing above them. */
#include "pp-cuda-private.h"
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
pp_cuda_op_error (PpCudaBackend * cu, GError * error)
{
  if (!pp_cuda_capturing_here (cu))
    pp_cuda_fatal (cu, error);
  /* The failed call's status stays this thread's last error, which the
   * next launch check would read as its own (the work reruns without a
   * graph once the capture has failed): it is in @error now. */
  (void) cudaGetLastError ();
  if (cu->capture_error == NULL) {
    g_prefix_error (&error, "%s: while a CUDA graph was captured: ",
        cu->be.device ? cu->be.device : "?");
    cu->capture_error = error;
  } else {
    g_error_free (error);
  }
}

/* Scratch */

static const gchar *const scratch_names[PP_CUDA_SCRATCH_COUNT] = {
  [PP_CUDA_SCRATCH_A] = "16-bit operand A",
  [PP_CUDA_SCRATCH_B] = "16-bit operand B",
  [PP_CUDA_SCRATCH_WORKSPACE] = "library workspace",
  [PP_CUDA_SCRATCH_SCORES] = "attention scores",
  [PP_CUDA_SCRATCH_QKV] = "attention's 16-bit q, k and v",
  [PP_CUDA_SCRATCH_PROBS] = "attention's 16-bit probabilities or output",
  [PP_CUDA_SCRATCH_STATS] = "group norm statistics",
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

  if (cu->scratch[slot].bytes >= bytes)
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
    /* The old buffer may still be read by enqueued work. */
    PP_CUDA_OP_TRY (cu, cudaStreamSynchronize (cu->stream));
    PP_CUDA_OP_TRY (cu, cudaFree (old));
  }
  cu->scratch[slot].mem = NULL;
  cu->scratch[slot].bytes = 0;
  PP_CUDA_OP_TRY (cu, cudaMalloc (&cu->scratch[slot].mem, bytes));
  cu->scratch[slot].bytes = bytes;
  return cu->scratch[slot].mem;
}

/* Parameters */

PpCudaType
pp_cuda_view_type (PpCudaBackend * cu, const char *op, const char *param,
    PpView v)
{
  /* An absent view is never read. */
  if (v.data == NULL)
    return PP_CUDA_F32;
  switch (v.dtype) {
    case PP_DTYPE_F32:
      return PP_CUDA_F32;
    case PP_DTYPE_F16:
      return PP_CUDA_F16;
    case PP_DTYPE_BF16:
      return PP_CUDA_BF16;
    default:
      pp_cuda_fatal (cu, g_error_new (PP_ERROR, PP_ERROR_DEVICE, "%s: "
              "parameter %s is of dtype %u, which no kernel of the cuda "
              "backend reads", op, param, (guint) v.dtype));
  }
}

/* Ends the process: activation @param of @op is of @dtype, which no
 * kernel here reads or writes. */
static G_GNUC_NORETURN void
refuse_activation (PpCudaBackend * cu, const char *op, const char *param,
    PpDType dtype)
{
  pp_cuda_fatal (cu, g_error_new (PP_ERROR, PP_ERROR_DEVICE, "%s: "
          "activation %s is of dtype %u, and the cuda backend's kernels "
          "take activations as float32 (dtype %u) only", op, param,
          (guint) dtype, (guint) PP_DTYPE_F32));
}

const float *
pp_cuda_in (PpCudaBackend * cu, const char *op, const char *param, PpView v)
{
  if (v.data != NULL && v.dtype != PP_DTYPE_F32)
    refuse_activation (cu, op, param, v.dtype);
  return v.data;
}

float *
pp_cuda_out (PpCudaBackend * cu, const char *op, const char *param, PpOut o)
{
  if (o.data != NULL && o.dtype != PP_DTYPE_F32)
    refuse_activation (cu, op, param, o.dtype);
  return o.data;
}
