/* ppdiffuse — CUDA, cuBLAS, cuDNN and NCCL statuses as GErrors. */
#include "pp-cuda-check.h"
#include "pp-error.h"

static void
set_device_error (GError ** error, const gchar * call, const gchar * file,
    gint line, const gchar * name, const gchar * text)
{
  g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "%s failed at %s:%d: %s "
      "(%s)", call, file, line, name, text);
}

gboolean
pp_cuda_check (cudaError_t status, const gchar * call, const gchar * file,
    gint line, GError ** error)
{
  if (status == cudaSuccess)
    return TRUE;
  set_device_error (error, call, file, line, cudaGetErrorName (status),
      cudaGetErrorString (status));
  return FALSE;
}

gboolean
pp_cublas_check (cublasStatus_t status, const gchar * call,
    const gchar * file, gint line, GError ** error)
{
  if (status == CUBLAS_STATUS_SUCCESS)
    return TRUE;
  set_device_error (error, call, file, line, cublasGetStatusName (status),
      cublasGetStatusString (status));
  return FALSE;
}

#ifdef PP_HAVE_CUDNN
gboolean
pp_cudnn_check (cudnnStatus_t status, const gchar * call, const gchar * file,
    gint line, GError ** error)
{
  g_autofree gchar *name = NULL;

  if (status == CUDNN_STATUS_SUCCESS)
    return TRUE;
  name = g_strdup_printf ("cuDNN status %d", (gint) status);
  set_device_error (error, call, file, line, name,
      cudnnGetErrorString (status));
  return FALSE;
}
#endif

#ifdef PP_HAVE_NCCL
gboolean
pp_nccl_check (ncclResult_t status, const gchar * call, const gchar * file,
    gint line, GError ** error)
{
  g_autofree gchar *name = NULL;

  if (status == ncclSuccess || status == ncclInProgress)
    return TRUE;
  name = g_strdup_printf ("NCCL result %d", (gint) status);
  set_device_error (error, call, file, line, name,
      ncclGetErrorString (status));
  return FALSE;
}
#endif

gint
pp_cuda_device_count (GError ** error)
{
  gint count = 0;
  cudaError_t status = cudaGetDeviceCount (&count);

  if (status == cudaErrorNoDevice)
    return 0;
  if (status != cudaSuccess) {
    gint driver = 0, runtime = 0;

    /* The runtime says "insufficient driver" both when there is no driver
     * and when it is too old; the driver's version (0: none) tells which. */
    if (cudaDriverGetVersion (&driver) != cudaSuccess)
      driver = 0;
    if (cudaRuntimeGetVersion (&runtime) != cudaSuccess)
      runtime = 0;
    if (driver == 0)
      g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "no usable CUDA "
          "device: no NVIDIA driver is installed (cudaGetDeviceCount says "
          "%s); install one, then check nvidia-smi",
          cudaGetErrorName (status));
    else if (status == cudaErrorInsufficientDriver)
      g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "no usable CUDA "
          "device: the NVIDIA driver supports CUDA %d.%d, older than this "
          "build's CUDA runtime %d.%d needs (cudaGetDeviceCount says %s); "
          "update the driver (nvidia-smi shows its version)",
          driver / 1000, driver % 1000 / 10, runtime / 1000,
          runtime % 1000 / 10, cudaGetErrorName (status));
    else
      g_set_error (error, PP_ERROR, PP_ERROR_DEVICE, "no usable CUDA "
          "device: cudaGetDeviceCount says %s (%s); check the NVIDIA driver "
          "(nvidia-smi) and that this process can open /dev/nvidia*",
          cudaGetErrorName (status), cudaGetErrorString (status));
    return -1;
  }
  return count;
}
