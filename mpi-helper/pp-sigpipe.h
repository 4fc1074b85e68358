/* ppdiffuse — SIGPIPE kept away from the application on rank 0. */
#pragma once

#include <glib.h>
#include <signal.h>

G_BEGIN_DECLS

/* What pp_sigpipe_block changed, for pp_sigpipe_restore. */
typedef struct
{
  gboolean was_blocked;
  gboolean was_pending;
} PpSigpipeGuard;

/* g_thread_new, the thread started with SIGPIPE blocked: it and every
 * thread it starts (Open MPI's, PMIx's) get EPIPE from a broken socket,
 * never the signal. */
GThread *pp_thread_new      (const gchar * name, GThreadFunc func,
                             gpointer data);
/* Around a call that may write to a socket on a thread that is not ours:
 * blocks SIGPIPE in the calling thread ... */
void     pp_sigpipe_block   (PpSigpipeGuard * guard);
/* ... then consumes a SIGPIPE the call left pending (one already pending
 * before it is left alone) and puts the thread's mask back. */
void     pp_sigpipe_restore (PpSigpipeGuard * guard);

G_END_DECLS
