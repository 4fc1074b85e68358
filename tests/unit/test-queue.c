/* Unit tests for the bounded queue and pp_run_with_deadline.  Every wait
 * has a deadline so that a broken wake-up fails the test instead of
 * hanging it. */
#include "pp-queue.h"
#include "pp-deadline.h"
#include "pp-error.h"

#include <string.h>

#define MS 1000                 /* µs per ms */

static gint64
now (void)
{
  return g_get_monotonic_time ();
}

static void
test_push_timeout (void)
{
  PpQueue *q = pp_queue_new (2);
  gint64 start, elapsed;

  g_assert_true (pp_queue_push (q, GINT_TO_POINTER (1), now ()));
  g_assert_true (pp_queue_push (q, GINT_TO_POINTER (2), now () + 50 * MS));
  start = now ();
  g_assert_false (pp_queue_push (q, GINT_TO_POINTER (3), start + 50 * MS));
  elapsed = now () - start;
  /* It waited for room until the deadline, not less. */
  g_assert_cmpint (elapsed, >=, 45 * MS);
  g_assert_cmpint (elapsed, <, 2000 * MS);
  /* The refused item was not queued. */
  g_assert_cmpint (GPOINTER_TO_INT (pp_queue_pop (q, now ())), ==, 1);
  g_assert_cmpint (GPOINTER_TO_INT (pp_queue_pop (q, now ())), ==, 2);
  g_assert_null (pp_queue_pop (q, now ()));
  pp_queue_free (q, NULL);
}

static void
test_pop_timeout (void)
{
  PpQueue *q = pp_queue_new (2);
  gint64 start = now (), elapsed;

  g_assert_null (pp_queue_pop (q, start + 30 * MS));
  elapsed = now () - start;
  g_assert_cmpint (elapsed, >=, 25 * MS);
  g_assert_cmpint (elapsed, <, 2000 * MS);
  /* A deadline already past does not wait. */
  start = now ();
  g_assert_null (pp_queue_pop (q, start - 1));
  g_assert_cmpint (now () - start, <, 500 * MS);
  pp_queue_free (q, NULL);
}

static void
test_fifo (void)
{
  PpQueue *q = pp_queue_new (3);
  gint64 d = now () + 1000 * MS;

  g_assert_true (pp_queue_push (q, GINT_TO_POINTER (1), d));
  g_assert_true (pp_queue_push (q, GINT_TO_POINTER (2), d));
  g_assert_cmpint (GPOINTER_TO_INT (pp_queue_pop (q, d)), ==, 1);
  g_assert_true (pp_queue_push (q, GINT_TO_POINTER (3), d));
  g_assert_true (pp_queue_push (q, GINT_TO_POINTER (4), d));
  g_assert_cmpint (GPOINTER_TO_INT (pp_queue_pop (q, d)), ==, 2);
  g_assert_cmpint (GPOINTER_TO_INT (pp_queue_pop (q, d)), ==, 3);
  g_assert_cmpint (GPOINTER_TO_INT (pp_queue_pop (q, d)), ==, 4);
  pp_queue_free (q, NULL);
}

typedef struct
{
  PpQueue *q;
  gint64 deadline;
  gpointer item;                /* what the pop returned / what to push */
  gboolean pushed;
  gint64 returned_at;
} Waiter;

static gpointer
pop_thread (gpointer data)
{
  Waiter *w = data;

  w->item = pp_queue_pop (w->q, w->deadline);
  w->returned_at = now ();
  return NULL;
}

static gpointer
push_thread (gpointer data)
{
  Waiter *w = data;

  w->pushed = pp_queue_push (w->q, w->item, w->deadline);
  w->returned_at = now ();
  return NULL;
}

static void
test_pop_woken_by_push (void)
{
  PpQueue *q = pp_queue_new (2);
  Waiter w = { q, now () + 3000 * MS, NULL, FALSE, 0 };
  GThread *t = g_thread_new ("pop", pop_thread, &w);
  gint64 pushed_at;

  g_usleep (50 * MS);           /* let it block */
  pushed_at = now ();
  g_assert_true (pp_queue_push (q, GINT_TO_POINTER (42), now ()));
  g_thread_join (t);
  g_assert_cmpint (GPOINTER_TO_INT (w.item), ==, 42);
  /* Woken by the push, not by its deadline. */
  g_assert_cmpint (w.returned_at - pushed_at, <, 1000 * MS);
  pp_queue_free (q, NULL);
}

static void
test_push_woken_by_pop (void)
{
  PpQueue *q = pp_queue_new (1);
  Waiter w = { q, now () + 3000 * MS, GINT_TO_POINTER (2), FALSE, 0 };
  GThread *t;
  gint64 popped_at;

  g_assert_true (pp_queue_push (q, GINT_TO_POINTER (1), now ()));
  t = g_thread_new ("push", push_thread, &w);
  g_usleep (50 * MS);
  popped_at = now ();
  g_assert_cmpint (GPOINTER_TO_INT (pp_queue_pop (q, now ())), ==, 1);
  g_thread_join (t);
  g_assert_true (w.pushed);
  g_assert_cmpint (w.returned_at - popped_at, <, 1000 * MS);
  g_assert_cmpint (GPOINTER_TO_INT (pp_queue_pop (q, now ())), ==, 2);
  pp_queue_free (q, NULL);
}

/* Two blocked pops, one push: both are woken, the one that finds the
 * queue empty again must go on waiting for the second push, not give up
 * before its deadline. */
static void
test_two_pops (void)
{
  PpQueue *q = pp_queue_new (2);
  gint64 deadline = now () + 3000 * MS;
  Waiter a = { q, deadline, GINT_TO_POINTER (-1), FALSE, 0 };
  Waiter b = { q, deadline, GINT_TO_POINTER (-1), FALSE, 0 };
  GThread *ta = g_thread_new ("pop-a", pop_thread, &a);
  GThread *tb = g_thread_new ("pop-b", pop_thread, &b);
  gint sum;

  g_usleep (50 * MS);
  g_assert_true (pp_queue_push (q, GINT_TO_POINTER (1), now ()));
  g_usleep (100 * MS);
  g_assert_true (pp_queue_push (q, GINT_TO_POINTER (2), now ()));
  g_thread_join (ta);
  g_thread_join (tb);
  g_assert_nonnull (a.item);
  g_assert_nonnull (b.item);
  sum = GPOINTER_TO_INT (a.item) + GPOINTER_TO_INT (b.item);
  g_assert_cmpint (sum, ==, 3);
  pp_queue_free (q, NULL);
}

/* The same for two pushes blocked on a full queue and one pop. */
static void
test_two_pushes (void)
{
  PpQueue *q = pp_queue_new (1);
  gint64 deadline = now () + 3000 * MS;
  Waiter a = { q, deadline, GINT_TO_POINTER (2), FALSE, 0 };
  Waiter b = { q, deadline, GINT_TO_POINTER (3), FALSE, 0 };
  GThread *ta, *tb;
  gint sum;

  g_assert_true (pp_queue_push (q, GINT_TO_POINTER (1), now ()));
  ta = g_thread_new ("push-a", push_thread, &a);
  tb = g_thread_new ("push-b", push_thread, &b);
  g_usleep (50 * MS);
  g_assert_cmpint (GPOINTER_TO_INT (pp_queue_pop (q, now ())), ==, 1);
  g_usleep (100 * MS);
  sum = GPOINTER_TO_INT (pp_queue_pop (q, now () + 1000 * MS));
  sum += GPOINTER_TO_INT (pp_queue_pop (q, now () + 1000 * MS));
  g_thread_join (ta);
  g_thread_join (tb);
  g_assert_true (a.pushed);
  g_assert_true (b.pushed);
  g_assert_cmpint (sum, ==, 5);
  pp_queue_free (q, NULL);
}

static void
test_close_wakes_pop (void)
{
  PpQueue *q = pp_queue_new (2);
  Waiter w = { q, now () + 3000 * MS, GINT_TO_POINTER (-1), FALSE, 0 };
  GThread *t = g_thread_new ("pop", pop_thread, &w);
  gint64 closed_at;

  g_usleep (50 * MS);
  g_assert_false (pp_queue_is_closed (q));
  closed_at = now ();
  pp_queue_close (q);
  g_thread_join (t);
  g_assert_null (w.item);
  g_assert_cmpint (w.returned_at - closed_at, <, 1000 * MS);
  g_assert_true (pp_queue_is_closed (q));
  pp_queue_free (q, NULL);
}

static void
test_close_wakes_push (void)
{
  PpQueue *q = pp_queue_new (1);
  Waiter w = { q, now () + 3000 * MS, GINT_TO_POINTER (2), TRUE, 0 };
  GThread *t;
  gint64 closed_at;

  g_assert_true (pp_queue_push (q, GINT_TO_POINTER (1), now ()));
  t = g_thread_new ("push", push_thread, &w);
  g_usleep (50 * MS);
  closed_at = now ();
  pp_queue_close (q);
  g_thread_join (t);
  g_assert_false (w.pushed);
  g_assert_cmpint (w.returned_at - closed_at, <, 1000 * MS);
  pp_queue_free (q, NULL);
}

/* After close every call fails at once, even with no deadline. */
static void
test_closed_fails_fast (void)
{
  PpQueue *q = pp_queue_new (2);
  gint64 start;

  g_assert_true (pp_queue_push (q, GINT_TO_POINTER (1), now ()));
  pp_queue_close (q);
  start = now ();
  g_assert_false (pp_queue_push (q, GINT_TO_POINTER (2), PP_NO_DEADLINE));
  g_assert_null (pp_queue_pop (q, PP_NO_DEADLINE));
  g_assert_cmpint (now () - start, <, 500 * MS);
  pp_queue_free (q, NULL);
}

static gint freed_items;

static void
count_free (gpointer item)
{
  freed_items++;
  g_free (item);
}

static void
test_free_items (void)
{
  PpQueue *q = pp_queue_new (4);

  freed_items = 0;
  for (guint i = 0; i < 3; i++)
    g_assert_true (pp_queue_push (q, g_new0 (gint, 1), now ()));
  g_free (pp_queue_pop (q, now ()));
  pp_queue_free (q, count_free);
  g_assert_cmpint (freed_items, ==, 2);
}

/* pp_run_with_deadline */

typedef struct
{
  guint sleep_ms;
  gboolean result;
  gint *freed;                  /* incremented by call_free */
  gint ran;
} Call;

static gboolean
call_func (gpointer data, GError ** error)
{
  Call *c = data;

  if (c->sleep_ms > 0)
    g_usleep ((gulong) c->sleep_ms * MS);
  c->ran++;
  if (!c->result)
    g_set_error (error, PP_ERROR, PP_ERROR_SPAWN, "call failed on purpose");
  return c->result;
}

static void
call_free (gpointer data)
{
  Call *c = data;

  g_atomic_int_inc (c->freed);
  g_free (c);
}

static Call *
call_new (guint sleep_ms, gboolean result, gint * freed)
{
  Call *c = g_new0 (Call, 1);

  c->sleep_ms = sleep_ms;
  c->result = result;
  c->freed = freed;
  return c;
}

static void
test_deadline_ok (void)
{
  static gint freed;
  g_autoptr (GError) error = NULL;

  g_assert_true (pp_run_with_deadline ("quick call", call_func,
          call_new (0, TRUE, &freed), call_free, 2000, &error));
  g_assert_no_error (error);
  /* The call finished, so its data is freed by the time we return. */
  g_assert_cmpint (g_atomic_int_get (&freed), ==, 1);
}

static void
test_deadline_error (void)
{
  static gint freed;
  g_autoptr (GError) error = NULL;

  g_assert_false (pp_run_with_deadline ("failing call", call_func,
          call_new (5, FALSE, &freed), call_free, 2000, &error));
  g_assert_error (error, PP_ERROR, PP_ERROR_SPAWN);
  g_assert_cmpstr (error->message, ==, "call failed on purpose");
  g_assert_cmpint (g_atomic_int_get (&freed), ==, 1);
}

static void
test_deadline_timeout (void)
{
  static gint freed;
  g_autoptr (GError) error = NULL;
  gint64 start = now (), elapsed, wait_until;

  g_assert_false (pp_run_with_deadline ("slow call", call_func,
          call_new (2000, TRUE, &freed), call_free, 100, &error));
  elapsed = now () - start;
  g_assert_error (error, PP_ERROR, PP_ERROR_TIMEOUT);
  g_assert_nonnull (strstr (error->message, "slow call"));
  g_assert_cmpint (elapsed, >=, 90 * MS);
  g_assert_cmpint (elapsed, <, 1000 * MS);
  /* The abandoned call still owns its data ... */
  g_assert_cmpint (g_atomic_int_get (&freed), ==, 0);
  /* ... and frees it once it returns (bounded wait). */
  wait_until = start + 4000 * MS;
  while (g_atomic_int_get (&freed) == 0 && now () < wait_until)
    g_usleep (10 * MS);
  g_assert_cmpint (g_atomic_int_get (&freed), ==, 1);
}

/* NULL free_data is allowed (data owned by the caller). */
static void
test_deadline_no_free (void)
{
  Call c = { 0, TRUE, NULL, 0 };

  g_assert_true (pp_run_with_deadline ("stack call", call_func, &c, NULL,
          2000, NULL));
  g_assert_cmpint (c.ran, ==, 1);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/queue/push-timeout", test_push_timeout);
  g_test_add_func ("/queue/pop-timeout", test_pop_timeout);
  g_test_add_func ("/queue/fifo", test_fifo);
  g_test_add_func ("/queue/pop-woken-by-push", test_pop_woken_by_push);
  g_test_add_func ("/queue/push-woken-by-pop", test_push_woken_by_pop);
  g_test_add_func ("/queue/two-pops", test_two_pops);
  g_test_add_func ("/queue/two-pushes", test_two_pushes);
  g_test_add_func ("/queue/close-wakes-pop", test_close_wakes_pop);
  g_test_add_func ("/queue/close-wakes-push", test_close_wakes_push);
  g_test_add_func ("/queue/closed-fails-fast", test_closed_fails_fast);
  g_test_add_func ("/queue/free-items", test_free_items);
  g_test_add_func ("/deadline/ok", test_deadline_ok);
  g_test_add_func ("/deadline/error", test_deadline_error);
  g_test_add_func ("/deadline/timeout", test_deadline_timeout);
  g_test_add_func ("/deadline/no-free-data", test_deadline_no_free);
  return g_test_run ();
}
