/* ppdiffuse — a wait on MPI: polled until done, the deadline passes, or
 * the liveness check says the peer is gone.
 *
 * The bottom of the wire: the data planes and the transport wait through
 * it, and nothing in it knows of chunks. */
#pragma once

#include <mpi.h>

#include "pp-protocol.h"

G_BEGIN_DECLS

/* Called between polls of an open-ended wait: FALSE (with error) stops it. */
typedef gboolean (*PpAliveFunc) (gpointer data, GError ** error);

typedef struct
{
  MPI_Comm comm;
  gint peer;                    /* rank in comm */
  gint64 deadline_us;           /* monotonic; PP_NO_DEADLINE for none */
  PpAliveFunc alive;            /* may be NULL */
  gpointer alive_data;
} PpWait;

gint64    pp_deadline_in_ms   (guint timeout_ms);
gboolean  pp_mpi_check        (int rc, const gchar * what, GError ** error);

/* The pace of every polled wait, whatever it polls (MPI requests, NCCL
 * communicators): a sleep that backs off from fast to a period that leaves
 * oversubscribed cores to compute, and the liveness check asked a few
 * times a second. */
typedef struct
{
  gulong period_us;
  gint64 next_alive_us;
  /* This rank's doorbell, when the wait's communicator has bells
   * (pp-bells.h): the sleep ends early when it rings. */
  struct _PpBells *bells;
  guint own;
  guint32 armed;                /* the bell's value before the last test */
} PpPoll;

void      pp_poll_start       (PpPoll * poll);
/* The same for a wait on @w's communicator: the sleeps listen to this
 * rank's bell when the communicator has bells. */
void      pp_poll_start_on    (PpPoll * poll, const PpWait * w);
void      pp_poll_sleep       (PpPoll * poll);
/* Rings w->peer's bell when @w's communicator has bells: after posting a
 * send to it, or after receiving what it sent (its send completes). */
void      pp_wait_ring_peer   (const PpWait * w);
/* TRUE when @w has a deadline and @now is past it. */
gboolean  pp_wait_past_deadline (const PpWait * w, gint64 now);
/* Asks w->alive when it is due (never more often than a few times a
 * second); FALSE with its error when it says to stop. */
gboolean  pp_poll_alive       (const PpWait * w, PpPoll * poll, gint64 now,
                               GError ** error);
/* TRUE (with @error naming @what and the peer) when @w's deadline passed
 * or its liveness check says to stop. */
gboolean  pp_wait_expired     (const PpWait * w, PpPoll * poll,
                               const gchar * what, GError ** error);
/* Waits, under @w's deadline and liveness check, until @ready (@data)
 * holds, asleep on this rank's bell (@bells, rank @own) between tests:
 * whoever makes @ready true rings that bell after doing so, so no sleep
 * outlasts it (a sleep ends at the next liveness check at the latest). */
typedef gboolean (*PpReadyFunc) (gpointer data);
gboolean  pp_wait_bell        (const PpWait * w, struct _PpBells * bells,
                               guint own, PpReadyFunc ready, gpointer data,
                               const gchar * what, GError ** error);
/* Polls @n requests to completion with MPI_Testall under @w (their
 * statuses to @statuses when set).  On failure the requests are left
 * pending: their buffers must then never be freed. */
gboolean  pp_wait_requests    (const PpWait * w, MPI_Request * reqs, int n,
                               MPI_Status * statuses, const gchar * what,
                               GError ** error);

G_END_DECLS
