/* GStreamer ppdiffuse — the items of the FIFO between the chain and the
 * src task.
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */
#pragma once

#include <gst/gst.h>
#include <gst/video/video.h>

#include "pp-stream.h"

G_BEGIN_DECLS

/* One entry of the ordered FIFO between the chain and the src task: a
 * frame in flight or a serialized event keeping its place among them.
 * Frames' items are kept for reuse (the spare items): a frame allocates
 * none. */
typedef struct
{
  GList link;                   /* in the FIFO or the spare list; data =
                                 * the item */
  GstEvent *event;              /* set for an event item */
  GstBuffer *buffer;            /* the output: a copy of the input from the
                                 * element's pool (gstppdiffuse-pool.c) */
  GstVideoInfo info;            /* caps the frame arrived with */
  guint64 chunk_id;             /* as the mesh assigned it at submit */
  PpStreamFrame *result;        /* the frame back from the mesh, or NULL */
  gboolean discont;             /* frames were dropped just before it */
  gboolean spare;               /* a frame's: back to the spare items */
  gboolean repeat;              /* a frame skipped as similar: the last
                                 * output goes out again with this
                                 * buffer's timestamps and flags; it never
                                 * enters the mesh */
  gboolean keep_output;         /* sent while the similarity filter was
                                 * on: its output is kept for repeats */
} GstPpDiffuseItem;

/* Frames' items come from @spare (made on demand, counted in *@n_made);
 * events' from the heap.  Called with the element's lock held. */
GstPpDiffuseItem *gst_pp_diffuse_item_take_frame (GQueue * spare,
    guint * n_made);
GstPpDiffuseItem *gst_pp_diffuse_item_new_event (GstEvent * event);
void gst_pp_diffuse_items_reserve (GQueue * spare, guint * n_made, guint n);
/* Drops what @item holds. */
void gst_pp_diffuse_item_clear (GstPpDiffuseItem * item);
/* Clears @item and gives it back: a frame's to @spare, an event's to the
 * heap. */
void gst_pp_diffuse_item_recycle (GQueue * spare, GstPpDiffuseItem * item);
/* Frees every item of @items. */
void gst_pp_diffuse_items_free (GQueue * items);

G_END_DECLS
