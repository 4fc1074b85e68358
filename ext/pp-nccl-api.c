/* ppdiffuse — the NCCL data plane's calls on the real NCCL and CUDA
 * runtimes (compiled only when NCCL is found). */
#include "pp-nccl-api.h"

#include <gmodule.h>
#include "pp-error.h"

#include <string.h>

#include <cuda_runtime.h>
#include <nccl.h>

/* The plane's own types stand for these: they must agree. */
G_STATIC_ASSERT (sizeof (PpNcclUniqueId) == sizeof (ncclUniqueId));
G_STATIC_ASSERT (PP_NCCL_UNIQUE_ID_BYTES == NCCL_UNIQUE_ID_BYTES);
G_STATIC_ASSERT (sizeof (PpNcclComm) == sizeof (ncclComm_t));
G_STATIC_ASSERT (sizeof (PpCudaStream) == sizeof (cudaStream_t));
G_STATIC_ASSERT (sizeof (PpCudaEvent) == sizeof (cudaEvent_t));
G_STATIC_ASSERT (sizeof (gsize) == sizeof (size_t));
G_STATIC_ASSERT (PP_NCCL_SUCCESS == (int) ncclSuccess);
G_STATIC_ASSERT (PP_NCCL_UNHANDLED_CUDA_ERROR == (int) ncclUnhandledCudaError);
G_STATIC_ASSERT (PP_NCCL_SYSTEM_ERROR == (int) ncclSystemError);
G_STATIC_ASSERT (PP_NCCL_INTERNAL_ERROR == (int) ncclInternalError);
G_STATIC_ASSERT (PP_NCCL_INVALID_ARGUMENT == (int) ncclInvalidArgument);
G_STATIC_ASSERT (PP_NCCL_INVALID_USAGE == (int) ncclInvalidUsage);
G_STATIC_ASSERT (PP_NCCL_REMOTE_ERROR == (int) ncclRemoteError);
G_STATIC_ASSERT (PP_NCCL_IN_PROGRESS == (int) ncclInProgress);
G_STATIC_ASSERT (PP_NCCL_UINT8 == (int) ncclUint8);
G_STATIC_ASSERT (PP_NCCL_FLOAT32 == (int) ncclFloat32);
G_STATIC_ASSERT (PP_CUDA_SUCCESS == (int) cudaSuccess);
G_STATIC_ASSERT (PP_CUDA_NOT_READY == (int) cudaErrorNotReady);

static int
real_get_unique_id (PpNcclUniqueId * id)
{
  return ncclGetUniqueId ((ncclUniqueId *) id);
}

static int
real_comm_init_rank_config (PpNcclComm * comm, int n_ranks,
    const PpNcclUniqueId * id, int rank)
{
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  ncclUniqueId nccl_id;

  /* Non-blocking: every call may return ncclInProgress, and the plane
   * polls ncclCommGetAsyncError under its own deadline. */
  config.blocking = 0;
  memcpy (&nccl_id, id, sizeof nccl_id);
  return ncclCommInitRankConfig ((ncclComm_t *) comm, n_ranks, nccl_id, rank,
      &config);
}

static int
real_group_start (void)
{
  return ncclGroupStart ();
}

static int
real_group_end (void)
{
  return ncclGroupEnd ();
}

static int
real_send (const void *buf, gsize count, PpNcclDataType type, int peer,
    PpNcclComm comm, PpCudaStream stream)
{
  return ncclSend (buf, count, (ncclDataType_t) type, peer,
      (ncclComm_t) comm, (cudaStream_t) stream);
}

static int
real_recv (void *buf, gsize count, PpNcclDataType type, int peer,
    PpNcclComm comm, PpCudaStream stream)
{
  return ncclRecv (buf, count, (ncclDataType_t) type, peer,
      (ncclComm_t) comm, (cudaStream_t) stream);
}

static int
real_comm_get_async_error (PpNcclComm comm, int *async_error)
{
  ncclResult_t state = ncclSuccess;
  ncclResult_t rc = ncclCommGetAsyncError ((ncclComm_t) comm, &state);

  *async_error = (int) state;
  return (int) rc;
}

/* Tearing a communicator down, NCCL queries its events on the calling
 * thread and may stop at one not ready, which the runtime keeps as the
 * thread's last error: the thread's next kernel launch would report it
 * as its own failure.  Cleared here (a sticky error stays). */
static int
forget_teardown_error (ncclResult_t rc)
{
  (void) cudaGetLastError ();
  return (int) rc;
}

static int
real_comm_abort (PpNcclComm comm)
{
  return forget_teardown_error (ncclCommAbort ((ncclComm_t) comm));
}

static int
real_comm_finalize (PpNcclComm comm)
{
  return forget_teardown_error (ncclCommFinalize ((ncclComm_t) comm));
}

static int
real_comm_destroy (PpNcclComm comm)
{
  return forget_teardown_error (ncclCommDestroy ((ncclComm_t) comm));
}

static const gchar *
real_error_string (int result)
{
  return ncclGetErrorString ((ncclResult_t) result);
}

static int
real_event_create (PpCudaEvent * event)
{
  return cudaEventCreateWithFlags ((cudaEvent_t *) event,
      cudaEventDisableTiming);
}

static int
real_event_destroy (PpCudaEvent event)
{
  return cudaEventDestroy ((cudaEvent_t) event);
}

static int
real_event_record (PpCudaEvent event, PpCudaStream stream)
{
  return cudaEventRecord ((cudaEvent_t) event, (cudaStream_t) stream);
}

static int
real_event_query (PpCudaEvent event)
{
  const cudaError_t status = cudaEventQuery ((cudaEvent_t) event);

  /* "Not ready" is no error, but the runtime keeps it as the thread's
   * last error: the next kernel launched on this thread (rank 0 encodes
   * its next frame on the thread that sent this one) would report it as
   * its own failure. */
  if (status == cudaErrorNotReady)
    (void) cudaGetLastError ();
  return status;
}

static const gchar *
real_cuda_error_name (int error)
{
  return cudaGetErrorName ((cudaError_t) error);
}

static int
real_stream_create (PpCudaStream * stream)
{
  return cudaStreamCreateWithFlags ((cudaStream_t *) stream,
      cudaStreamNonBlocking);
}

static int
real_stream_destroy (PpCudaStream stream)
{
  return cudaStreamDestroy ((cudaStream_t) stream);
}

static const PpNcclApi real_api = {
  .get_unique_id = real_get_unique_id,
  .comm_init_rank_config = real_comm_init_rank_config,
  .group_start = real_group_start,
  .group_end = real_group_end,
  .send = real_send,
  .recv = real_recv,
  .comm_get_async_error = real_comm_get_async_error,
  .comm_abort = real_comm_abort,
  .comm_finalize = real_comm_finalize,
  .comm_destroy = real_comm_destroy,
  .error_string = real_error_string,
  .event_create = real_event_create,
  .event_destroy = real_event_destroy,
  .event_record = real_event_record,
  .event_query = real_event_query,
  .cuda_error_name = real_cuda_error_name,
  .stream_create = real_stream_create,
  .stream_destroy = real_stream_destroy,
};

/* The CUDA module's entry point for the table (pp-nccl-api-load.c). */
G_MODULE_EXPORT const PpNcclApi *pp_nccl_api_real (void);

const PpNcclApi *
pp_nccl_api_real (void)
{
  return &real_api;
}
