/* GStreamer ppdiffuse — live video diffusion, pipeline-parallel over an
 * MPI worker mesh.
 *
 * This library is free software; you can redistribute it and/or modify it
 * under the terms of the GNU Lesser General Public License as published by
 * the Free Software Foundation; either version 2.1 of the License, or (at
 * your option) any later version. */
#pragma once

#include <gst/gst.h>
#include <gst/video/video.h>

#include "gstppdiffuse-items.h"
#include "gstppdiffuse-rgb.h"
#include "gstppdiffuse-similarity.h"
#include "gstppdiffuse-stats.h"
#include "pp-stream.h"

G_BEGIN_DECLS

#define GST_TYPE_PP_DIFFUSE (gst_pp_diffuse_get_type ())
G_DECLARE_FINAL_TYPE (GstPpDiffuse, gst_pp_diffuse, GST, PP_DIFFUSE,
    GstElement)

#define GST_TYPE_PP_DIFFUSE_BACKEND (gst_pp_diffuse_backend_get_type ())
GType gst_pp_diffuse_backend_get_type (void);

typedef enum
{
  GST_PP_DIFFUSE_BACKEND_AUTO,
  GST_PP_DIFFUSE_BACKEND_CPU,
  GST_PP_DIFFUSE_BACKEND_CUDA,
  GST_PP_DIFFUSE_BACKEND_CPU_STRICT,
} GstPpDiffuseBackend;

#define GST_TYPE_PP_DIFFUSE_TEMPORAL (gst_pp_diffuse_temporal_get_type ())
GType gst_pp_diffuse_temporal_get_type (void);

typedef enum
{
  GST_PP_DIFFUSE_TEMPORAL_OFF,
  GST_PP_DIFFUSE_TEMPORAL_FEATURE_BANK,
} GstPpDiffuseTemporal;

#define GST_TYPE_PP_DIFFUSE_DTYPE (gst_pp_diffuse_dtype_get_type ())
GType gst_pp_diffuse_dtype_get_type (void);

typedef enum
{
  GST_PP_DIFFUSE_DTYPE_AUTO,
  GST_PP_DIFFUSE_DTYPE_F32,
  GST_PP_DIFFUSE_DTYPE_F16,
  GST_PP_DIFFUSE_DTYPE_BF16,
} GstPpDiffuseDtype;


struct _GstPpDiffuse
{
  GstElement parent;

  GstPad *sinkpad;
  GstPad *srcpad;

  /* properties, under the object lock */
  guint ranks;
  guint steps;
  guint max_in_flight;
  PpSettings settings;          /* the live properties, as set */
  PpSettings accepted;          /* as last checked and accepted */
  GstPpDiffuseBackend backend;
  gint cuda_device_id;          /* rank 0's GPU; -1: the backend decides */
  GstPpDiffuseDtype dtype;
  gboolean cuda_graphs;
  gboolean cuda_graphs_set;     /* set explicitly: else the backend decides */
  gboolean stream_batch;
  guint frame_batch;            /* frames a worker's pass takes at a step */
  gchar *vae;                   /* a VAE folder; NULL: the model's vae/ */
  gchar *lora;                  /* LoRA files fused at load; NULL: none */
  guint timeout_ms;
  gchar *worker;
  gchar *hosts;
  gchar *hostfile;
  gchar *dump_dir;
  gboolean warm_up;
  gboolean warm_up_set;         /* set explicitly: else the backend decides */
  gboolean leaky;
  gboolean leaky_set;           /* leaky was set: it overrides liveness */
  gboolean qos;
  guint stats_interval_ms;
  gdouble similarity_threshold;
  gboolean keep_workers;

  /* Rank 0's stream engine: the mesh, rank 0's model, the settings. */
  PpStream *stream;
  guint limit;                  /* chunks allowed in flight */
  /* Streaming thread (chain, and the serialized events that reset it):
   * the similarity filter's reference and draws. */
  PpSimilarityFilter *similar;
  /* Frames as RGB images: the chain's (encode, similarity) and the src
   * task's (decode). */
  GstPpDiffuseRgb *rgb_in, *rgb_out;
  /* Src task (and flushes, once it is paused): the last frame pushed,
   * kept while the similarity filter is on, for repeats. */
  GstBuffer *last_output;

  /* Chain thread: the output buffers, made for frames of out_pool_info in
   * buffers of out_pool_size bytes (gstppdiffuse-pool.c). */
  GstBufferPool *out_pool;
  GstVideoInfo out_pool_info;
  gsize out_pool_size;

  /* stream state, under lock */
  GMutex lock;
  GCond cond;
  GQueue fifo;                  /* GstPpDiffuseItem*, by their links */
  GQueue spare_items;           /* cleared frame items, for reuse */
  guint n_spare_items;          /* made: the most frames held at once */
  GstPpDiffuseItem *submitting; /* in the FIFO, its chunk id not yet known */
  guint in_flight;              /* submitted, not yet pushed or discarded */
  gboolean flushing;
  gboolean mesh_failed;         /* an error stopped the mesh mid-stream */
  GstFlowReturn srcresult;
  GstVideoInfo in_info;
  gboolean have_info;
  GstClockTime latency;         /* submit → return, p95 since start */
  GstClockTime reported_latency;        /* in the last latency answer */
  guint64 frames_in;
  guint64 frames_out;
  guint64 dropped_flush;         /* frames discarded by a flush or a stop */
  guint64 dropped_error;        /* frames lost to a downstream error */
  guint64 dropped_qos;          /* frames too late for downstream (QoS) */
  guint64 dropped_leaky;        /* frames refused while the mesh was full */
  guint64 skipped_similar;      /* frames skipped as similar (repeats) */
  gboolean discont_next;        /* a frame was dropped: mark the next one */
  gboolean live;                /* upstream is live (latency query) */
  GstSegment segment;           /* of the input, for QoS */
  GstClockTime qos_earliest;    /* running time before which frames are late */
  PpLatencyTracker *latencies;  /* submit → return times */

  /* the ppdiffuse-stats intervals (gstppdiffuse-live.c) */
  struct _GstPpDiffuseStatsTimer *stats_timer;
};

GST_ELEMENT_REGISTER_DECLARE (ppdiffuse);

G_END_DECLS
