/* ppdiffuse — the wire room: what travels between the ranks, and how.
 *
 * It owns the protocol both sides agree on (pp-protocol.h: tags,
 * versions, switches), the plan every rank runs (pp-plan.h), the chunk
 * and its envelope (pp-envelope.h) with the pool chunks are received
 * into (pp-chunk-pool.h), the heartbeat and report messages
 * (pp-heartbeat.h), waits on MPI under a deadline (pp-wait.h), the
 * doorbells of the ranks on rank 0's host (pp-bells.h) and the chunk
 * lanes in their shared memory (pp-lanes.h), the data
 * planes a chunk's payloads travel on (pp-data-plane.h: the MPI plane,
 * pp-mpi-data-plane.c; the NCCL plane, pp-nccl-plane.h, one per link,
 * pp-nccl-links.h; which one, pp-data-plane-choice.h) and the transport
 * of bytes and whole chunks on top of them (pp-transport.h).
 *
 * It is the floor of the mesh: it calls only the shared small things
 * (log, queue, recorder) and the kernels' tensors and backends; start/,
 * liveness/, the worker and rank 0's façade call into it.  Within it,
 * calls go one way, from the top: NCCL links, the choice, NCCL plane
 * (its unique id goes over the transport), transport, MPI plane, the
 * data plane interface, then wait, bells, chunk pool and lanes,
 * envelope, plan, protocol. */
#pragma once

#include "pp-bells.h"
#include "pp-chunk-pool.h"
#include "pp-data-plane-choice.h"
#include "pp-data-plane.h"
#include "pp-envelope.h"
#include "pp-heartbeat.h"
#include "pp-lanes.h"
#include "pp-nccl-links.h"
#include "pp-nccl-plane.h"
#include "pp-plan.h"
#include "pp-protocol.h"
#include "pp-transport.h"
#include "pp-wait.h"
