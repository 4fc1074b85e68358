/* ppdiffuse — bounded FIFO. */
#include "pp-queue.h"

/* A ring of @capacity slots, allocated once: a push allocates nothing. */
struct _PpQueue
{
  GMutex lock;
  GCond cond;
  gpointer *slots;
  guint capacity;
  guint head;                   /* the oldest item's slot */
  guint length;
  gboolean closed;
};

PpQueue *
pp_queue_new (guint capacity)
{
  PpQueue *q = g_new0 (PpQueue, 1);

  g_assert (capacity > 0);
  g_mutex_init (&q->lock);
  g_cond_init (&q->cond);
  q->slots = g_new0 (gpointer, capacity);
  q->capacity = capacity;
  return q;
}

void
pp_queue_free (PpQueue * q, GDestroyNotify free_item)
{
  if (q == NULL)
    return;
  for (guint i = 0; i < q->length && free_item != NULL; i++)
    free_item (q->slots[(q->head + i) % q->capacity]);
  g_free (q->slots);
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
  while (!q->closed && q->length >= q->capacity)
    if (!wait_until (q, deadline_us))
      break;
  ok = !q->closed && q->length < q->capacity;
  if (ok) {
    q->slots[(q->head + q->length) % q->capacity] = item;
    q->length++;
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
  while (!q->closed && q->length == 0)
    if (!wait_until (q, deadline_us))
      break;
  if (!q->closed && q->length > 0) {
    item = q->slots[q->head];
    q->head = (q->head + 1) % q->capacity;
    q->length--;
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
