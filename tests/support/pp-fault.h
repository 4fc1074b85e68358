/* ppdiffuse — fault specs for the break-it tests.
 *
 * A worker reads PPDIFFUSE_FAULT=rank:R,chunk:N,kind:K[,ms:M] and
 * misbehaves on purpose, once, when chunk N passes through world rank R;
 * the hooks that fire each kind are in pp-fault-hooks.c.  Built only with
 * the meson option fault-injection.  The kinds and the tests that use them are in
 * docs/operator/liveness-and-faults.md. */
#pragma once

#include "pp-protocol.h"

G_BEGIN_DECLS

typedef enum
{
  PP_FAULT_NONE,
  PP_FAULT_KILL,                /* SIGKILL itself */
  PP_FAULT_HANG,                /* every thread stops: alive, silent */
  PP_FAULT_EXIT0,               /* _exit (0) */
  PP_FAULT_EXIT1,               /* _exit (1) */
  PP_FAULT_ABORT,               /* abort () */
  PP_FAULT_BAD_VERSION,         /* send a head of another major version */
  PP_FAULT_BAD_SPEC,            /* send a payload shorter than its manifest */
  PP_FAULT_SKIP,                /* drop the chunk without sending it */
  PP_FAULT_DUP,                 /* send the chunk twice */
  PP_FAULT_SLOW,                /* sleep 3 × timeout-ms (or ms:M) in a step */
  PP_FAULT_EARLY_CRASH,         /* crash before MPI_Init */
  PP_FAULT_BAD_DIGEST,          /* report another model digest at init */
  PP_FAULT_LATE_START,          /* sleep chunk:N ms before MPI_Init */
  PP_FAULT_SLOW_LOAD,           /* the model load takes chunk:N ms more,
                                 * reporting progress all along */
  PP_FAULT_STALLED_LOAD,        /* … chunk:N ms more without progress */
  PP_FAULT_LATE_BEAT,           /* at the clean end, one more heartbeat
                                 * ms:M (default 300) before the farewell */
} PpFaultKind;

typedef struct
{
  PpFaultKind kind;
  gint rank;                    /* world rank (workers are 1..W) */
  guint64 chunk;
  guint64 ms;                   /* the slow fault's sleep; 0: its default */
} PpFault;

/* Parses @spec ("rank:R,chunk:N,kind:K,ms:M", any order; chunk and ms
 * default to 0);
 * NULL or "" gives PP_FAULT_NONE. */
gboolean     pp_fault_parse      (const gchar * spec, PpFault * fault,
                                  GError ** error);
/* The fault of $PPDIFFUSE_FAULT for world rank @rank: PP_FAULT_NONE when
 * it is unset or names another rank.  A malformed value is fatal: a test
 * that misspells its fault must not pass by accident. */
PpFault      pp_fault_for_rank   (gint rank);
/* TRUE (once) when @fault is @kind at @chunk_id. */
gboolean     pp_fault_fires      (PpFault * fault, PpFaultKind kind,
                                  guint64 chunk_id);
const gchar *pp_fault_kind_name  (PpFaultKind kind);

G_END_DECLS
