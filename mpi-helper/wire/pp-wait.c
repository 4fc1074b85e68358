/* ppdiffuse — polled waits on MPI under a deadline and a liveness check
 * (pp-wait.h). */
#include "pp-wait.h"
#include "pp-error.h"
#include "pp-queue.h"         /* PP_NO_DEADLINE */

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

void
pp_poll_start (PpPoll * poll)
{
  poll->period_us = PP_POLL_MIN_US;
  poll->next_alive_us = g_get_monotonic_time () + PP_ALIVE_PERIOD_US;
}

void
pp_poll_sleep (PpPoll * poll)
{
  g_usleep (poll->period_us);
  poll->period_us = MIN (poll->period_us * 2, PP_POLL_MAX_US);
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

  pp_poll_start (&poll);
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
