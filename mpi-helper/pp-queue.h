/* ppdiffuse — a bounded FIFO between threads, every wait under a deadline. */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

typedef struct _PpQueue PpQueue;

#define PP_NO_DEADLINE G_MAXINT64

PpQueue  *pp_queue_new  (guint capacity);
void      pp_queue_free (PpQueue * queue, GDestroyNotify free_item);
/* Waits for room until @deadline_us (g_get_monotonic_time () scale).
 * FALSE when the deadline passed or the queue was closed; the item is then
 * still the caller's. */
gboolean  pp_queue_push (PpQueue * queue, gpointer item, gint64 deadline_us);
/* Waits for an item until @deadline_us; NULL on timeout or close. */
gpointer  pp_queue_pop  (PpQueue * queue, gint64 deadline_us);
/* Wakes every waiter; later pushes and pops fail at once. */
void      pp_queue_close (PpQueue * queue);
gboolean  pp_queue_is_closed (PpQueue * queue);

G_END_DECLS
