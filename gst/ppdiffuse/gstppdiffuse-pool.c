/* GStreamer ppdiffuse — buffers: what upstream is asked to allocate, and
 * the element's own pool of output buffers.
 *
 * The element never keeps upstream's buffer while its frame is in the
 * mesh: the chain encodes the frame, copies the buffer into one of the
 * element's own (the one copy per frame, docs/element.md) and lets the
 * input go, so a source with a small fixed pool (a camera) is never
 * starved by max-in-flight.  The src task decodes the returning sample
 * into that copy, whose alpha and padding bytes are the input's.
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */

#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "gstppdiffuse-pool.h"

#include <string.h>

GST_DEBUG_CATEGORY_EXTERN (gst_pp_diffuse_debug);
#define GST_CAT_DEFAULT gst_pp_diffuse_debug

/* Output buffers in the element at once: up to limit frames in flight
 * (the chain waits for room before it takes a buffer), the one the src
 * task is pushing (no longer counted in flight) and the one the chain is
 * filling. */
#define OUTPUT_BUFFERS_IN_ELEMENT(limit) ((limit) + 2)

void
gst_pp_diffuse_propose_allocation (GstPpDiffuse * self, GstQuery * query)
{
  GstCaps *caps = NULL;
  GstVideoInfo info;
  guint size = 0;

  gst_query_parse_allocation (query, &caps, NULL);
  if (caps != NULL && gst_video_info_from_caps (&info, caps))
    size = GST_VIDEO_INFO_SIZE (&info);
  /* As a filter between us and upstream would: what we hold is added to
   * an entry already there, else it is the entry, with no pool of ours
   * (upstream makes its own with at least that many buffers). */
  if (gst_query_get_n_allocation_pools (query) > 0) {
    GstBufferPool *pool = NULL;
    guint entry_size, min, max;

    gst_query_parse_nth_allocation_pool (query, 0, &pool, &entry_size, &min,
        &max);
    min += GST_PP_DIFFUSE_INPUT_FRAMES_HELD;
    if (max != 0 && max < min)
      max = min;
    gst_query_set_nth_allocation_pool (query, 0, pool, MAX (entry_size, size),
        min, max);
    if (pool != NULL)
      gst_object_unref (pool);
  } else {
    gst_query_add_allocation_pool (query, NULL, size,
        GST_PP_DIFFUSE_INPUT_FRAMES_HELD, 0);
  }
  /* Frames are read through GstVideoFrame: any layout will do. */
  gst_query_add_allocation_meta (query, GST_VIDEO_META_API_TYPE, NULL);
  GST_DEBUG_OBJECT (self, "allocation: %u input buffers held, %u bytes",
      GST_PP_DIFFUSE_INPUT_FRAMES_HELD, size);
}

void
gst_pp_diffuse_clear_output_pool (GstPpDiffuse * self)
{
  if (self->out_pool == NULL)
    return;
  gst_buffer_pool_set_active (self->out_pool, FALSE);
  gst_clear_object (&self->out_pool);
}

/* The pool for frames of @info in buffers of @size bytes: the one there
 * is when it was made for them, else a new one.  A caps change (each
 * frame's own info) or another buffer size makes it anew. */
static GstBufferPool *
output_pool_for (GstPpDiffuse * self, const GstVideoInfo * info, gsize size,
    GError ** error)
{
  const guint n = OUTPUT_BUFFERS_IN_ELEMENT (self->limit);
  GstStructure *config;
  GstCaps *caps;

  if (self->out_pool != NULL && self->out_pool_size == size
      && gst_video_info_is_equal (&self->out_pool_info, info))
    return self->out_pool;
  gst_pp_diffuse_clear_output_pool (self);
  caps = gst_video_info_to_caps (info);
  self->out_pool = gst_video_buffer_pool_new ();
  config = gst_buffer_pool_get_config (self->out_pool);
  /* The frames in the element are made up front; max is open (0) because
   * downstream may keep buffers we pushed for as long as it likes (a
   * queue, a sink's last sample): such buffers grow the pool instead of
   * stalling the chain on an empty one.  No GstVideoMeta of the pool's
   * own: the input's metas, its layout among them, are copied. */
  gst_buffer_pool_config_set_params (config, caps, (guint) size, n, 0);
  gst_caps_unref (caps);
  if (!gst_buffer_pool_set_config (self->out_pool, config)
      || !gst_buffer_pool_set_active (self->out_pool, TRUE)) {
    g_set_error (error, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NO_SPACE_LEFT,
        "cannot set up a pool of %u output buffers of %" G_GSIZE_FORMAT
        " bytes for %dx%d %s frames", n, size, GST_VIDEO_INFO_WIDTH (info),
        GST_VIDEO_INFO_HEIGHT (info), GST_VIDEO_INFO_NAME (info));
    gst_clear_object (&self->out_pool);
    return NULL;
  }
  self->out_pool_info = *info;
  self->out_pool_size = size;
  GST_DEBUG_OBJECT (self, "output pool: %u buffers of %" G_GSIZE_FORMAT
      " bytes for %dx%d %s", n, size, GST_VIDEO_INFO_WIDTH (info),
      GST_VIDEO_INFO_HEIGHT (info), GST_VIDEO_INFO_NAME (info));
  return self->out_pool;
}

/* gst_buffer_copy_into leaves out metas tagged "memory", GstVideoMeta
 * among them, when the memory is not copied with them: the layout of the
 * bytes copied goes across here. */
static void
copy_layout (GstBuffer * in, GstBuffer * out)
{
  GstVideoMeta *meta = gst_buffer_get_video_meta (in), *copy;

  if (meta == NULL || gst_buffer_get_video_meta (out) != NULL)
    return;
  copy = gst_buffer_add_video_meta_full (out, meta->flags, meta->format,
      meta->width, meta->height, meta->n_planes, meta->offset, meta->stride);
  gst_video_meta_set_alignment (copy, meta->alignment);
}

GstBuffer *
gst_pp_diffuse_copy_to_output (GstPpDiffuse * self, GstBuffer * in,
    const GstVideoInfo * info, GError ** error)
{
  const gsize in_size = gst_buffer_get_size (in);
  /* A video pool's buffers hold at least the caps' default frame. */
  GstBufferPool *pool = output_pool_for (self, info,
      MAX (in_size, GST_VIDEO_INFO_SIZE (info)), error);
  GstBuffer *out = NULL;
  GstMapInfo map;
  GstFlowReturn ret;

  if (pool == NULL)
    return NULL;
  ret = gst_buffer_pool_acquire_buffer (pool, &out, NULL);
  if (ret != GST_FLOW_OK) {
    g_set_error (error, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_NO_SPACE_LEFT,
        "cannot get an output buffer from the element's pool: %s",
        gst_flow_get_name (ret));
    return NULL;
  }
  /* The one copy per frame: every byte, so alpha and padding are the
   * input's, and the layout meta with them. */
  if (!gst_buffer_map (out, &map, GST_MAP_WRITE)) {
    gst_buffer_unref (out);
    g_set_error (error, GST_RESOURCE_ERROR, GST_RESOURCE_ERROR_WRITE,
        "cannot map an output buffer for writing");
    return NULL;
  }
  gst_buffer_extract (in, 0, map.data, in_size);
  gst_buffer_unmap (out, &map);
  gst_buffer_copy_into (out, in, GST_BUFFER_COPY_METADATA, 0, -1);
  copy_layout (in, out);
  return out;
}

