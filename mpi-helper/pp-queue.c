/* ppdiffuse — bounded FIFO. */
#include "pp-queue.h"

struct _PpQueue
{
  GMutex lock;
  GCond cond;
  GQueue items;
  guint capacity;
  gboolean closed;
};

PpQueue *
pp_queue_new (guint capacity)
{
  PpQueue *q = g_new0 (PpQueue, 1);

  g_assert (capacity > 0);
  g_mutex_init (&q->lock);
  g_cond_init (&q->cond);
  g_queue_init (&q->items);
  q->capacity = capacity;
  return q;
}

void
pp_queue_free (PpQueue * q, GDestroyNotify free_item)
{
  if (q == NULL)
    return;
  g_queue_clear_full (&q->items, free_item);
  g_mutex_clear (&q->lock);
  g_cond_clear (&q->cond);
  g_free (q);
}

static gboolean
wait_until (PpQueue * q, gint64 deadline_us)
{
  if (deadline_us == PP_NO_DEADLINE) {
    g_cond_wait (&q->cond, &q->lock);
    return TRUE;
  }
  return g_cond_wait_until (&q->cond, &q->lock, deadline_us);
}

gboolean
pp_queue_push (PpQueue * q, gpointer item, gint64 deadline_us)
{
  gboolean ok;

  g_mutex_lock (&q->lock);
  while (!q->closed && q->items.length >= q->capacity)
    if (!wait_until (q, deadline_us))
      break;
  ok = !q->closed && q->items.length < q->capacity;
  if (ok) {
    g_queue_push_tail (&q->items, item);
    g_cond_broadcast (&q->cond);
  }
  g_mutex_unlock (&q->lock);
  return ok;
}

gpointer
pp_queue_pop (PpQueue * q, gint64 deadline_us)
{
  gpointer item = NULL;

  g_mutex_lock (&q->lock);
  while (!q->closed && q->items.length == 0)
    if (!wait_until (q, deadline_us))
      break;
  if (!q->closed && q->items.length > 0) {
    item = g_queue_pop_head (&q->items);
    g_cond_broadcast (&q->cond);
  }
  g_mutex_unlock (&q->lock);
  return item;
}

void
pp_queue_close (PpQueue * q)
{
  g_mutex_lock (&q->lock);
  q->closed = TRUE;
  g_cond_broadcast (&q->cond);
  g_mutex_unlock (&q->lock);
}

gboolean
pp_queue_is_closed (PpQueue * q)
{
  gboolean closed;

  g_mutex_lock (&q->lock);
  closed = q->closed;
  g_mutex_unlock (&q->lock);
  return closed;
}
