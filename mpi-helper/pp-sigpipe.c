/* ppdiffuse — SIGPIPE kept away from the application on rank 0.
 *
 * Open MPI writes to sockets (TCP BTL, PMIx, the ORTE daemon's) without
 * MSG_NOSIGNAL, from the thread that makes an MPI call and from threads of
 * its own.  A write to a socket whose peer died (a killed worker) raises
 * SIGPIPE in the writing thread, and under the default disposition that
 * ends the whole application.  The disposition is the application's; the
 * mask of a thread is its owner's.  So every thread the mesh starts on
 * rank 0 starts with SIGPIPE blocked (Open MPI's own threads, started
 * under MPI_Init_thread and MPI_Comm_spawn in such threads, inherit the
 * mask), and a thread we do not own (the chain, the application's thread
 * changing state) blocks it only for the length of the mesh's call.  The
 * write then fails with EPIPE, which Open MPI reports as a broken
 * connection and the mesh as the worker's death. */
#include "pp-sigpipe.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

static void
sigpipe_set (sigset_t * set)
{
  sigemptyset (set);
  sigaddset (set, SIGPIPE);
}

static gboolean
sigpipe_pending (void)
{
  sigset_t pending;

  return sigpending (&pending) == 0 && sigismember (&pending, SIGPIPE) == 1;
}

GThread *
pp_thread_new (const gchar * name, GThreadFunc func, gpointer data)
{
  PpSigpipeGuard guard;
  GThread *thread;

  /* A new thread inherits its creator's mask: it is blocked from its
   * first instruction. */
  pp_sigpipe_block (&guard);
  thread = g_thread_new (name, func, data);
  pp_sigpipe_restore (&guard);
  return thread;
}

void
pp_sigpipe_block (PpSigpipeGuard * guard)
{
  sigset_t set, old;

  sigpipe_set (&set);
  pthread_sigmask (SIG_BLOCK, &set, &old);
  guard->was_blocked = sigismember (&old, SIGPIPE) == 1;
  guard->was_pending = sigpipe_pending ();
}

void
pp_sigpipe_restore (PpSigpipeGuard * guard)
{
  sigset_t set;

  sigpipe_set (&set);
  if (!guard->was_pending && sigpipe_pending ()) {
    const struct timespec now = { 0, 0 };

    /* Raised by a write of the call: unblocked, it would be delivered. */
    while (sigtimedwait (&set, NULL, &now) < 0 && errno == EINTR);
  }
  if (!guard->was_blocked)
    pthread_sigmask (SIG_UNBLOCK, &set, NULL);
}
