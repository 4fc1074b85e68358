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

#include "gstppdiffuse-similarity.h"
#include "pp-chunk-pool.h"
#include "pp-mesh.h"
#include "pp-model.h"
#include "gstppdiffuse-stats.h"

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

#define GST_TYPE_PP_DIFFUSE_DTYPE (gst_pp_diffuse_dtype_get_type ())
GType gst_pp_diffuse_dtype_get_type (void);

typedef enum
{
  GST_PP_DIFFUSE_DTYPE_AUTO,
  GST_PP_DIFFUSE_DTYPE_F32,
  GST_PP_DIFFUSE_DTYPE_F16,
  GST_PP_DIFFUSE_DTYPE_BF16,
} GstPpDiffuseDtype;

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
  PpChunk *result;              /* the chunk back from the mesh, or NULL */
  gboolean discont;             /* frames were dropped just before it */
  gboolean spare;               /* a frame's: back to the spare items */
  gboolean repeat;              /* a frame skipped as similar: the last
                                 * output goes out again with this
                                 * buffer's timestamps and flags; it never
                                 * enters the mesh */
  gboolean keep_output;         /* sent while the similarity filter was
                                 * on: its output is kept for repeats */
} GstPpDiffuseItem;

/* The properties a running mesh takes at a chunk boundary: together they
 * make the model URI every rank computes with. */
typedef struct
{
  gchar *model_uri;
  gchar *prompt;                /* text, or a blend; NULL or "": none */
  gchar *prompt_embeds;
  gdouble strength;
  guint64 seed;
  gchar *t_index_list;
} GstPpDiffuseLive;

struct _GstPpDiffuse
{
  GstElement parent;

  GstPad *sinkpad;
  GstPad *srcpad;

  /* properties, under the object lock */
  guint ranks;
  guint steps;
  guint max_in_flight;
  GstPpDiffuseLive settings;    /* as set */
  GstPpDiffuseLive accepted;    /* as last checked and accepted */
  GstPpDiffuseBackend backend;
  GstPpDiffuseDtype dtype;
  gboolean cuda_graphs;
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

  /* set up on READY→PAUSED, torn down on PAUSED→READY */
  PpMesh *mesh;
  PpModel *model;               /* rank 0's image phases */
  /* With keep-workers, the mesh and model outlive a stop
   * (gstppdiffuse-restart.c): the settings they were started with. */
  gchar *mesh_key;
  guint limit;                  /* chunks allowed in flight */
  GThread *collector;
  PpChunkPool *chunks;          /* the chunks frames are encoded into */
  /* Chain thread: the sample the model made of the last frame size it met,
   * so that a pooled chunk's sample of that shape is encoded into. */
  gint sample_width, sample_height;
  PpTensorSpec sample_spec;
  /* Streaming thread (chain, and the serialized events that reset it):
   * the similarity filter's reference and draws. */
  PpSimilarityFilter *similar;
  /* Src task (and flushes, once it is paused): the last frame pushed,
   * kept while the similarity filter is on, for repeats. */
  GstBuffer *last_output;

  /* Live settings: a change of a live property while the mesh runs is
   * checked on the settings thread; once accepted its model URI waits in
   * next_uri (under lock) for the chain, which applies it to rank 0's model
   * before the next frame, starts a new cache epoch and sends the URI with
   * that epoch's chunks until one has gone out (unsent_uri, chain thread
   * only). */
  GThread *settings_thread;
  GCond settings_cond;
  gboolean settings_dirty;      /* under lock: a live property changed */
  gboolean settings_stop;       /* under lock */
  gchar *next_uri;              /* under lock */
  PpTensor *next_states;        /* under lock: its prompt's, or NULL */
  PpTensor *unsent_states;      /* chain thread: unsent_uri's prompt's */
  /* The prompt's text encoder and last states: start, then the settings
   * thread. */
  struct _GstPpDiffusePrompt *prompt_cache;
  gchar *running_uri;           /* under lock: rank 0's model runs it */
  gchar *unsent_uri;            /* chain thread */
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
  guint outstanding;            /* submitted, not yet collected */
  gboolean flushing;
  gboolean collector_stop;
  gboolean mesh_failed;         /* an error stopped the mesh mid-stream */
  GstFlowReturn srcresult;
  GstVideoInfo in_info;
  gboolean have_info;
  guint32 cache_epoch;
  GstClockTime latency;         /* submit → return, p95 since start */
  GstClockTime reported_latency;        /* in the last latency answer */
  guint64 frames_in;
  guint64 frames_out;
  guint64 dropped_flush;         /* frames discarded by a flush or a stop */
  guint64 dropped_error;        /* frames lost to a downstream error */
  guint64 dropped_qos;          /* frames too late for downstream (QoS) */
  guint64 dropped_leaky;        /* frames refused while the mesh was full */
  guint64 skipped_similar;      /* frames skipped as similar (repeats) */
  PpMeshStats mesh_stats;       /* of the last mesh that stopped */
  gboolean warmed_up;           /* chain thread: this mesh had its pass */
  gint pace_checked;            /* atomic: gst_pp_diffuse_pace_check ran
                                 * for this mesh (gstppdiffuse-pace.h) */
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
