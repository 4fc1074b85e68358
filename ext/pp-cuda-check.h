/* ppdiffuse — the CUDA, cuBLAS, cuDNN and NCCL runtimes' status codes as
 * GErrors (PP_ERROR_DEVICE) that name the call, where it was made and the
 * runtime's own name and text for the status:
 *
 *   if (!PP_CUDA_TRY (cudaMalloc (&p, bytes), error))
 *     return FALSE;
 *
 * gives "cudaMalloc (&p, bytes) failed at kernels/cuda/x.c:12:
 * cudaErrorMemoryAllocation (out of memory)".  Each macro evaluates the
 * call once and is TRUE when it succeeded. */
#pragma once

#include <glib.h>

#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cublasLt.h>

#ifdef PP_HAVE_CUDNN
#include <cudnn.h>
#endif
#ifdef PP_HAVE_NCCL
#include <nccl.h>
#endif

G_BEGIN_DECLS

gboolean pp_cuda_check (cudaError_t status, const gchar * call,
    const gchar * file, gint line, GError ** error);
gboolean pp_cublas_check (cublasStatus_t status, const gchar * call,
    const gchar * file, gint line, GError ** error);

#define PP_CUDA_TRY(call, error) \
  pp_cuda_check ((call), #call, __FILE__, __LINE__, (error))
#define PP_CUBLAS_TRY(call, error) \
  pp_cublas_check ((call), #call, __FILE__, __LINE__, (error))

#ifdef PP_HAVE_CUDNN
gboolean pp_cudnn_check (cudnnStatus_t status, const gchar * call,
    const gchar * file, gint line, GError ** error);
#define PP_CUDNN_TRY(call, error) \
  pp_cudnn_check ((call), #call, __FILE__, __LINE__, (error))
#endif

#ifdef PP_HAVE_NCCL
/* ncclInProgress (a non-blocking communicator's call under way) is not a
 * failure: the caller polls ncclCommGetAsyncError under its deadline. */
gboolean pp_nccl_check (ncclResult_t status, const gchar * call,
    const gchar * file, gint line, GError ** error);
#define PP_NCCL_TRY(call, error) \
  pp_nccl_check ((call), #call, __FILE__, __LINE__, (error))
#endif

/* The number of CUDA devices this process sees; -1 with @error when the
 * runtime cannot say (no driver, no device node, a broken installation):
 * the error names the runtime's status and what a person can check. */
gint pp_cuda_device_count (GError ** error);

G_END_DECLS
