/* ppdiffuse — the worker's test hooks: where the break-it tests make a
 * worker misbehave on purpose (PPDIFFUSE_FAULT, pp-fault.h).
 *
 * Compiled in only with the meson option fault-injection (on in test
 * builds, off in release builds), which defines PP_FAULT_INJECTION.
 * Without it every hook is an empty inline function that compiles to
 * nothing, and a PPDIFFUSE_FAULT set anyway is reported as a warning
 * (pp_hooks_check_available), so that a test run against a release build
 * says why nothing fails. */
#pragma once

#include "pp-envelope.h"
#include "pp-log.h"
#include "pp-protocol.h"
#include "pp-transport.h"

G_BEGIN_DECLS

/* Any rank, at start: a build without fault injection warns when
 * PPDIFFUSE_FAULT is set, naming the option; one with it says nothing. */
static inline void
pp_hooks_check_available (void)
{
#ifndef PP_FAULT_INJECTION
  if (g_getenv (PP_FAULT_ENV) != NULL)
    PP_WARN ("%s is set, but this build of ppdiffuse has no fault "
        "injection (meson option fault-injection is off): no fault will be "
        "injected", PP_FAULT_ENV);
#endif
}

#ifdef PP_FAULT_INJECTION

/* Before MPI_Init: the early-crash fault (the world rank is then only in
 * Open MPI's environment). */
void     pp_hooks_before_mpi_init (void);
/* Reads the fault for world rank @rank; a malformed PPDIFFUSE_FAULT ends
 * the process (a test that misspells its fault must not pass by chance). */
void     pp_hooks_init            (gint rank);
/* Before the model load: a load that takes longer (slow-load,
 * stalled-load). */
void     pp_hooks_model_load      (void);
/* The digest this worker reports at the handshake (bad-digest). */
void     pp_hooks_model_digest    (gchar * digest);
/* The compute thread took chunk @chunk_id, before its first step: the
 * faults that end or freeze the process. */
void     pp_hooks_before_steps    (guint64 chunk_id);
/* After each step of chunk @chunk_id (slow). */
void     pp_hooks_after_step      (guint64 chunk_id, guint timeout_ms);
/* Before the send of @chunk to rank @peer: how to send it (a defect, or
 * twice); FALSE when it must not be sent at all. */
gboolean pp_hooks_before_send     (const PpChunk * chunk, gint peer,
                                   PpSendDefect * defect, gboolean * twice);
/* Where each thread stops for good once the hang fault fired. */
void     pp_hooks_freeze_point    (void);

#else

static inline void
pp_hooks_before_mpi_init (void)
{
}

static inline void
pp_hooks_init (gint rank)
{
  pp_hooks_check_available ();
}

static inline void
pp_hooks_model_load (void)
{
}

static inline void
pp_hooks_model_digest (gchar * digest)
{
}

static inline void
pp_hooks_before_steps (guint64 chunk_id)
{
}

static inline void
pp_hooks_after_step (guint64 chunk_id, guint timeout_ms)
{
}

static inline gboolean
pp_hooks_before_send (const PpChunk * chunk, gint peer,
    PpSendDefect * defect, gboolean * twice)
{
  *defect = PP_SEND_INTACT;
  *twice = FALSE;
  return TRUE;
}

static inline void
pp_hooks_freeze_point (void)
{
}

#endif

G_END_DECLS
