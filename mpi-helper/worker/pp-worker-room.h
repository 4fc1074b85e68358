/* ppdiffuse — the worker room: ppdiffuse-worker, the process on every
 * rank but 0 (pp-worker.c).
 *
 * It owns the per-rank loop: MPI start-up as a spawned child, the
 * handshake's worker side, the model, the receive, compute and send
 * threads with their queues, the worker's heartbeats and its end.  It
 * calls down into start/, wire/ and liveness/, and nothing calls into it
 * but its main.
 *
 * The break-it tests make a worker misbehave on purpose at the points
 * below.  The worker calls them through this table, which only a test
 * build fills: the fault injection lives with the tests
 * (tests/support/pp-fault-hooks.c), is linked into the worker only with
 * the meson option fault-injection, and hands its table over when the
 * executable loads.  A release build has no table, and no hook code. */
#pragma once

#include "pp-data-plane.h"
#include "pp-envelope.h"

G_BEGIN_DECLS

typedef struct
{
  /* Before MPI_Init: the early-crash fault (the world rank is then only
   * in Open MPI's environment). */
  void     (*before_mpi_init) (void);
  /* Reads the fault for world rank @rank; a malformed PPDIFFUSE_FAULT
   * ends the process (a test that misspells its fault must not pass by
   * chance). */
  void     (*init)            (gint rank);
  /* Before the model load: a load that takes longer (slow-load,
   * stalled-load). */
  void     (*model_load)      (void);
  /* The digest this worker reports at the handshake (bad-digest). */
  void     (*model_digest)    (gchar * digest);
  /* The compute thread took chunk @chunk_id, before its first step: the
   * faults that end or freeze the process. */
  void     (*before_steps)    (guint64 chunk_id);
  /* After each step of chunk @chunk_id (slow). */
  void     (*after_step)      (guint64 chunk_id, guint timeout_ms);
  /* Before the send of @chunk to rank @peer: how to send it (a defect,
   * or twice); FALSE when it must not be sent at all. */
  gboolean (*before_send)     (const PpChunk * chunk, gint peer,
                               PpSendDefect * defect, gboolean * twice);
  /* Where each thread stops for good once the hang fault fired. */
  void     (*freeze_point)    (void);
  /* At the clean end, before the farewell: how long to wait before one
   * more heartbeat to rank 0 (late-beat), 0 for none. */
  guint    (*late_beat_ms)    (void);
} PpWorkerHooks;

/* Installs @hooks (every member set); called before main runs. */
void pp_worker_set_hooks (const PpWorkerHooks * hooks);

G_END_DECLS
