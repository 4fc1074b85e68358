/* ppdiffuse — the NCCL and CUDA calls the NCCL data plane makes, as a
 * table of function pointers over the project's own small types, so that
 * the plane's logic (mpi-helper/wire/pp-nccl-plane.c) compiles and is tested
 * on machines without nccl.h: tests hand it a fake table, a build with
 * NCCL the real one (ext/pp-nccl-api.c, whose static asserts hold these
 * types to nccl.h and cuda_runtime.h).
 *
 * Communicators are non-blocking (ncclConfig_t.blocking = 0): any call on
 * one may return PP_NCCL_IN_PROGRESS, and the caller polls
 * comm_get_async_error under its own deadline. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/* ncclResult_t's values. */
typedef enum
{
  PP_NCCL_SUCCESS = 0,
  PP_NCCL_UNHANDLED_CUDA_ERROR = 1,
  PP_NCCL_SYSTEM_ERROR = 2,
  PP_NCCL_INTERNAL_ERROR = 3,
  PP_NCCL_INVALID_ARGUMENT = 4,
  PP_NCCL_INVALID_USAGE = 5,
  PP_NCCL_REMOTE_ERROR = 6,
  PP_NCCL_IN_PROGRESS = 7,
} PpNcclResult;

/* The cudaError_t values the plane tells apart (others are failures). */
#define PP_CUDA_SUCCESS 0
#define PP_CUDA_NOT_READY 600

/* ncclDataType_t's values for what chunks carry. */
typedef enum
{
  PP_NCCL_UINT8 = 1,
  PP_NCCL_FLOAT32 = 7,
} PpNcclDataType;

#define PP_NCCL_UNIQUE_ID_BYTES 128

/* ncclUniqueId: made by one rank, sent to the others over MPI. */
typedef struct
{
  gchar internal[PP_NCCL_UNIQUE_ID_BYTES];
} PpNcclUniqueId;

typedef struct _PpNcclComm *PpNcclComm;         /* ncclComm_t */
typedef struct _PpCudaStream *PpCudaStream;     /* cudaStream_t */
typedef struct _PpCudaEvent *PpCudaEvent;       /* cudaEvent_t */

/* NCCL calls return a PpNcclResult, CUDA calls a cudaError_t value. */
typedef struct
{
  int (*get_unique_id) (PpNcclUniqueId * id);
  /* ncclCommInitRankConfig with blocking = 0, on the current device. */
  int (*comm_init_rank_config) (PpNcclComm * comm, int n_ranks,
      const PpNcclUniqueId * id, int rank);
  int (*group_start) (void);
  int (*group_end) (void);
  int (*send) (const void *buf, gsize count, PpNcclDataType type, int peer,
      PpNcclComm comm, PpCudaStream stream);
  int (*recv) (void *buf, gsize count, PpNcclDataType type, int peer,
      PpNcclComm comm, PpCudaStream stream);
  int (*comm_get_async_error) (PpNcclComm comm, int *async_error);
  int (*comm_abort) (PpNcclComm comm);
  int (*comm_finalize) (PpNcclComm comm);
  int (*comm_destroy) (PpNcclComm comm);
  /* ncclGetErrorString */
  const gchar *(*error_string) (int result);
  /* cudaEventCreateWithFlags (cudaEventDisableTiming) */
  int (*event_create) (PpCudaEvent * event);
  int (*event_destroy) (PpCudaEvent event);
  int (*event_record) (PpCudaEvent event, PpCudaStream stream);
  /* PP_CUDA_SUCCESS when done, PP_CUDA_NOT_READY while pending. */
  int (*event_query) (PpCudaEvent event);
  /* cudaGetErrorName */
  const gchar *(*cuda_error_name) (int error);
  /* cudaStreamCreateWithFlags (cudaStreamNonBlocking) on the current
   * device, cudaStreamDestroy: a stream of a plane's own, so that a
   * receive waiting for its peer never holds up compute or the other
   * direction.  May be NULL (the caller then uses its backend's stream). */
  int (*stream_create) (PpCudaStream * stream);
  int (*stream_destroy) (PpCudaStream stream);
} PpNcclApi;

/* The real table when this build has NCCL; else NULL with an error
 * (PP_ERROR_CONFIG) saying that it has not. */
const PpNcclApi *pp_nccl_api_get (GError ** error);

G_END_DECLS
