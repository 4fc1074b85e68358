/* ppdiffuse — rank 0's stream engine: frames in, results out.
 *
 * The engine owns what rank 0 does for a stream besides its GStreamer
 * plumbing: rank 0's model (encode and decode), the worker mesh and its
 * start, reuse and stop, the chunks frames are encoded into, cache epochs,
 * the live settings (checked on a thread of the engine's, applied at a
 * chunk boundary, sent with the first chunk of an epoch), text prompts,
 * the warm-up passes, the collector thread and the measures of pace.
 *
 * Calls go down from the element (start, take settings, encode, warm up,
 * submit, decode, stop); the engine's threads call up through
 * PpStreamCallbacks.  This header is the element's only view of the layers
 * below: GLib and the small headers of the types it names. */
#pragma once

#include <glib.h>

#include "pp-error.h"
#include "pp-image.h"
#include "pp-log.h"
#include "pp-settings.h"

G_BEGIN_DECLS

typedef struct _PpStream PpStream;
/* A frame encoded into a chunk: submitted, it comes back as its result. */
typedef struct _PpStreamFrame PpStreamFrame;

/* The most workers a stream can have. */
#define PP_STREAM_MAX_WORKERS 256

/* Where a start is (PpStreamCallbacks.progress). */
typedef enum
{
  PP_STREAM_PROGRESS_SPAWNING,  /* spawning the n_workers workers */
  PP_STREAM_PROGRESS_WAITING,   /* waiting for worker @rank's handshake */
  PP_STREAM_PROGRESS_LOADING,   /* worker @rank has read @loaded_bytes */
  PP_STREAM_PROGRESS_RANK_READY,        /* worker @rank accepted the plan */
} PpStreamProgress;

typedef struct
{
  /* A start's progress; the starting thread. */
  void (*progress) (PpStreamProgress stage, guint rank, guint n_workers,
      guint64 loaded_bytes, gpointer data);
  /* Collector thread: @frame came back (the callee owns it).  Results come
   * in submit order. */
  void (*returned) (PpStreamFrame * frame, gpointer data);
  /* Collector thread: the mesh stopped returning frames; @outstanding were
   * still in it.  The collector ends. */
  void (*failed) (const GError * error, guint outstanding, gpointer data);
  /* Once per mesh, when the mesh's first measure of the work is in (the
   * warm-up passes, else the first frame back): pp_stream_pace says what
   * it expects.  The chain or the collector thread. */
  void (*measured) (gpointer data);
  /* Settings thread: the live settings as set now. */
  void (*snapshot) (PpSettings * live, gpointer data);
  /* Settings thread: @live was checked and takes effect at the next
   * frame. */
  void (*accepted) (const PpSettings * live, gpointer data);
  /* Settings thread: @live was refused (a warning follows). */
  void (*refused) (const PpSettings * live, gpointer data);
  /* Something a person should know that does not stop the stream. */
  void (*warning) (const gchar * message, const gchar * details,
      gpointer data);
} PpStreamCallbacks;

typedef struct
{
  guint n_workers;
  guint n_steps;
  const gchar *backend;         /* NULL: $PPDIFFUSE_BACKEND, else auto */
  const gchar *dtype;           /* weights' storage; NULL: the backend's */
  gint cuda_graphs;             /* 1, 0, -1: the backend decides
                                 * (PpModelLoad) */
  gboolean stream_batch;        /* workers batch the frames at their steps */
  guint frame_batch;            /* and up to this many frames at a step */
  const gchar *vae;             /* a VAE folder for rank 0; NULL: the
                                 * pipeline's vae/ */
  const gchar *lora;            /* LoRA files fused at load
                                 * (pp-lora.h); NULL: none */
  const gchar *worker_path;     /* NULL: $PPDIFFUSE_WORKER, then installed */
  const gchar *hosts;
  const gchar *hostfile;
  const gchar *dump_dir;
  guint timeout_ms;
  /* Frames the caller holds in flight at most (submitted, not yet freed). */
  guint max_in_flight;
  /* Warm-up passes: -1 as the backend wants, 0 none, 1 at least one. */
  gint warm_up;
} PpStreamConfig;

/* What the last mesh that stopped did. */
typedef struct
{
  gdouble wall_s;               /* first submit to last return */
  gdouble overlap;              /* Σ busy / (W × wall); 1.0 is perfect */
  guint64 chunks;               /* frames that went round the mesh */
  guint64 warm_ups;             /* warm-up passes, not in the above */
} PpStreamStats;

/* What the mesh expects of one frame, and the slice behind it. */
typedef struct
{
  gint64 round_us;              /* a frame round the workers */
  gint64 stage_us;              /* the slowest worker's slice */
  guint slowest;                /* that worker, world rank - 1 */
  guint slice_first, slice_end; /* its steps */
  const gchar *source;          /* what the numbers come from */
  gint64 round_allowance_us;
  gint64 stage_allowance_us;
  guint n_workers, n_steps;
  const gchar *advice;          /* what to change to keep up */
} PpStreamPace;

PpStream *pp_stream_new       (const PpStreamCallbacks * callbacks,
                               gpointer data);
/* Stops whatever runs (kept workers too) and frees. */
void      pp_stream_free      (PpStream * stream);

/* Starts a stream with @settings (a text prompt is encoded first): a mesh
 * kept by the last stop serves when it was started with the same
 * @config and takes @settings (*@reused), else one is spawned.  A
 * PP_ERROR_CONFIG or PP_ERROR_MODEL error is a setting a person must
 * change.  The settings thread and the collector run from here on. */
gboolean  pp_stream_start     (PpStream * stream,
                               const PpStreamConfig * config,
                               const PpSettings * settings,
                               gboolean * reused, GError ** error);
/* Ends the threads of a run.  With @keep, waits (up to timeout-ms) until
 * every frame still in the mesh came back (the caller discards them) and
 * keeps a healthy mesh for the next start: TRUE when kept.  Called with
 * no frame being submitted. */
gboolean  pp_stream_halt      (PpStream * stream, gboolean keep);
/* Stops the mesh and frees rank 0's model, once the caller freed every
 * frame of it; the stats of the mesh stay readable. */
void      pp_stream_release   (PpStream * stream);
gboolean  pp_stream_running   (PpStream * stream);

/* A live setting changed: checked on the settings thread while a stream
 * runs (a snapshot is asked for), else used at the next start. */
void      pp_stream_settings_changed (PpStream * stream);
/* Chain: new accepted settings start with the next frame; TRUE when they
 * do (a new cache epoch). */
gboolean  pp_stream_take_settings    (PpStream * stream);
/* The next frames start a new stream state (a flush, new caps). */
void      pp_stream_new_epoch        (PpStream * stream);
guint32   pp_stream_cache_epoch      (PpStream * stream);

/* Chain: @image encoded into a chunk (with the settings not yet sent). */
PpStreamFrame *pp_stream_encode (PpStream * stream, const PpImage * image,
                                 guint64 pts, GError ** error);
/* Chain, before the first frame of a mesh is submitted: the warm-up
 * passes, copies of @frame round the mesh.  FALSE with @error when they
 * failed (the mesh is failed). */
gboolean  pp_stream_warm_up   (PpStream * stream,
                               const PpStreamFrame * frame, GError ** error);
/* Chain: sends @frame (taken) into the mesh; @assigned is called with its
 * chunk id first, before it can come back.  FALSE with @error when the
 * mesh failed. */
typedef void (*PpStreamAssignedFunc) (guint64 chunk_id, gpointer data);
gboolean  pp_stream_submit    (PpStream * stream, PpStreamFrame * frame,
                               PpStreamAssignedFunc assigned, gpointer data,
                               GError ** error);
/* @result's sample decoded into @image. */
gboolean  pp_stream_decode    (PpStream * stream,
                               const PpStreamFrame * result,
                               PpImage * image, GError ** error);

guint64   pp_stream_frame_id        (const PpStreamFrame * frame);
/* When it was submitted (g_get_monotonic_time). */
gint64    pp_stream_frame_submit_us (const PpStreamFrame * frame);
void      pp_stream_frame_free      (PpStreamFrame * frame);

/* What a worker's last heartbeat counted. */
typedef struct
{
  guint64 cache_builds;         /* the UNet's cross-attention K/V cache */
  guint64 stream_bytes;         /* the temporal feature bank's bytes */
  guint64 batched_steps;        /* frame-steps run in stream batches */
  guint64 cpu_us;               /* the worker process's CPU time, user
                                 * and system, since it started */
  guint64 seq;                  /* which heartbeat said it */
  gint64 heard_us;              /* when it came (g_get_monotonic_time) */
} PpStreamWorkerCounts;

/* The busy seconds and the counts (K/V cache builds, the bytes of the
 * per-stream state, the frame-steps run in stream batches, the CPU time)
 * of each worker, as its heartbeats last said; the number of workers. */
guint     pp_stream_worker_busy (PpStream * stream, gdouble * busy_s,
                                 guint n);
guint     pp_stream_worker_counts (PpStream * stream,
                                 PpStreamWorkerCounts * counts, guint n);
void      pp_stream_pace        (PpStream * stream, PpStreamPace * pace);
/* The CPU time rank 0's process has used, user and system, all its
 * threads (the application's own among them), in µs: what the workers'
 * counts say of theirs. */
guint64   pp_stream_rank0_cpu_us (void);
void      pp_stream_last_stats  (PpStream * stream, PpStreamStats * stats);
/* Rank 0's compute device (its backend's description: "CPU, 16 cores,
 * …", "cuda:0 NVIDIA H200, sm_90, …"), of the mesh running or the last
 * one, an interned string; NULL before the first start.  Allocates
 * nothing: the stats read it at every interval. */
const gchar *pp_stream_device   (PpStream * stream);
/* The workers' (pp_mesh_worker_devices: backend, device, host CPU and
 * host as each handshake said), interned, index = rank - 1, at most @n of
 * them into @devices; how many workers there are, at most
 * PP_STREAM_MAX_WORKERS (0 before the first start).  Allocates
 * nothing. */
guint     pp_stream_worker_devices (PpStream * stream,
                                 const gchar ** devices, guint n);

G_END_DECLS
