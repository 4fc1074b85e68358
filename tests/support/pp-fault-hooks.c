/* ppdiffuse — the worker's test hooks (PpWorkerHooks, pp-worker-room.h):
 * each fires the fault of PPDIFFUSE_FAULT that belongs to it.  Linked into
 * ppdiffuse-worker only with the fault-injection option; the table is
 * installed when the executable loads, before its main runs. */
#include "pp-worker-room.h"
#include "pp-fault.h"
#include "pp-protocol.h"
#include "pp-recorder.h"
#include "pp-weights.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#ifndef PP_FAULT_INJECTION
#error "pp-fault-hooks.c is built only with the fault-injection option"
#endif

/* The slow fault sleeps this many timeouts in one step. */
#define PP_FAULT_SLOW_TIMEOUTS 3
/* The late-beat fault's delay without ms:M. */
#define PP_FAULT_LATE_BEAT_MS 300
/* Open MPI's environment for a spawned process: its rank among the
 * spawned (world rank - 1), known before MPI_Init. */
#define OMPI_RANK_ENV "OMPI_COMM_WORLD_RANK"

/* This worker's fault (set by the init hook before the threads start,
 * then only through fires), its world rank, and the hang fault's flag,
 * which every thread reads (atomic). */
static PpFault fault;
static gint rank;
static gint frozen;

/* The compute thread and the sender both consult the fault, and firing
 * it clears it. */
static gboolean
fires (PpFaultKind kind, guint64 chunk_id)
{
  static GMutex lock;
  gboolean fired;

  g_mutex_lock (&lock);
  fired = pp_fault_fires (&fault, kind, chunk_id);
  g_mutex_unlock (&lock);
  return fired;
}

static void
hook_before_mpi_init (void)
{
  const gchar *spawn_rank = g_getenv (OMPI_RANK_ENV);
  guint64 r;
  PpFault early;

  if (spawn_rank == NULL || !g_ascii_string_to_unsigned (spawn_rank, 10, 0,
          G_MAXINT - 1, &r, NULL))
    return;
  early = pp_fault_for_rank ((gint) r + 1);
  if (early.kind == PP_FAULT_EARLY_CRASH) {
    fprintf (stderr, "ppdiffuse-worker rank %d: injecting fault early-crash "
        "before MPI_Init\n", (int) r + 1);
    fflush (stderr);
    abort ();
  }
  if (early.kind == PP_FAULT_LATE_START) {
    /* chunk:N is the delay in ms here: a worker slow to come up. */
    fprintf (stderr, "ppdiffuse-worker rank %d: injecting fault late-start "
        "(%" G_GUINT64_FORMAT " ms before MPI_Init)\n", (int) r + 1,
        early.chunk);
    g_usleep (early.chunk * 1000);
  }
}

static void
hook_init (gint world_rank)
{
  rank = world_rank;
  fault = pp_fault_for_rank (world_rank);
}

static void
hook_model_load (void)
{
  const guint slices = 20;
  guint64 ms = fault.chunk;

  if (fault.kind != PP_FAULT_SLOW_LOAD && fault.kind != PP_FAULT_STALLED_LOAD)
    return;
  /* chunk:N is the delay in ms here, as for late-start. */
  PP_WARN ("injecting fault %s (%" G_GUINT64_FORMAT " ms)",
      pp_fault_kind_name (fault.kind), ms);
  for (guint i = 0; i < slices; i++) {
    g_usleep (ms * 1000 / slices);
    if (fault.kind == PP_FAULT_SLOW_LOAD)
      pp_weights_add_load_progress (1);
  }
  fault.kind = PP_FAULT_NONE;
}

static void
hook_model_digest (gchar * digest)
{
  if (!fires (PP_FAULT_BAD_DIGEST, 0))
    return;
  PP_WARN ("injecting fault bad-digest");
  digest[0] = digest[0] == '0' ? '1' : '0';
}

static void
hook_freeze_point (void)
{
  if (g_atomic_int_get (&frozen))
    for (;;)
      g_usleep (G_USEC_PER_SEC);
}

static void
hook_before_steps (guint64 chunk_id)
{
  static const PpFaultKind kinds[] = {
    PP_FAULT_KILL, PP_FAULT_HANG, PP_FAULT_EXIT0, PP_FAULT_EXIT1,
    PP_FAULT_ABORT,
  };

  for (guint i = 0; i < G_N_ELEMENTS (kinds); i++) {
    if (!fires (kinds[i], chunk_id))
      continue;
    PP_WARN ("injecting fault %s at chunk %" G_GUINT64_FORMAT,
        pp_fault_kind_name (kinds[i]), chunk_id);
    pp_recorder_note (PP_REC_FAULT, chunk_id, rank, 0, PP_REC_DONE);
    fflush (stderr);
    switch (kinds[i]) {
      case PP_FAULT_KILL:
        raise (SIGKILL);
        break;
      case PP_FAULT_HANG:
        g_atomic_int_set (&frozen, 1);
        hook_freeze_point ();
        break;
      case PP_FAULT_EXIT0:
        _exit (0);
      case PP_FAULT_EXIT1:
        _exit (1);
      case PP_FAULT_ABORT:
        abort ();
      default:
        break;
    }
  }
}

static void
hook_after_step (guint64 chunk_id, guint timeout_ms)
{
  if (!fires (PP_FAULT_SLOW, chunk_id))
    return;
  PP_WARN ("injecting fault slow at chunk %" G_GUINT64_FORMAT, chunk_id);
  g_usleep (fault.ms > 0 ? (gulong) fault.ms * 1000
      : (gulong) PP_FAULT_SLOW_TIMEOUTS * timeout_ms * 1000);
}

static gboolean
hook_before_send (const PpChunk * chunk, gint peer,
    PpSendDefect * defect, gboolean * twice)
{
  const guint64 id = chunk->chunk_id;

  *defect = PP_SEND_INTACT;
  *twice = FALSE;
  if (fires (PP_FAULT_BAD_VERSION, id))
    *defect = PP_SEND_BAD_VERSION;
  else if (fires (PP_FAULT_BAD_SPEC, id))
    *defect = PP_SEND_BAD_SPEC;
  else if (fires (PP_FAULT_DUP, id))
    *twice = TRUE;
  else if (!fires (PP_FAULT_SKIP, id))
    return TRUE;
  PP_WARN ("injecting a fault into the send of chunk %" G_GUINT64_FORMAT, id);
  pp_recorder_note (PP_REC_FAULT, id, peer, 0, PP_REC_DONE);
  return *defect != PP_SEND_INTACT || *twice;
}

static guint
hook_late_beat_ms (void)
{
  guint ms;

  if (!fires (PP_FAULT_LATE_BEAT, 0))
    return 0;
  ms = fault.ms > 0 ? (guint) fault.ms : PP_FAULT_LATE_BEAT_MS;
  PP_WARN ("injecting fault late-beat: a heartbeat %u ms after the "
      "shutdown marker", ms);
  return ms;
}

static const PpWorkerHooks fault_hooks = {
  .before_mpi_init = hook_before_mpi_init,
  .init = hook_init,
  .model_load = hook_model_load,
  .model_digest = hook_model_digest,
  .before_steps = hook_before_steps,
  .after_step = hook_after_step,
  .before_send = hook_before_send,
  .freeze_point = hook_freeze_point,
  .late_beat_ms = hook_late_beat_ms,
};

/* At load, so that the hook before MPI_Init is in place too; the worker
 * knows only the table, never this file. */
__attribute__ ((constructor))
static void
install_fault_hooks (void)
{
  pp_worker_set_hooks (&fault_hooks);
}
