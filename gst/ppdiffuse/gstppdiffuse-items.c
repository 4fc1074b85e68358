/* GStreamer ppdiffuse — the items of the FIFO between the chain and the
 * src task.
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstppdiffuse-items.h"

#include <string.h>

void
gst_pp_diffuse_item_clear (GstPpDiffuseItem * item)
{
  gst_clear_event (&item->event);
  gst_clear_buffer (&item->buffer);
  g_clear_pointer (&item->result, pp_stream_frame_free);
}

/* An item for a frame: a spare one.  Frames in the element are at most
 * limit + 1 (the one the src task is pushing no longer counts in
 * in_flight), and that many spare items are made at start.  Called with
 * the lock held. */
GstPpDiffuseItem *
gst_pp_diffuse_item_take_frame (GQueue * spare, guint * n_made)
{
  GList *link = g_queue_pop_head_link (spare);
  GstPpDiffuseItem *item;

  if (link != NULL) {
    item = link->data;
  } else {
    item = g_new (GstPpDiffuseItem, 1);
    (*n_made)++;
  }
  memset (item, 0, sizeof *item);
  item->link.data = item;
  item->spare = TRUE;
  return item;
}

/* An item for a serialized event: events are few, theirs are made anew. */
GstPpDiffuseItem *
gst_pp_diffuse_item_new_event (GstEvent * event)
{
  GstPpDiffuseItem *item = g_new0 (GstPpDiffuseItem, 1);

  item->link.data = item;
  item->event = event;
  return item;
}

/* Makes spare items until there are @n: one per frame the element can
 * hold.  Called with the lock held. */
void
gst_pp_diffuse_items_reserve (GQueue * spare, guint * n_made, guint n)
{
  while (*n_made < n) {
    GstPpDiffuseItem *item = g_new0 (GstPpDiffuseItem, 1);

    item->link.data = item;
    g_queue_push_head_link (spare, &item->link);
    (*n_made)++;
  }
}

/* Clears @item and gives it back: a frame's to the spare items, an
 * event's to the heap.  Called with the lock held. */
void
gst_pp_diffuse_item_recycle (GQueue * spare, GstPpDiffuseItem * item)
{
  gst_pp_diffuse_item_clear (item);
  if (item->spare)
    g_queue_push_head_link (spare, &item->link);
  else
    g_free (item);
}

void
gst_pp_diffuse_items_free (GQueue * items)
{
  GList *link;

  while ((link = g_queue_pop_head_link (items)) != NULL) {
    gst_pp_diffuse_item_clear (link->data);
    g_free (link->data);
  }
}
