/* ppdiffuse — polled waits on MPI under a deadline and a liveness check
 * (pp-wait.h). */
#include "pp-wait.h"
#include "pp-bells.h"
#include "pp-error.h"
#include "pp-queue.h"         /* PP_NO_DEADLINE */

#include <sys/prctl.h>

/* Poll back-off: start fast for low latency, settle at a period that keeps
 * oversubscribed cores free for compute. */
#define PP_POLL_MIN_US 10
#define PP_POLL_MAX_US 500
/* Liveness checks read /proc: a few per second are plenty. */
#define PP_ALIVE_PERIOD_US 50000

gint64
pp_deadline_in_ms (guint timeout_ms)
{
  return g_get_monotonic_time () + (gint64) timeout_ms * 1000;
}

gboolean
pp_mpi_check (int rc, const gchar * what, GError ** error)
{
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;

  if (rc == MPI_SUCCESS)
    return TRUE;
  MPI_Error_string (rc, text, &len);
  g_set_error (error, PP_ERROR, PP_ERROR_MPI, "%s: MPI error %d: %.*s", what,
      rc, len, text);
  return FALSE;
}

/* Linux adds up to 50 µs of timer slack to a sleep: a 10 µs poll would
 * take 60.  Each polling thread asks for 1 µs, once. */
static void
tighten_timer_slack (void)
{
  static __thread gboolean done;

  if (!done) {
    prctl (PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
    done = TRUE;
  }
}

void
pp_poll_start (PpPoll * poll)
{
  tighten_timer_slack ();
  poll->period_us = PP_POLL_MIN_US;
  poll->next_alive_us = g_get_monotonic_time () + PP_ALIVE_PERIOD_US;
  poll->bells = NULL;
}

void
pp_poll_start_on (PpPoll * poll, const PpWait * w)
{
  int rank = -1;

  pp_poll_start (poll);
  poll->bells = pp_bells_of (w->comm);
  if (poll->bells == NULL || MPI_Comm_rank (w->comm, &rank) != MPI_SUCCESS
      || rank < 0) {
    poll->bells = NULL;
    return;
  }
  poll->own = (guint) rank;
  poll->armed = pp_bells_read (poll->bells, poll->own);
}

void
pp_poll_sleep (PpPoll * poll)
{
  if (poll->bells != NULL) {
    guint32 now;

    pp_bells_wait (poll->bells, poll->own, poll->armed, poll->period_us);
    now = pp_bells_read (poll->bells, poll->own);
    if (now != poll->armed) {
      /* Rung: what it announced may take a few microseconds more to show
       * in MPI, so poll fast again. */
      poll->armed = now;
      poll->period_us = PP_POLL_MIN_US;
      return;
    }
  } else
    g_usleep (poll->period_us);
  poll->period_us = MIN (poll->period_us * 2, PP_POLL_MAX_US);
}

void
pp_wait_ring_peer (const PpWait * w)
{
  PpBells *bells = pp_bells_of (w->comm);

  if (bells != NULL && w->peer >= 0)
    pp_bells_ring (bells, (guint) w->peer);
}

gboolean
pp_wait_past_deadline (const PpWait * w, gint64 now)
{
  return w->deadline_us != PP_NO_DEADLINE && now > w->deadline_us;
}

gboolean
pp_poll_alive (const PpWait * w, PpPoll * poll, gint64 now, GError ** error)
{
  if (w->alive == NULL || now < poll->next_alive_us)
    return TRUE;
  poll->next_alive_us = now + PP_ALIVE_PERIOD_US;
  return w->alive (w->alive_data, error);
}

gboolean
pp_wait_expired (const PpWait * w, PpPoll * poll, const gchar * what,
    GError ** error)
{
  gint64 now = g_get_monotonic_time ();

  if (pp_wait_past_deadline (w, now)) {
    g_set_error (error, PP_ERROR, PP_ERROR_TIMEOUT,
        "%s (peer rank %d): no progress before the deadline (timeout-ms)",
        what, w->peer);
    return TRUE;
  }
  if (!pp_poll_alive (w, poll, now, error)) {
    g_prefix_error (error, "%s (peer rank %d): ", what, w->peer);
    return TRUE;
  }
  return FALSE;
}

gboolean
pp_wait_requests (const PpWait * w, MPI_Request * reqs, int n,
    MPI_Status * statuses, const gchar * what, GError ** error)
{
  PpPoll poll;

  pp_poll_start_on (&poll, w);
  for (;;) {
    int flag = 0;
    int rc = MPI_Testall (n, reqs, &flag,
        statuses ? statuses : MPI_STATUSES_IGNORE);
    if (!pp_mpi_check (rc, what, error))
      return FALSE;
    if (flag)
      return TRUE;
    if (pp_wait_expired (w, &poll, what, error))
      return FALSE;
    pp_poll_sleep (&poll);
  }
}

gboolean
pp_wait_bell (const PpWait * w, PpBells * bells, guint own, PpReadyFunc ready,
    gpointer data, const gchar * what, GError ** error)
{
  PpPoll poll;

  pp_poll_start (&poll);
  for (;;) {
    /* Read before the test: a ring after it changes the word, and the
     * wait below then returns at once. */
    const guint32 seen = pp_bells_read (bells, own);
    gint64 now, until;

    if (ready (data))
      return TRUE;
    if (pp_wait_expired (w, &poll, what, error))
      return FALSE;
    now = g_get_monotonic_time ();
    /* The liveness check, when there is one, is asked again by then. */
    until = w->alive != NULL ? poll.next_alive_us : now + PP_ALIVE_PERIOD_US;
    if (w->deadline_us != PP_NO_DEADLINE)
      until = MIN (until, w->deadline_us + 1);
    pp_bells_wait (bells, own, seen, (gulong) MAX (until - now, 1));
  }
}
