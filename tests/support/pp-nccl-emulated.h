/* ppdiffuse — an NCCL table emulated over MPI, for tests and simulation
 * on machines without a GPU (data plane "nccl-emulated").
 *
 * It implements ext/pp-nccl-api.h's calls with MPI point-to-point on host
 * memory, so that the whole NCCL data path of the mesh (the plan's data
 * plane, one NCCL plane per pipeline link, device-resident chunk pools,
 * model steps from device tensors, aborts on faults) runs in the real
 * mesh on the cpu backend, whose "device" memory is host memory MPI can
 * carry:
 *
 * - get_unique_id: the id names this process's world rank (the
 *   communicator's root) and a serial number;
 * - comm_init_rank_config: non-blocking, like NCCL's: each rank sends its
 *   world rank to the root (PP_TAG_NCCL_EMULATED_BOOT), the root answers
 *   with the table of world ranks; comm_get_async_error advances it and
 *   says ncclInProgress until it is done;
 * - group_start, send, recv, group_end: the calls of a group are noted,
 *   and group_end posts them as MPI_Isend / MPI_Irecv on the
 *   communicator's own tag (PP_TAG_NCCL_EMULATED + the communicator's
 *   number: one tag per link) onto the stream, then says ncclInProgress
 *   until comm_get_async_error is polled, as a non-blocking launch may;
 * - event_record takes the stream's posted requests, event_query tests
 *   them (cudaErrorNotReady while pending);
 * - comm_abort, comm_finalize (in progress for one poll), comm_destroy
 *   track the communicator's state, log it (info level) and count it.
 *
 * Everything runs on the world communicator given to the last
 * pp_nccl_emulated_api call: a process runs one mesh at a time.
 *
 * Test-only code: linked (whole) into the test builds' plugin, worker and
 * test programs, where it hands pp_nccl_emulated_api to the data plane
 * choice (pp_data_plane_set_emulation) when it loads; never in a release
 * build. */
#pragma once

#include <mpi.h>

#include "pp-nccl-api.h"

G_BEGIN_DECLS

/* The emulated table over @world (rank 0 and the workers). */
const PpNcclApi *pp_nccl_emulated_api (MPI_Comm world);

/* How many communicators of this process were made ready, aborted,
 * finalized and destroyed. */
typedef struct
{
  guint inits;
  guint aborts;
  guint finalizes;
  guint destroys;
} PpNcclEmulatedCounts;

void pp_nccl_emulated_counts (PpNcclEmulatedCounts * counts);

G_END_DECLS
